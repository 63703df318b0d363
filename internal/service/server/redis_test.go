package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// redisFixture serves the test configuration over a Redis store on a
// private redis-server, with the failure policy failure.
func redisFixture(t *testing.T, failure redisstore.FailurePolicy) (*fixture, *testkit.RedisServer, *bytes.Buffer) {
	t.Helper()
	return redisFixtureOf(t, failure, testYAML)
}

// redisFixtureOf is redisFixture with the limits of yaml.
func redisFixtureOf(t *testing.T, failure redisstore.FailurePolicy, yaml string) (*fixture, *testkit.RedisServer, *bytes.Buffer) {
	t.Helper()
	srv := testkit.StartRedis(t)
	// A timeout above the default 50ms: on a loaded machine the first call,
	// which dials, can take longer, and one failure opens the breaker.
	opts := redisstore.Options{Addrs: []string{srv.Addr}, Failure: failure, BreakerThreshold: 1, Timeout: time.Second}
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
	circuit := func() string { return store.BreakerState().String() }
	ms, sopts := measured(t, store, Options{
		Registry:     reg,
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		CircuitState: circuit,
	}, metrics.StoreGauges{CircuitState: circuit})
	h, err := New(parse(t, "store: {backend: redis, redis: {addrs: ['"+srv.Addr+"']}, on_error: "+onError+"}\n"+yaml), ms, sopts)
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
	// Key a's refusal is cached: still refused, as Redis refused it, and
	// not degraded (docs/redis.md, "Refused floods").
	rec := f.check(`{"limit":"tiny","key":"a"}`)
	if !strings.HasPrefix(rec.Body.String(), `{"allowed":false,`) || strings.Contains(rec.Body.String(), "degraded") {
		t.Errorf("check of a refused key without Redis = %d %s, want refused as cached", rec.Code, rec.Body)
	}
	// The local store starts empty: a new key is allowed, degraded.
	rec = f.check(`{"limit":"tiny","key":"c"}`)
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

// TestReadyzMasters checks /readyz and /v1/status against what the store's
// health check finds on a Redis Cluster of 3 masters, for each failure
// policy: every master up is ready; one master down is 200 "degraded"
// naming it, even under on_error: error (Redis still decides the other
// masters' keys, and every instance sees the same cluster); every master
// down is as for a single Redis, 503 under on_error: error only.
func TestReadyzMasters(t *testing.T) {
	all := []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}
	for _, onError := range []string{"allow", "deny", "local", "error"} {
		for _, tc := range []struct {
			name   string
			down   []string
			code   int
			status string
			store  string
		}{
			{"all up", nil, 200, "ready", "ok"},
			{"one down", all[1:2], 200, "degraded", "partly unreachable"},
			{"all down", all, map[bool]int{true: 503, false: 200}[onError == "error"],
				map[bool]string{true: "store unreachable", false: "degraded"}[onError == "error"], "unreachable"},
		} {
			t.Run(onError+"/"+tc.name, func(t *testing.T) {
				sh := StoreHealth{Masters: 3, Down: tc.down}
				if len(tc.down) > 0 {
					sh.Err = errors.New("redisstore: master " + tc.down[0] + ": connection refused")
				}
				cfg := parse(t, "store: {backend: redis, redis: {addrs: ['"+all[0]+"']}, on_error: "+onError+"}\n"+testYAML)
				h, err := New(cfg, memstore.New(memstore.Options{}), Options{
					Registry:    prometheus.NewRegistry(),
					StoreHealth: func(context.Context) StoreHealth { return sh },
				})
				if err != nil {
					t.Fatal(err)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
				var body struct {
					Status, Store string
					Masters       int
					Down          []string `json:"masters_down"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				var wantDown []string // named only while some masters answer
				if len(tc.down) == 1 {
					wantDown = tc.down
				}
				if rec.Code != tc.code || body.Status != tc.status || body.Store != tc.store || body.Masters != 3 || !slices.Equal(body.Down, wantDown) {
					t.Errorf("readyz = %d %s, want %d status %q store %q masters 3 masters_down %v", rec.Code, rec.Body, tc.code, tc.status, tc.store, wantDown)
				}
				rec = httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/status", nil))
				var status struct{ Store storeJSON }
				if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
					t.Fatal(err)
				}
				if status.Store.Status != tc.store || status.Store.Masters != 3 || !slices.Equal(status.Store.Down, wantDown) {
					t.Errorf("status store = %+v, want status %q, masters 3", status.Store, tc.store)
				}
			})
		}
	}
}

// TestLocalRefusalsVisible floods one key over a Redis store: the metrics
// count the local refusals of the limit and the entries held, and the
// status page shows the share of decisions that never reached Redis.
func TestLocalRefusalsVisible(t *testing.T) {
	srv := testkit.StartRedis(t)
	// A timeout above the default 50ms: on a loaded machine the first call,
	// which dials, can take longer, and FailError would answer it 503.
	store, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Failure: redisstore.FailError, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	local := func() metrics.LocalRefusals {
		s := store.LocalRefusalStats()
		return metrics.LocalRefusals{Decisions: s.Decisions, Local: s.Local, ByLimit: s.ByPolicy, Entries: s.Entries, Bytes: s.Bytes}
	}
	ms, opts := measured(t, store, Options{Registry: reg, LocalRefusals: local}, metrics.StoreGauges{LocalRefusals: local})
	h, err := New(parse(t, "store: {backend: redis, redis: {addrs: ['"+srv.Addr+"']}, on_error: error}\n"+testYAML), ms, opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, reg: reg}
	// tiny admits 2 a minute: the third check is refused by Redis, the
	// next 7 locally.
	for i := range 10 {
		rec := f.check(`{"limit":"tiny","key":"flood"}`)
		if want := i < 2; rec.Code != 200 || strings.HasPrefix(rec.Body.String(), `{"allowed":true`) != want {
			t.Fatalf("check %d = %d %s, want allowed %t", i, rec.Code, rec.Body, want)
		}
	}
	if got := counter(t, reg, "sluice_store_local_refusals_total", "tiny"); got != 7 {
		t.Errorf("sluice_store_local_refusals_total{limit=tiny} = %v, want 7", got)
	}
	if body := scrape(t, h); !strings.Contains(body, "sluice_store_local_refusal_entries 1") {
		t.Errorf("metrics lack the entry held:\n%s", body)
	}
	rec := f.do("GET", "/v1/status", "")
	var st struct {
		Store struct {
			Local *struct {
				Share     float64 `json:"share"`
				Decisions uint64  `json:"decisions"`
				Local     uint64  `json:"local"`
				Entries   int     `json:"entries"`
			} `json:"local_refusals"`
		} `json:"store"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Store.Local == nil {
		t.Fatalf("/v1/status = %s (%v), want store.local_refusals", rec.Body, err)
	}
	if l := st.Store.Local; l.Decisions != 10 || l.Local != 7 || l.Share != 0.7 || l.Entries != 1 {
		t.Errorf("store.local_refusals = %+v, want 7 of 10 decisions local, 1 entry", *l)
	}
	if page := f.do("GET", "/", "").Body.String(); !strings.Contains(page, "never reached Redis") || !strings.Contains(page, "70.0% of 10 decisions") {
		t.Errorf("the status page does not show the share of decisions that never reached Redis")
	}
}

// TestRedisLeaseGauge checks the lease metrics over the Redis store: the
// units held, read from Redis at the scrape, and the holds that ran out
// unreleased (none here: the leases are 30 s).
func TestRedisLeaseGauge(t *testing.T) {
	f, _, _ := redisFixtureOf(t, redisstore.FailError, leaseYAML)
	for _, key := range []string{"a", "b", "b"} {
		if c := checkLease(t, f, `{"limit":"inflight","key":"`+key+`"}`); c["allowed"] != true {
			t.Fatalf("check %s = %v, want allowed", key, c)
		}
	}
	if got := counter(t, f.reg, "sluice_lease_units_held", "inflight"); got != 3 {
		t.Errorf("sluice_lease_units_held{limit=inflight} = %v, want 3", got)
	}
	if v, ok := testkit.MetricValue(t, f.reg, "sluice_lease_expired_total", "inflight"); !ok || v != 0 {
		t.Errorf("sluice_lease_expired_total{limit=inflight} = %v (present %v), want 0", v, ok)
	}
	if v, ok := testkit.MetricValue(t, f.reg, "sluice_lease_held_scan_incomplete_total"); !ok || v != 0 {
		t.Errorf("sluice_lease_held_scan_incomplete_total = %v (present %v), want 0", v, ok)
	}
}
