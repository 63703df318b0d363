package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// Time bounds of these tests.
const (
	waitTimeout = 20 * time.Second
	stopTimeout = 15 * time.Second
)

// proc is a process started by a test and stopped when it ends.
type proc struct {
	*testkit.Proc
	log *testkit.Log // standard output and error
}

// startProc starts a process whose output goes to its log, and stops it
// (SIGTERM, then SIGKILL after stopTimeout) when the test ends.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{log: &testkit.Log{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	p.Proc = testkit.StartProc(t, name, cmd)
	p.StopWhenDone(t, stopTimeout, p.log)
	return p
}

// sluice is a `sluice serve` process.
type sluice struct {
	*proc
	http, grpc string
	admin      string // listen.admin's address, when set
	readyFile  string
}

// startSluice runs `sluice serve` with args and waits until it listens.
func startSluice(t *testing.T, name string, args ...string) *sluice {
	t.Helper()
	bin := testkit.Sluice(t)
	s := &sluice{readyFile: filepath.Join(t.TempDir(), "ready.json")}
	args = append([]string{"serve", "--ready-file", s.readyFile}, args...)
	s.proc = startProc(t, name, exec.Command(bin, args...))
	r := testkit.WaitReady(t, name, s.readyFile, waitTimeout, s.Ended, s.log)
	s.http, s.grpc, s.admin = r.HTTP, r.GRPC, r.Admin
	return s
}

// startInstances runs n `sluice serve` processes with args, named
// "sluice 1" to "sluice n", and waits until each listens.
func startInstances(t *testing.T, n int, args ...string) []*sluice {
	t.Helper()
	instances := make([]*sluice, n)
	for i := range instances {
		instances[i] = startSluice(t, fmt.Sprintf("sluice %d", i+1), args...)
	}
	return instances
}

// check asks the service for one decision and returns the answer's body.
func (s *sluice) check(t *testing.T, limit, key string) string {
	t.Helper()
	body, err := s.decide(limit, key)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// decide asks the service for one decision and returns the answer's body;
// unlike check, it may be called from any goroutine.
func (s *sluice) decide(limit, key string) (string, error) {
	req, err := http.NewRequest("POST", "http://"+s.http+"/v1/check", strings.NewReader(fmt.Sprintf(`{"limit":%q,"key":%q}`, limit, key)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, b, err := testkit.Fetch(http.DefaultClient, req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.Name, err)
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("%s: POST /v1/check = %d %s", s.Name, resp.StatusCode, b)
	}
	return string(b), nil
}

// TestSignals runs the binary and sends it real signals: SIGHUP reloads,
// SIGTERM shuts down with status 0 and removes the ready file, and a
// second SIGTERM during the drain delay ends the process at once.
func TestSignals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := testkit.WriteFile(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  a: {algorithm: token_bucket, limit: 5, period: 1m}
`)
	s := startSluice(t, "sluice", "--config", path, "--watch", "0")
	if body := s.check(t, "a", "k"); !strings.HasPrefix(body, `{"allowed":true,"limit":5,"remaining":4,`) {
		t.Fatalf("check a = %s", body)
	}
	testkit.WriteFile(t, path, `listen: {http: "127.0.0.1:0"}
limits:
  a: {algorithm: token_bucket, limit: 5, period: 1m}
  b: {algorithm: fixed_window, limit: 1, period: 1h}
`)
	s.Signal(syscall.SIGHUP)
	testkit.WaitFor(t, waitTimeout, "limit b after SIGHUP", func() bool {
		resp, err := http.Post("http://"+s.http+"/v1/check", "application/json", strings.NewReader(`{"limit":"b","key":"k"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if body := s.check(t, "a", "k"); !strings.HasPrefix(body, `{"allowed":true,"limit":5,"remaining":3,`) {
		t.Errorf("check a after SIGHUP = %s, want its state kept", body)
	}

	s.Signal(syscall.SIGTERM)
	if !s.Wait(stopTimeout) {
		t.Fatalf("sluice did not stop within %v of SIGTERM", stopTimeout)
	}
	if s.Err() != nil {
		t.Errorf("sluice ended with %v after SIGTERM, want status 0\n%s", s.Err(), s.log)
	}
	if _, err := os.Stat(s.readyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready file outlives the process: %v", err)
	}
	testkit.WantAll(t, "the log", s.log.String(), "msg=\"configuration reloaded\"", "msg=\"shutting down\"", "msg=stopped")

	// A second signal does not wait for the drain.
	s2 := startSluice(t, "sluice (drain)", "--http", "127.0.0.1:0", "--drain-delay", "1m")
	s2.Signal(syscall.SIGTERM)
	testkit.WaitFor(t, waitTimeout, "shutdown to start", func() bool { return strings.Contains(s2.log.String(), "shutting down") })
	start := time.Now()
	s2.Signal(syscall.SIGTERM)
	if !s2.Wait(5 * time.Second) {
		t.Fatalf("a second SIGTERM did not end the process within 5s")
	}
	var ee *exec.ExitError
	if !errors.As(s2.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("after a second SIGTERM: %v, want killed by SIGTERM", s2.Err())
	}
	t.Logf("a second SIGTERM ended the process in %v", time.Since(start).Round(time.Millisecond))
}

func TestMain(m *testing.M) { testkit.Main(m) }
