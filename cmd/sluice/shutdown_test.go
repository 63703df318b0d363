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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// proxyConfig forwards to upstream, limiting /api/ to 2 requests per hour
// per client address.
func proxyConfig(upstream string) string {
	return proxyConfigPerIP(upstream, "{algorithm: sliding_log, limit: 2, period: 1h}")
}

// proxyConfigPerIP forwards to upstream, limiting /api/ per client
// address with perIP, a limit as a YAML flow mapping.
func proxyConfigPerIP(upstream, perIP string) string {
	return fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  per-ip: %s
proxy:
  upstream: %s
  rules:
    - name: api
      match: {path_prefix: /api/}
      limits: [{limit: per-ip, key: ip}]
`, perIP, upstream)
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

// TestGracefulShutdown stops the service while a proxied request is in
// flight: /readyz turns 503 during the drain delay, the request finishes,
// and then the service ends without error.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), proxyConfig(up.URL))
	in := startServe(t, "--config", path, "--drain-delay", "200ms", "--shutdown-timeout", "10s")

	res := in.inflight("/api/slow")
	testkit.Receive(t, waitTimeout, "the request to reach the upstream", up.arrived)
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
	if got := testkit.Receive(t, waitTimeout, "the request in flight", res); got != "200 finished" {
		t.Errorf("the request in flight got %q, want 200 finished", got)
	}
	if err := testkit.Receive(t, waitTimeout, "the service to stop", stopped); err != nil {
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
	testkit.Receive(t, waitTimeout, "the request to reach the upstream", up.arrived)
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
	if got := testkit.Receive(t, waitTimeout, "the cut request", res); !strings.HasPrefix(got, "error: ") {
		t.Errorf("the cut request got %q, want a broken connection", got)
	}
}

// TestShutdownDropsNoAcceptedRequest stops the service under a steady
// load of proxied requests from 8 clients and counts: every request the
// service admitted (the upstream saw it) got its answer, requests kept
// being served while /readyz answered 503 during the drain delay, and
// the only failures are connections refused once the listener closed.
func TestShutdownDropsNoAcceptedRequest(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	cfg := proxyConfigPerIP(up.URL, "{algorithm: sliding_window, limit: 1000000000, period: 1h}")
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), cfg)
	in := startServe(t, "--config", path, "--drain-delay", "300ms", "--shutdown-timeout", "10s")

	const clients = 8
	var answered, refused, draining atomic.Int64
	var drainingNow atomic.Bool
	var mu sync.Mutex
	var other []string
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			deadline := time.Now().Add(2 * waitTimeout)
			for i := 0; time.Now().Before(deadline); i++ {
				resp, err := client.Get(in.url(fmt.Sprintf("/api/%d/%d", c, i)))
				if err != nil {
					var op *net.OpError
					if errors.As(err, &op) && op.Op == "dial" {
						refused.Add(1)
						return // the listener is closed: nothing more is accepted
					}
					mu.Lock()
					other = append(other, err.Error())
					mu.Unlock()
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(b) != "ok" {
					mu.Lock()
					other = append(other, fmt.Sprintf("%d %q %v", resp.StatusCode, b, err))
					mu.Unlock()
					continue
				}
				answered.Add(1)
				if drainingNow.Load() {
					draining.Add(1)
				}
			}
		})
	}
	testkit.WaitFor(t, waitTimeout, "200 answered requests", func() bool { return answered.Load() >= 200 })
	stopped := make(chan error, 1)
	go func() { stopped <- in.stop(t) }()
	testkit.WaitFor(t, waitTimeout, "/readyz to answer 503", func() bool {
		code, _, _ := in.do(t, "GET", "/readyz", "")
		return code == 503
	})
	drainingNow.Store(true)
	if err := testkit.Receive(t, waitTimeout, "the service to stop", stopped); err != nil {
		t.Errorf("serve returned %v, want nil", err)
	}
	wg.Wait()

	t.Logf("admitted %d, answered %d (%d after /readyz turned 503), refused connections %d, other failures %d",
		hits.Load(), answered.Load(), draining.Load(), refused.Load(), len(other))
	if len(other) > 0 {
		t.Errorf("%d requests failed otherwise than by a refused connection, first: %s", len(other), other[0])
	}
	if hits.Load() != answered.Load() {
		t.Errorf("the upstream saw %d requests and the clients got %d answers: %d admitted requests were dropped", hits.Load(), answered.Load(), hits.Load()-answered.Load())
	}
	if draining.Load() == 0 {
		t.Errorf("no request was served while /readyz answered 503: the drain delay did not keep serving")
	}
	if refused.Load() != clients {
		t.Errorf("%d clients saw the listener close, want all %d", refused.Load(), clients)
	}
}

// TestShutdownReleasesCutLeases cuts a proxied request that holds a
// concurrency lease in Redis at the shutdown deadline, and then checks
// with a second instance on the same Redis that the lease was given back
// before the first one closed its store: the key's one unit is free,
// where a lease left behind would refuse it for its whole hour.
func TestShutdownReleasesCutLeases(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	up := newSlowUpstream(t)
	cfg := fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q], prefix: "leases:"}
  timeout: 2s
limits:
  inflight: {algorithm: concurrency, limit: 1, lease: 1h}
proxy:
  upstream: %s
  rules:
    - name: api
      match: {path_prefix: /api/}
      limits: [{limit: inflight, key: ip}]
`, srv.Addr, up.URL)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), cfg)
	first := startServe(t, "--config", path, "--shutdown-timeout", "200ms")
	res := first.inflight("/api/hang")
	testkit.Receive(t, waitTimeout, "the request to reach the upstream", up.arrived)
	second := startServe(t, "--config", path)
	if code, _, _ := second.do(t, "GET", "/api/busy", ""); code != 429 {
		t.Fatalf("a second request while the first holds the unit = %d, want 429", code)
	}
	var ee *exitError
	if err := first.stop(t); !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("serve returned %v, want exit status 1 for the cut request", err)
	}
	if got := testkit.Receive(t, waitTimeout, "the cut request", res); !strings.HasPrefix(got, "error: ") {
		t.Errorf("the cut request got %q, want a broken connection", got)
	}
	close(up.release)
	if code, _, body := second.do(t, "GET", "/api/after", ""); code != 200 || body != "finished" {
		t.Errorf("a request after the cut = %d %q, want 200 finished: the cut request's lease was not released", code, body)
	}
}
