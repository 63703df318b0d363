package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// proxyConfig forwards to upstream, limiting /api/ to 2 requests per hour
// per client address.
func proxyConfig(upstream string) string {
	return fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  per-ip: {algorithm: sliding_log, limit: 2, period: 1h}
proxy:
  upstream: %s
  rules:
    - name: api
      match: {path_prefix: /api/}
      limits: [{limit: per-ip, key: ip}]
`, upstream)
}

func TestProxyMode(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s host=%s xff=%s body=%s", r.Method, r.URL.Path, r.Host, r.Header.Get("X-Forwarded-For"), body)
	}))
	t.Cleanup(up.Close)
	// On a listener that proxies, the admin endpoints (/metrics here)
	// need an admin token.
	const token = "proxy-mode-admin-token-0123456789"
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), proxyConfig(up.URL)+"admin: {token: "+token+"}\n")
	in := startServe(t, "--config", path)
	in.auth = "Bearer " + token

	for i := range 2 {
		code, hd, body := in.do(t, "POST", "/api/items", "x=1")
		want := "POST /api/items host=" + in.http + " xff=127.0.0.1 body=x=1"
		if code != 200 || body != want {
			t.Errorf("request %d to /api/items = %d %q, want 200 %q", i, code, body, want)
		}
		if got, want := hd.Get("RateLimit"), fmt.Sprintf(`"per-ip";r=%d;`, 1-i); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit = %q, want %s...", i, got, want)
		}
	}
	code, hd, body := in.do(t, "GET", "/api/items", "")
	if code != 429 || hd.Get("Retry-After") == "" || hd.Get("Content-Type") != "application/problem+json" {
		t.Errorf("third request = %d, Retry-After %q, Content-Type %q, want 429 with Retry-After and a problem", code, hd.Get("Retry-After"), hd.Get("Content-Type"))
	}
	if strings.Contains(body, "host=") {
		t.Errorf("a refused request reached the upstream: %q", body)
	}
	for i := range 3 {
		if code, _, body := in.do(t, "GET", "/public", ""); code != 200 || body != "GET /public host="+in.http+" xff=127.0.0.1 body=" {
			t.Errorf("unlimited request %d = %d %q", i, code, body)
		}
	}
	if got := hits.Load(); got != 5 {
		t.Errorf("the upstream saw %d requests, want 5 (2 admitted, 3 unmatched)", got)
	}
	// The service's own endpoints stay on their paths.
	if code, _ := in.check(t, "per-ip", "10.0.0.1"); code != 200 {
		t.Errorf("POST /v1/check in proxy mode = %d, want 200", code)
	}
	if got := in.metric(t, `sluice_decisions_total{limit="per-ip",outcome="denied"}`); got != "1" {
		t.Errorf("denied decisions = %q, want 1", got)
	}
}

// slowUpstream answers each request after the test releases it, and
// reports when a request arrived.
type slowUpstream struct {
	*httptest.Server
	arrived chan struct{}
	release chan struct{}
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{arrived: make(chan struct{}, 8), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.arrived <- struct{}{}
		select {
		case <-u.release:
			io.WriteString(w, "finished")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// inflight sends GET path in the background; the result arrives on the
// returned channel.
func (in *instance) inflight(path string) <-chan string {
	out := make(chan string, 1)
	go func() {
		resp, err := http.Get(in.url(path))
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		out <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	return out
}

func receive[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("waited %v for %s", waitTimeout, what)
		panic("unreachable")
	}
}

// TestGracefulShutdown stops the service while a proxied request is in
// flight: /readyz turns 503 during the drain delay, the request finishes,
// and then the service ends without error.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), proxyConfig(up.URL))
	in := startServe(t, "--config", path, "--drain-delay", "200ms", "--shutdown-timeout", "10s")

	res := in.inflight("/api/slow")
	receive(t, "the request to reach the upstream", up.arrived)
	stopped := make(chan error, 1)
	go func() { stopped <- in.stop(t) }()

	testkit.WaitFor(t, waitTimeout, "/readyz to answer 503", func() bool {
		code, _, body := in.do(t, "GET", "/readyz", "")
		return code == 503 && strings.Contains(body, `"status":"draining"`)
	})
	select {
	case err := <-stopped:
		t.Fatalf("the service stopped with a request in flight: %v", err)
	default:
	}
	close(up.release)
	if got := receive(t, "the request in flight", res); got != "200 finished" {
		t.Errorf("the request in flight got %q, want 200 finished", got)
	}
	if err := receive(t, "the service to stop", stopped); err != nil {
		t.Errorf("serve returned %v, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", in.http, time.Second); err == nil {
		t.Errorf("the service still accepts connections after shutdown")
	}
}

// TestShutdownDeadline stops the service while a request hangs: at the
// deadline the request is cut and serve reports it with status 1.
func TestShutdownDeadline(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), proxyConfig(up.URL))
	in := startServe(t, "--config", path, "--shutdown-timeout", "300ms")
	res := in.inflight("/api/hang")
	receive(t, "the request to reach the upstream", up.arrived)
	start := time.Now()
	err := in.stop(t)
	took := time.Since(start)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "cut") {
		t.Errorf("serve returned %v, want an exit status 1 saying requests were cut", err)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("shutdown took %v, want about the 300ms deadline", took)
	}
	if got := receive(t, "the cut request", res); !strings.HasPrefix(got, "error: ") {
		t.Errorf("the cut request got %q, want a broken connection", got)
	}
}
