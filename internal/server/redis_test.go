package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// redisFixture serves the test configuration over a Redis store on a
// private redis-server, with the failure policy failure.
func redisFixture(t *testing.T, failure redisstore.FailurePolicy) (*fixture, *redistest.Server, *bytes.Buffer) {
	t.Helper()
	srv := redistest.Start(t)
	opts := redisstore.Options{Addrs: []string{srv.Addr}, Failure: failure, BreakerThreshold: 1}
	if failure == redisstore.FailLocal {
		opts.Local = memstore.New(memstore.Options{})
	}
	store, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	onError := map[redisstore.FailurePolicy]string{redisstore.FailLocal: "local", redisstore.FailError: "error"}[failure]
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	h, err := New(parse(t, "store: {backend: redis, redis: {addrs: ['"+srv.Addr+"']}, on_error: "+onError+"}\n"+testYAML), store, Options{
		Registry:     reg,
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		CircuitState: func() string { return store.BreakerState().String() },
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{h: h, reg: reg}, srv, &logs
}

// TestRedisDegraded runs the decision API over Redis, then stops Redis:
// the local failure policy decides, and the answers say so.
func TestRedisDegraded(t *testing.T) {
	f, srv, _ := redisFixture(t, redisstore.FailLocal)
	for i, want := range []bool{true, true, false} {
		rec := f.check(`{"limit":"tiny","key":"a"}`)
		if got := strings.HasPrefix(rec.Body.String(), `{"allowed":`+map[bool]string{true: "true", false: "false"}[want]); rec.Code != 200 || !got {
			t.Errorf("check %d over Redis = %d %s, want allowed %v", i, rec.Code, rec.Body, want)
		}
		if strings.Contains(rec.Body.String(), "degraded") {
			t.Errorf("check %d over a running Redis is degraded: %s", i, rec.Body)
		}
	}
	if rec := f.do("GET", "/readyz", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"store":"ok"`) ||
		!strings.Contains(rec.Body.String(), `"circuit":"closed"`) {
		t.Errorf("readyz over Redis = %d %s, want ready, store ok, circuit closed", rec.Code, rec.Body)
	}

	srv.Kill()
	// The local store starts empty: key a is allowed again, degraded.
	rec := f.check(`{"limit":"tiny","key":"a"}`)
	want := `{"allowed":true,"limit":2,"remaining":1,`
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), `"degraded":true`) {
		t.Errorf("check without Redis = %d %s, want %s... degraded", rec.Code, rec.Body, want)
	}
	if rec.Header().Get("RateLimit") != "" {
		t.Errorf("a degraded decision carries RateLimit %q", rec.Header().Get("RateLimit"))
	}
	rec = f.check(`{"checks":[{"limit":"tiny","key":"b"},{"limit":"api-key","key":"b"}]}`)
	if !strings.HasPrefix(rec.Body.String(), `{"allowed":true,"retry_after_ms":0,"degraded":true,"results":[`) {
		t.Errorf("batch without Redis = %s, want allowed and degraded", rec.Body)
	}
	rec = f.do("GET", "/readyz", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"status":"degraded"`) || !strings.Contains(rec.Body.String(), `"on_error":"local"`) {
		t.Errorf("readyz without Redis = %d %s, want 200 degraded", rec.Code, rec.Body)
	}
	if got := counter(t, f.reg, "sluice_decisions_total", "tiny", "degraded"); got != 2 {
		t.Errorf("degraded decisions of tiny = %v, want 2", got)
	}
	if body := scrape(t, f.h); strings.Contains(body, `sluice_store_circuit_state{state="closed"} 1`) {
		t.Errorf("the circuit is closed with Redis down")
	}
}

// TestRedisError stops Redis under the error failure policy: the API
// answers 503, the service is not ready, and the error is logged, not
// sent.
func TestRedisError(t *testing.T) {
	f, srv, logs := redisFixture(t, redisstore.FailError)
	if rec := f.check(`{"limit":"tiny","key":"a"}`); rec.Code != 200 {
		t.Fatalf("check over Redis = %d %s", rec.Code, rec.Body)
	}
	srv.Kill()
	rec := f.check(`{"limit":"tiny","key":"secret-key"}`)
	if rec.Code != http.StatusServiceUnavailable || strings.TrimSpace(rec.Body.String()) != `{"error":"the store failed to decide; see the server's log"}` {
		t.Errorf("check without Redis = %d %s, want 503", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), "store failed") || strings.Contains(logs.String(), "secret-key") {
		t.Errorf("log = %q, want the failure and no key", logs.String())
	}
	// A dead store fails every request: each is counted, but the log gets
	// one line per interval, not one per request.
	for range 20 {
		if rec := f.check(`{"limit":"tiny","key":"b"}`); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("check without Redis = %d %s, want 503", rec.Code, rec.Body)
		}
	}
	if got := strings.Count(logs.String(), "check: store failed"); got != 1 {
		t.Errorf("%d log lines for 21 failed checks within %v, want 1:\n%s", got, storeErrorLogEvery, logs.String())
	}
	if got := counter(t, f.reg, "sluice_store_errors_total", "allow"); got != 21 {
		t.Errorf("store errors = %v, want 21", got)
	}
	rec = f.do("GET", "/v1/forward-auth?rule=login", "")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("forward-auth without Redis = %d (Retry-After %q), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	rr := httptest.NewRecorder()
	f.h.ServeHTTP(rr, httptest.NewRequest("GET", "/readyz", nil))
	if rr.Code != http.StatusServiceUnavailable {
		t.Errorf("readyz without Redis under on_error: error = %d %s, want 503", rr.Code, rr.Body)
	}
}
