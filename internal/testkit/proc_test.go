package testkit

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestProcEnds(t *testing.T) {
	p := StartProc(t, "true", exec.Command("true"))
	if !p.Wait(5 * time.Second) {
		t.Fatal("true did not end within 5s")
	}
	if ended, err := p.Ended(); !ended || err != nil || !p.Exited() || p.Err() != nil {
		t.Errorf("after true: Ended() = %v, %v; Exited() = %v; Err() = %v; want ended with status 0", ended, err, p.Exited(), p.Err())
	}
	p.Signal(syscall.SIGTERM) // no process any more: nothing to do
}

func TestProcStop(t *testing.T) {
	p := StartProc(t, "sleep", exec.Command("sleep", "30"))
	if ended, _ := p.Ended(); ended || p.Exited() {
		t.Fatal("sleep 30 reported ended at once")
	}
	if !p.Stop(5 * time.Second) {
		t.Fatal("sleep did not stop within 5s of SIGTERM")
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("Err() = %v, want killed by SIGTERM", p.Err())
	}
}

func TestProcStopKills(t *testing.T) {
	// The shell ignores SIGTERM, says so, and execs sleep, which keeps
	// the ignored signal.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo trapped; exec sleep 30`)
	cmd.Stdout = w
	p := StartProc(t, "sh", cmd)
	w.Close()
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "trapped\n" {
		t.Fatalf("sh wrote %q, %v; want trapped", line, err)
	}
	start := time.Now()
	if p.Stop(300 * time.Millisecond) {
		t.Fatal("Stop = true for a process that ignores SIGTERM")
	}
	if !p.Exited() || time.Since(start) > 5*time.Second {
		t.Errorf("after Stop: Exited() = %v after %v; want killed at once after the timeout", p.Exited(), time.Since(start))
	}
}

func TestStopWhenDone(t *testing.T) {
	var p *Proc
	t.Run("inner", func(t *testing.T) {
		p = StartProc(t, "sleep", exec.Command("sleep", "30"))
		p.StopWhenDone(t, 5*time.Second, &Log{})
	})
	if !p.Exited() {
		t.Error("the process outlived its test")
	}
}

func TestRedisStoreYAML(t *testing.T) {
	got := RedisStoreYAML("ready:", time.Second, "127.0.0.1:7000", "127.0.0.1:7001")
	want := "store:\n  backend: redis\n  redis: {addrs: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], prefix: \"ready:\"}\n  timeout: 1s\n  on_error: error\n"
	if got != want {
		t.Errorf("RedisStoreYAML = %q, want %q", got, want)
	}
}
