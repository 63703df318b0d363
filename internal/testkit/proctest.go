// This file helps tests that run the sluice binary as a process:
// it builds cmd/sluice once per test process and removes it afterwards,
// and offers the small helpers such tests share.

package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds the one go build of cmd/sluice.
const buildTimeout = 5 * time.Minute

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Fetch sends req with c and returns the response and its whole body,
// read and closed; an error names the request. Unlike DoHTTP, it may be called
// from any goroutine.
func Fetch(c *http.Client, req *http.Request) (*http.Response, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err // a *url.Error: it names the method and the URL
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, b, fmt.Errorf("%s %s: reading the body: %w", req.Method, req.URL, err)
	}
	return resp, b, nil
}

// DoHTTP is Fetch on the test's goroutine: it fails t on an error, and returns
// the body as a string.
func DoHTTP(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, b, err := Fetch(c, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// Main runs the package's tests and then removes the binary that Sluice
// built, if any. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Sluice builds cmd/sluice with go build, once per test process, and
// returns the binary's path. Packages that use it call Main from TestMain.
func Sluice(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		// go test puts its own GOROOT/bin first on the tests' PATH.
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go command to build sluice with: %w", err)
			return
		}
		if binDir, err = os.MkdirTemp("", "sluice-bin-"); err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		out := filepath.Join(binDir, "sluice")
		start := time.Now()
		b, err := exec.CommandContext(ctx, gobin, "build", "-o", out, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, b)
			return
		}
		binPath = out
		t.Logf("built sluice in %v", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// WaitFor polls cond every 10ms until it holds, failing t when it does
// not within timeout; what says what is awaited.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WantAll fails t (without stopping it) for each of wants that text
// lacks; what names text in the message.
func WantAll(t testing.TB, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
}

// Receive returns what c sends, failing t when nothing comes within
// timeout; what says what is awaited.
func Receive[T any](t testing.TB, timeout time.Duration, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(timeout):
		t.Fatalf("waited %v for %s", timeout, what)
		panic("unreachable")
	}
}

// EachFile runs f as a subtest of t for each file that pattern matches
// (filepath.Glob), named after the file less its extension; it fails t
// when nothing matches.
func EachFile(t *testing.T, pattern string, f func(t *testing.T, path string)) {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	for _, path := range paths {
		base := filepath.Base(path)
		t.Run(strings.TrimSuffix(base, filepath.Ext(base)), func(t *testing.T) { f(t, path) })
	}
}

// WriteFile writes content to path and returns path.
func WriteFile(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// RedisStoreYAML is the store section of a sluice serve configuration,
// in block style and ending in a newline: the Redis at addrs (one
// server, or a cluster's seeds), keys under prefix, each call bounded by
// timeout, and on_error: error, so that a failed call is an error rather
// than a failure policy's decision.
func RedisStoreYAML(prefix string, timeout time.Duration, addrs ...string) string {
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("store:\n  backend: redis\n  redis: {addrs: [%s], prefix: %q}\n  timeout: %v\n  on_error: error\n",
		strings.Join(quoted, ", "), prefix, timeout)
}

// WriteFileAt writes content to path, sets the file's modification time
// (and access time) to mod, and returns path: a change that a watcher
// sees whatever the file system's time resolution.
func WriteFileAt(t testing.TB, path, content string, mod time.Time) string {
	t.Helper()
	WriteFile(t, path, content)
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
	return path
}

// FreePort returns a loopback port that was free a moment ago, for a
// program that cannot be told to pick its own.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Log is a bytes.Buffer safe for concurrent use: a process or an
// in-process service writes its log into it while the test reads it.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Ready is what `sluice serve --ready-file` writes once it listens: the
// bound addresses.
type Ready struct {
	HTTP, GRPC, Admin string
}

// WaitReady waits up to timeout for the ready file of the service called
// name and returns it. It fails the test when exited reports that the
// process ended first (with its error err and its log), or at the timeout.
func WaitReady(t testing.TB, name, readyFile string, timeout time.Duration, exited func() (bool, error), log fmt.Stringer) Ready {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(readyFile); err == nil {
			var r Ready
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%s: ready file %q: %v", name, b, err)
			}
			return r
		}
		if done, err := exited(); done {
			t.Fatalf("%s ended before listening: %v\n%s", name, err, log)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no ready file within %v\n%s", name, timeout, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
