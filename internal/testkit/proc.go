package testkit

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a test started: it knows when the process has ended
// and with what error. Stopping it when the test ends is the caller's
// choice (e2e logs a slow stop, faults also fails on a panic in the log).
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, once done is closed
}

// StartProc starts cmd, whose output the caller has directed, and fails t
// when it cannot.
func StartProc(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Err is the process's exit error (nil for status 0); it may be read
// once Exited, Ended or Wait has reported the end.
func (p *Proc) Err() error { return p.err }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Ended reports whether the process has ended, and then its error (the
// form WaitReady takes).
func (p *Proc) Ended() (bool, error) {
	if p.Exited() {
		return true, p.err
	}
	return false, nil
}

// Signal sends sig unless the process has ended.
func (p *Proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		p.Cmd.Process.Signal(sig)
	}
}

// Wait reports whether the process ended within d.
func (p *Proc) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to end; past
// that it kills it, waits for it, and returns false.
func (p *Proc) Stop(timeout time.Duration) bool {
	p.Signal(syscall.SIGTERM)
	if p.Wait(timeout) {
		return true
	}
	p.Cmd.Process.Kill()
	<-p.done
	return false
}

// StopWhenDone stops the process (Stop) when t ends, fails t when it had
// to be killed, and logs its output, out, when t has failed.
func (p *Proc) StopWhenDone(t testing.TB, timeout time.Duration, out fmt.Stringer) {
	t.Cleanup(func() {
		if !p.Stop(timeout) {
			t.Errorf("%s did not stop within %v of SIGTERM; killed it\n%s", p.Name, timeout, out)
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.Name, out)
		}
	})
}
