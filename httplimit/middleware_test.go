package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// clock is a settable time source for the memory store.
type clock = teststore.Clock

// newClock starts at a whole hour, so windows start with the test.
func newClock() *clock { return teststore.NewClock(time.Unix(1_699_999_200, 0)) }

func newStore(c *clock) *memstore.Store {
	return memstore.New(memstore.Options{Now: c.Now})
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
})

// serve runs one request through h and returns the response.
func serve(h http.Handler, r *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Result()
}

func request(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", "/items/7", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func mustNew(t *testing.T, store sluice.Store, limits []Limit, opts *Options) *Middleware {
	t.Helper()
	m, err := New(store, limits, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHeadersExactSyntax(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.TokenBucket(10, time.Second, 0).Named("per-ip")}}, nil)
	h := m.Handler(okHandler)

	type want struct {
		status     int
		rateLimit  string
		retryAfter string
	}
	steps := []want{
		{200, `"per-ip";r=9;t=1`, ""},
		{200, `"per-ip";r=8;t=1`, ""},
		{200, `"per-ip";r=7;t=1`, ""},
		{200, `"per-ip";r=6;t=1`, ""},
		{200, `"per-ip";r=5;t=1`, ""},
		{200, `"per-ip";r=4;t=1`, ""},
		{200, `"per-ip";r=3;t=1`, ""},
		{200, `"per-ip";r=2;t=1`, ""},
		{200, `"per-ip";r=1;t=1`, ""},
		{200, `"per-ip";r=0;t=1`, ""},
		{429, `"per-ip";r=0;t=1`, "1"},
	}
	for i, w := range steps {
		resp := serve(h, request("192.0.2.1:1234"))
		if resp.StatusCode != w.status {
			t.Fatalf("request %d: status = %d, want %d", i+1, resp.StatusCode, w.status)
		}
		if got := resp.Header.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"per-ip";q=10;w=1` {
			t.Errorf("request %d: RateLimit-Policy = %q, want %q", i+1, got, `"per-ip";q=10;w=1`)
		}
		if got := resp.Header.Values("RateLimit"); len(got) != 1 || got[0] != w.rateLimit {
			t.Errorf("request %d: RateLimit = %q, want %q", i+1, got, w.rateLimit)
		}
		if got := resp.Header.Get("Retry-After"); got != w.retryAfter {
			t.Errorf("request %d: Retry-After = %q, want %q", i+1, got, w.retryAfter)
		}
		if w.status == 429 {
			if got := resp.Header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", got)
			}
			if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", got)
			}
			got := body(t, resp)
			const want = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Too many requests; retry in 1 second.","retry-after":1,"violated-policies":["per-ip"]}`
			if got != want {
				t.Errorf("body = %s\nwant   %s", got, want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(got), &v); err != nil {
				t.Errorf("body is not JSON: %v", err)
			}
		}
	}
	// 250ms later, 2.5 tokens are back: the next request passes.
	c.Advance(250 * time.Millisecond)
	if resp := serve(h, request("192.0.2.1:1234")); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-ip";r=1;t=1` {
		t.Errorf("after 250ms: status %d RateLimit %q, want 200 %q", resp.StatusCode, resp.Header.Get("RateLimit"), `"per-ip";r=1;t=1`)
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	// 1 per 90s: after one request the next may pass in 90s exactly; one
	// millisecond later, in 89.999s, which is still 90 whole seconds.
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.GCRA(1, 90*time.Second, 0).Named("slow")}}, nil)
	h := m.Handler(okHandler)
	serve(h, request("192.0.2.1:1"))
	c.Advance(time.Millisecond)
	resp := serve(h, request("192.0.2.1:1"))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "90" || resp.Header.Get("RateLimit") != `"slow";r=0;t=90` {
		t.Errorf("got %d Retry-After %q RateLimit %q, want 429 90 %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"), `"slow";r=0;t=90`)
	}
	c.Advance(89*time.Second + 998*time.Millisecond)
	resp = serve(h, request("192.0.2.1:1"))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("1ms before: got %d Retry-After %q, want 429 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	c.Advance(time.Millisecond)
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 200 {
		t.Errorf("at the retry time: status %d, want 200", resp.StatusCode)
	}
}

func TestPolicyField(t *testing.T) {
	tests := []struct {
		name string
		p    sluice.Policy
		want string
	}{
		{"whole seconds", sluice.FixedWindow(100, time.Minute).Named("m"), `"m";q=100;w=60`},
		{"hour", sluice.SlidingWindow(1000, time.Hour).Named("h"), `"h";q=1000;w=3600`},
		{"sub-second rescaled", sluice.TokenBucket(10, 100*time.Millisecond, 0).Named("fast"), `"fast";q=100;w=1`},
		{"1.5s", sluice.GCRA(3, 1500*time.Millisecond, 0).Named("x"), `"x";q=2;w=1`},
		{"2.5s", sluice.GCRA(1, 2500*time.Millisecond, 0).Named("x"), `"x";q=2;w=5`},
		{"escaped name", sluice.FixedWindow(1, time.Second).Named(`a"b\c`), `"a\"b\\c";q=1;w=1`},
		{"no whole window within a year", sluice.FixedWindow(1, time.Nanosecond*1000*1000*1000/7*7+time.Microsecond).Named("odd"), `"odd";q=1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendPolicy(nil, tt.p)); got != tt.want {
				t.Errorf("AppendPolicy(%v) = %s, want %s", tt.p, got, tt.want)
			}
		})
	}
}

func TestMultiLevelAllOrNothing(t *testing.T) {
	c := newClock()
	store := newStore(c)
	m := mustNew(t, store, []Limit{
		{Policy: sluice.FixedWindow(2, time.Minute).Named("per-ip")},
		{Policy: sluice.FixedWindow(3, time.Hour).Named("per-user"), Key: Header("X-User")},
		{Policy: sluice.FixedWindow(100, time.Second).Named("per-route"), Key: Route},
	}, nil)
	h := m.Handler(okHandler)
	c.Advance(10 * time.Second) // away from a window edge

	steps := []struct {
		ip, user  string
		status    int
		rateLimit string
	}{
		{"192.0.2.1:1", "alice", 200, `"per-ip";r=1;t=50`},
		{"192.0.2.1:1", "alice", 200, `"per-ip";r=0;t=50`},
		// per-ip refuses: per-user and per-route are not charged.
		{"192.0.2.1:1", "alice", 429, `"per-ip";r=0;t=50`},
		// From another IP, alice has 1 left of 3 (the refused one was not
		// counted), so per-user is now closest to its limit.
		{"192.0.2.2:1", "alice", 200, `"per-user";r=0;t=3590`},
		{"192.0.2.2:1", "alice", 429, `"per-user";r=0;t=3590`},
		// bob is unaffected.
		{"192.0.2.2:1", "bob", 200, `"per-ip";r=0;t=50`},
	}
	for i, s := range steps {
		resp := serve(h, request(s.ip, "X-User", s.user))
		if resp.StatusCode != s.status {
			t.Fatalf("step %d: status = %d, want %d", i+1, resp.StatusCode, s.status)
		}
		if got := resp.Header.Get("RateLimit"); got != s.rateLimit {
			t.Errorf("step %d: RateLimit = %q, want %q", i+1, got, s.rateLimit)
		}
		const policies = `"per-ip";q=2;w=60, "per-user";q=3;w=3600, "per-route";q=100;w=1`
		if got := resp.Header.Get("RateLimit-Policy"); got != policies {
			t.Errorf("step %d: RateLimit-Policy = %q, want %q", i+1, got, policies)
		}
	}
	// The route limit was charged once per admitted request only: 4 of 100.
	d, err := store.Peek(context.Background(), time.Time{}, sluice.Request{Policy: new(sluice.FixedWindow(100, time.Second).Named("per-route")), Key: "GET /items/7", Cost: 1})
	if err != nil || d.Remaining != 95 { // Peek reports what remains after a cost of 1
		t.Errorf("per-route Peek = %+v, %v; want Remaining 95", d, err)
	}
	// A request without X-User is not counted by per-user, and the
	// RateLimit-Policy field lists only the limits that applied.
	c.Advance(time.Minute)
	resp := serve(h, request("192.0.2.9:1"))
	if got := resp.Header.Get("RateLimit-Policy"); got != `"per-ip";q=2;w=60, "per-route";q=100;w=1` {
		t.Errorf("without X-User: RateLimit-Policy = %q", got)
	}
	st := m.Stats()
	if st[0].Denied != 1 || st[1].Denied != 1 || st[2].Denied != 0 {
		t.Errorf("Stats = %+v, want per-ip 1 and per-user 1 denied", st)
	}
}

func TestSpoofedForwardedForChangesNothing(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(2, time.Minute)}}, &Options{
		ClientIP: &ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")},
	})
	h := m.Handler(okHandler)
	// An untrusted client rotates X-Forwarded-For, X-Real-IP and Forwarded:
	// it is still one client.
	for i, spoof := range []string{"203.0.113.1", "203.0.113.2", "198.51.100.7"} {
		resp := serve(h, request("192.0.2.1:5555", "X-Forwarded-For", spoof, "X-Real-IP", spoof, "Forwarded", "for="+spoof))
		want := 200
		if i == 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Errorf("spoof %s: status %d, want %d", spoof, resp.StatusCode, want)
		}
	}
	// Behind the trusted proxy, the forwarded client is used.
	for i, client := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.1", "203.0.113.1"} {
		resp := serve(h, request("10.1.2.3:443", "X-Forwarded-For", "6.6.6.6, "+client))
		want := 200
		if i == 3 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Errorf("via proxy %d (%s): status %d, want %d", i, client, resp.StatusCode, want)
		}
	}
}

func TestIPv6GroupedByPrefix(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(2, time.Minute)}}, nil)
	h := m.Handler(okHandler)
	steps := []struct {
		remote string
		status int
	}{
		{"[2001:db8:1:2::1]:1", 200},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", 200}, // same /64
		{"[2001:db8:1:2:abcd::9]:3", 429},             // same /64
		{"[2001:db8:1:3::1]:4", 200},                  // another /64
		{"[::ffff:192.0.2.1]:5", 200},                 // IPv4-mapped = 192.0.2.1
		{"192.0.2.1:6", 200},
		{"192.0.2.1:7", 429},
	}
	for _, s := range steps {
		if resp := serve(h, request(s.remote)); resp.StatusCode != s.status {
			t.Errorf("%s: status %d, want %d", s.remote, resp.StatusCode, s.status)
		}
	}
}

func TestDryRun(t *testing.T) {
	c := newClock()
	var events []Event
	m := mustNew(t, newStore(c), []Limit{
		{Policy: sluice.FixedWindow(100, time.Minute).Named("enforced")},
		{Policy: sluice.FixedWindow(1, time.Minute).Named("trial"), Shadow: true},
	}, &Options{OnDecision: func(e *Event) {
		cp := *e
		cp.Results = append([]LimitResult(nil), e.Results...)
		events = append(events, cp)
	}})
	h := m.Handler(okHandler)
	for i := range 3 {
		resp := serve(h, request("192.0.2.1:1"))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200 (a dry run never refuses)", i+1, resp.StatusCode)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"enforced";q=100;w=60` {
			t.Errorf("RateLimit-Policy = %q: the dry-run limit must not be shown", got)
		}
	}
	if got := m.Stats()[1].DryRunDenied; got != 2 {
		t.Errorf("DryRunDenied = %d, want 2", got)
	}
	if len(events) != 3 {
		t.Fatalf("got %d events, want 3", len(events))
	}
	for i, e := range events {
		wantDenied := i > 0
		if e.DryRunDenied != wantDenied || !e.Allowed || e.Results[1].Decision.Allowed == wantDenied {
			t.Errorf("event %d: DryRunDenied %v Allowed %v trial %+v", i, e.DryRunDenied, e.Allowed, e.Results[1].Decision)
		}
	}
	// The enforced limit was charged for every request: the dry run did not
	// make the all-or-nothing call refuse.
	if got := events[2].Results[0].Decision.Remaining; got != 97 {
		t.Errorf("enforced Remaining = %d, want 97", got)
	}
}

func TestDryRunNotChargedWhenRefused(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{
		{Policy: sluice.FixedWindow(1, time.Minute).Named("enforced")},
		{Policy: sluice.FixedWindow(5, time.Minute).Named("trial"), Shadow: true},
	}, nil)
	var last Event
	m.onDecision = func(e *Event) { last = *e; last.Results = append([]LimitResult(nil), e.Results...) }
	h := m.Handler(okHandler)
	serve(h, request("192.0.2.1:1"))
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 429 {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	// trial saw 1 admitted request: 4 remain, reported without the charge
	// of the refused request (engine.State).
	if got := last.Results[1].Decision.Remaining; got != 4 {
		t.Errorf("trial Remaining = %d, want 4 (the refused request is not charged)", got)
	}
}

func TestStoreFailure(t *testing.T) {
	secret := errors.New("dial tcp 10.9.8.7:6379: connection refused (password=hunter2)")
	tests := []struct {
		name       string
		store      sluice.Store
		limits     int
		opts       Options
		status     int
		retryAfter string
	}{
		{"error fails closed", teststore.Failing{Err: secret}, 1, Options{}, 503, "1"},
		{"error fails closed, AllowAll", teststore.Failing{Err: secret}, 2, Options{}, 503, "1"},
		{"error with ErrorRetryAfter", teststore.Failing{Err: secret}, 1, Options{ErrorRetryAfter: 1500 * time.Millisecond}, 503, "2"},
		{"error fails open", teststore.Failing{Err: secret}, 2, Options{FailOpen: true}, 200, ""},
		{"degraded deny is 503", teststore.Failing{Degraded: &sluice.Decision{Degraded: true, RetryAfter: 2500 * time.Millisecond}}, 2, Options{}, 503, "3"},
		{"degraded deny without retry", teststore.Failing{Degraded: &sluice.Decision{Degraded: true}}, 1, Options{}, 503, "1"},
		{"degraded allow passes", teststore.Failing{Degraded: &sluice.Decision{Allowed: true, Degraded: true}}, 2, Options{}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits := []Limit{{Policy: sluice.TokenBucket(10, time.Second, 0).Named("a")}, {Policy: sluice.TokenBucket(10, time.Second, 0).Named("b"), Key: Constant("all")}}[:tt.limits]
			var got *Event
			opts := tt.opts
			opts.OnDecision = func(e *Event) { cp := *e; got = &cp }
			m := mustNew(t, tt.store, limits, &opts)
			resp := serve(m.Handler(okHandler), request("192.0.2.1:1"))
			b := body(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if g := resp.Header.Get("Retry-After"); g != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", g, tt.retryAfter)
			}
			if strings.Contains(b, "hunter2") || strings.Contains(b, "10.9.8.7") || strings.Contains(b, "refused") {
				t.Errorf("the body leaks the store error: %s", b)
			}
			if resp.Header.Get("RateLimit") != "" {
				t.Errorf("RateLimit = %q on a failed or degraded decision, want none", resp.Header.Get("RateLimit"))
			}
			if tt.status == 503 {
				if resp.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("Cache-Control = %q", resp.Header.Get("Cache-Control"))
				}
				var p map[string]any
				if err := json.Unmarshal([]byte(b), &p); err != nil || p["type"] != ProblemReducedCapacity || p["status"] != float64(503) {
					t.Errorf("body = %s (%v), want a temporary-reduced-capacity problem", b, err)
				}
			}
			if got == nil {
				t.Fatal("OnDecision was not called")
			}
			if tt.store.(teststore.Failing).Err != nil && !errors.Is(got.Err, secret) {
				t.Errorf("Event.Err = %v, want the store error", got.Err)
			}
		})
	}
}

func TestCost(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{
		Policy: sluice.TokenBucket(10, time.Second, 0).Named("api"),
		CostFunc: func(r *http.Request) int64 {
			switch r.URL.Path {
			case "/export":
				return 4
			case "/huge":
				return 11
			case "/free":
				return 0
			}
			return 1
		},
	}}, nil)
	h := m.Handler(okHandler)
	get := func(path string) *http.Response {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		return serve(h, r)
	}
	steps := []struct {
		path      string
		status    int
		rateLimit string
	}{
		{"/export", 200, `"api";r=6;t=1`},
		{"/export", 200, `"api";r=2;t=1`},
		{"/free", 200, ""},
		{"/export", 429, `"api";r=2;t=1`}, // needs 2 more tokens: 200ms
		{"/x", 200, `"api";r=1;t=1`},
	}
	for i, s := range steps {
		resp := get(s.path)
		if resp.StatusCode != s.status || resp.Header.Get("RateLimit") != s.rateLimit {
			t.Errorf("step %d %s: got %d %q, want %d %q", i+1, s.path, resp.StatusCode, resp.Header.Get("RateLimit"), s.status, s.rateLimit)
		}
	}
	// A request that costs more than the capacity can never pass: 429
	// without a Retry-After.
	resp := get("/huge")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" {
		t.Errorf("/huge: got %d Retry-After %q, want 429 and none", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if b := body(t, resp); !strings.Contains(b, "never be admitted") || !strings.Contains(b, `"violated-policies":["api"]`) {
		t.Errorf("/huge body = %s", b)
	}
}

func TestLegacyHeaders(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(5, time.Minute).Named("m")}}, &Options{
		Headers: HeadersIETF | HeadersLegacy | HeadersX,
		Now:     c.Now,
	})
	h := m.Handler(okHandler)
	c.Advance(15*time.Second + 500*time.Millisecond)
	resp := serve(h, request("192.0.2.1:1"))
	want := map[string]string{
		"RateLimit-Policy":      `"m";q=5;w=60`,
		"RateLimit":             `"m";r=4;t=45`,
		"RateLimit-Limit":       "5",
		"RateLimit-Remaining":   "4",
		"RateLimit-Reset":       "45",
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "4",
		// 1_699_999_215.5 + 45 = 1_699_999_260.5, rounded up.
		"X-RateLimit-Reset": "1699999261",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	m2 := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(5, time.Minute).Named("m")}}, &Options{Headers: HeadersX})
	resp = serve(m2.Handler(okHandler), request("192.0.2.1:1"))
	if resp.Header.Get("RateLimit") != "" || resp.Header.Get("X-RateLimit-Limit") != "5" {
		t.Errorf("HeadersX alone: RateLimit %q X-RateLimit-Limit %q", resp.Header.Get("RateLimit"), resp.Header.Get("X-RateLimit-Limit"))
	}
	m3 := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(1, time.Minute).Named("m")}}, &Options{Headers: HeadersNone | HeadersIETF})
	serve(m3.Handler(okHandler), request("192.0.2.1:1"))
	resp = serve(m3.Handler(okHandler), request("192.0.2.1:1"))
	if resp.StatusCode != 429 || resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("HeadersNone: %d RateLimit %q Retry-After %q", resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
}

func TestCustomDenyHandler(t *testing.T) {
	c := newClock()
	var got Denial
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(1, time.Minute).Named("m")}}, &Options{
		OnDenied: func(w http.ResponseWriter, r *http.Request, d Denial) {
			got = d
			got.Violated = append([]string(nil), d.Violated...)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(d.Status)
			io.WriteString(w, "slow down")
		},
	})
	h := m.Handler(okHandler)
	serve(h, request("192.0.2.1:1"))
	c.Advance(20 * time.Second)
	resp := serve(h, request("192.0.2.1:1"))
	if resp.StatusCode != 429 || body(t, resp) != "slow down" || resp.Header.Get("Retry-After") != "40" {
		t.Errorf("got %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got.Status != 429 || got.RetryAfter != 40*time.Second || len(got.Violated) != 1 || got.Violated[0] != "m" {
		t.Errorf("Denial = %+v", got)
	}
}

func TestRouteFromServeMux(t *testing.T) {
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.FixedWindow(1, time.Minute).Named("route"), Key: Route}}, nil)
	var keys []string
	m.onDecision = func(e *Event) { keys = append(keys, e.Results[0].Key) }
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m.Handler(okHandler))
	mux.Handle("/any/", m.Handler(okHandler))
	for _, p := range []string{"/items/1", "/items/2", "/any/x"} {
		r := httptest.NewRequest("GET", p, nil)
		serve(mux, r)
	}
	want := []string{"GET /items/{id}", "GET /items/{id}", "GET /any/"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("keys = %q, want %q", keys, want)
	}
}

func TestLeakyBucketDelay(t *testing.T) {
	// A leaky bucket spaces admitted requests: the second of two waits
	// 100ms before the handler runs; with MaxDelay 50ms it is refused.
	store := memstore.New(memstore.Options{})
	p := sluice.LeakyBucket(10, time.Second, 5).Named("smooth")
	m := mustNew(t, store, []Limit{{Policy: p}}, nil)
	h := m.Handler(okHandler)
	serve(h, request("192.0.2.1:1"))
	start := time.Now()
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Errorf("second request took %v, want about 100ms", el)
	}
	m2 := mustNew(t, memstore.New(memstore.Options{}), []Limit{{Policy: p}}, &Options{MaxDelay: 50 * time.Millisecond})
	h2 := m2.Handler(okHandler)
	serve(h2, request("192.0.2.1:1"))
	if resp := serve(h2, request("192.0.2.1:1")); resp.StatusCode != 429 {
		t.Errorf("beyond MaxDelay: status %d, want 429", resp.StatusCode)
	}
}

func TestNewErrors(t *testing.T) {
	store := memstore.New(memstore.Options{})
	ok := sluice.FixedWindow(1, time.Second)
	tests := []struct {
		name   string
		store  sluice.Store
		limits []Limit
		opts   *Options
		want   string
	}{
		{"nil store", nil, []Limit{{Policy: ok}}, nil, "store is nil"},
		{"no limits", store, nil, nil, "no limits"},
		{"invalid policy", store, []Limit{{Policy: sluice.FixedWindow(0, time.Second).Named("x")}}, nil, `limit 1 ("x"): invalid policy`},
		{"duplicate names", store, []Limit{{Policy: ok.Named("a")}, {Policy: ok.Named("a")}}, nil, `limit 2 ("a"): name already used by limit 1`},
		{"bad name", store, []Limit{{Policy: ok.Named("a\nb")}}, nil, "printable ASCII"},
		{"negative cost", store, []Limit{{Policy: ok, Cost: -1}}, nil, "cost must not be negative"},
		{"cost over capacity", store, []Limit{{Policy: ok, Cost: 2}}, nil, "exceeds the policy's capacity"},
		{"bad ipv6 prefix", store, []Limit{{Policy: ok}}, &Options{ClientIP: &ClientIP{IPv6Prefix: 129}}, "IPv6Prefix"},
		{"negative retry", store, []Limit{{Policy: ok}}, &Options{ErrorRetryAfter: -1}, "ErrorRetryAfter"},
		{"concurrency dry run", store, []Limit{{Policy: sluice.Concurrency(2, time.Minute), Shadow: true}}, nil, "cannot be a dry run"},
		{"concurrency after the response", store, []Limit{{Policy: sluice.Concurrency(2, time.Minute), ChargeOn: func(int) bool { return true }}}, nil, "cannot be charged after the response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.store, tt.limits, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	m := mustNew(t, store, []Limit{{Policy: ok}, {Policy: ok, Key: Path}}, nil)
	if st := m.Stats(); st[0].Name != "limit-1" || st[1].Name != "limit-2" {
		t.Errorf("default names = %q, %q", st[0].Name, st[1].Name)
	}
	m = mustNew(t, store, []Limit{{Policy: ok}}, nil)
	if st := m.Stats(); st[0].Name != "default" {
		t.Errorf("default name = %q", st[0].Name)
	}
}

func TestPolicyFunc(t *testing.T) {
	c := newClock()
	plans := map[string]sluice.Policy{
		"free": sluice.FixedWindow(1, time.Hour).Named("free"),
		"pro":  sluice.FixedWindow(3, time.Hour).Named("pro"),
	}
	m := mustNew(t, newStore(c), []Limit{{
		Key: Header("X-API-Key"),
		PolicyFunc: func(r *http.Request, key string) (sluice.Policy, bool) {
			if key == "internal" {
				return sluice.Policy{}, false // unlimited
			}
			p, ok := plans[r.Header.Get("X-Plan")]
			if !ok {
				p = plans["free"]
			}
			return p, true
		},
	}}, nil)
	h := m.Handler(okHandler)
	steps := []struct {
		key, plan string
		status    int
		policy    string
	}{
		{"k1", "pro", 200, `"pro";q=3;w=3600`},
		{"k1", "pro", 200, `"pro";q=3;w=3600`},
		{"k2", "", 200, `"free";q=1;w=3600`},
		{"k2", "", 429, `"free";q=1;w=3600`},
		{"internal", "", 200, ``},
		{"internal", "", 200, ``},
	}
	for i, s := range steps {
		resp := serve(h, request("192.0.2.1:1", "X-API-Key", s.key, "X-Plan", s.plan))
		if resp.StatusCode != s.status || resp.Header.Get("RateLimit-Policy") != s.policy {
			t.Errorf("step %d: got %d %q, want %d %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), s.status, s.policy)
		}
	}
}

func TestConcurrentExactCount(t *testing.T) {
	// 200 concurrent requests against 50/min: exactly 50 pass.
	c := newClock()
	m := mustNew(t, newStore(c), []Limit{{Policy: sluice.SlidingLog(50, time.Minute).Named("x")}}, nil)
	h := m.Handler(okHandler)
	var mu sync.Mutex
	passed := 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if serve(h, request("192.0.2.1:1")).StatusCode == 200 {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if passed != 50 {
		t.Errorf("%d passed, want 50", passed)
	}
}

func TestChargeOnFailedLogins(t *testing.T) {
	c := newClock()
	failed := func(status int) bool { return status == http.StatusUnauthorized || status == http.StatusForbidden }
	m := mustNew(t, newStore(c), []Limit{
		{Policy: sluice.SlidingLog(5, 15*time.Minute).Named("failed-per-account"), Key: Header("X-User"), ChargeOn: failed},
		{Policy: sluice.SlidingLog(50, time.Hour).Named("failed-per-ip"), ChargeOn: failed},
		{Policy: sluice.FixedWindow(1000, time.Minute).Named("per-ip")},
	}, nil)
	reached := 0
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		if r.Header.Get("X-Password") != "right" {
			http.Error(w, "bad password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	})
	h := m.Handler(login)
	try := func(user, password string) int {
		return serve(h, request("192.0.2.1:1", "X-User", user, "X-Password", password)).StatusCode
	}
	// Successful logins are not counted.
	for range 10 {
		if got := try("alice", "right"); got != 200 {
			t.Fatalf("good login: %d", got)
		}
	}
	for i := range 5 {
		if got := try("alice", "wrong"); got != 401 {
			t.Fatalf("failure %d: %d, want 401", i+1, got)
		}
	}
	before := reached
	resp := serve(h, request("192.0.2.1:1", "X-User", "alice", "X-Password", "right"))
	if resp.StatusCode != 429 || reached != before {
		t.Fatalf("after 5 failures: %d (handler reached %d more times), want 429 before the handler", resp.StatusCode, reached-before)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"failed-per-account";r=0;t=`) {
		t.Errorf("RateLimit = %q", got)
	}
	// Other accounts are unaffected, and the refused attempt charged
	// nothing: per-ip has 16 admitted requests (10 + 5 + bob's 1).
	if got := try("bob", "wrong"); got != 401 {
		t.Errorf("bob: %d, want 401", got)
	}
	var last Event
	m.onDecision = func(e *Event) { last = *e; last.Results = append([]LimitResult(nil), e.Results...) }
	try("bob", "right")
	if got := last.Results[2].Decision.Remaining; got != 1000-17 {
		t.Errorf("per-ip Remaining = %d, want %d", got, 1000-17)
	}
	if got := last.Results[1].Decision.Remaining; got != 50-6-1 { // 6 failures so far; peek of 1
		t.Errorf("failed-per-ip Remaining = %d, want %d", got, 50-7)
	}
	// 15 minutes later alice may try again.
	c.Advance(15*time.Minute + time.Millisecond)
	if got := try("alice", "right"); got != 200 {
		t.Errorf("after 15 minutes: %d, want 200", got)
	}
}

func TestChargeOnWithShadowIsRefused(t *testing.T) {
	_, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.FixedWindow(1, time.Second), Shadow: true, ChargeOn: func(int) bool { return true }}}, nil)
	if err == nil || !strings.Contains(err.Error(), "ChargeOn cannot be combined with Shadow") {
		t.Errorf("New = %v", err)
	}
}

func TestChargeOnKeepsWriterAbilities(t *testing.T) {
	m := mustNew(t, memstore.New(memstore.Options{}), []Limit{{Policy: sluice.FixedWindow(5, time.Minute), ChargeOn: func(s int) bool { return s == 500 }}}, nil)
	var flushErr error
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part")
		flushErr = http.NewResponseController(w).Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("192.0.2.1:1"))
	if flushErr != nil || !rec.Flushed {
		t.Errorf("Flush through the middleware: %v, flushed %v", flushErr, rec.Flushed)
	}
	if _, _, err := http.NewResponseController(&statusWriter{ResponseWriter: rec}).Hijack(); !errors.Is(err, http.ErrNotSupported) {
		t.Errorf("Hijack on a recorder = %v, want ErrNotSupported", err)
	}
}

func TestParseHeaderStyle(t *testing.T) {
	tests := []struct {
		in   string
		want HeaderStyle
		err  string
	}{
		{"ietf", HeadersIETF, ""},
		{"ietf,x", HeadersIETF | HeadersX, ""},
		{"legacy, x", HeadersLegacy | HeadersX, ""},
		{"none", HeadersNone, ""},
		{"none,ietf", 0, "none cannot be combined"},
		{"", 0, `unknown header style ""`},
		{"github", 0, `unknown header style "github"`},
	}
	for _, tt := range tests {
		got, err := ParseHeaderStyle(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseHeaderStyle(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseHeaderStyle(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if back, err := ParseHeaderStyle(got.String()); err != nil || back != got {
			t.Errorf("ParseHeaderStyle(%q.String() = %q) = %v, %v", tt.in, got.String(), back, err)
		}
	}
}

// TestChecksShiftBetweenRequests checks that a request whose limits apply
// differently from the previous one's (a limit without a key moves the
// next limit's check up a place, a PolicyFunc changes a policy) is decided
// under each limit's own policy: prepare keeps a check of the previous
// request only for the same limit at the same place. The remaining units
// tell which policy each key was charged under.
func TestChecksShiftBetweenRequests(t *testing.T) {
	c := newClock()
	st := newStore(c)
	var got []LimitResult
	m, err := New(st, []Limit{
		{Policy: sluice.FixedWindow(10, time.Hour).Named("per-key"), Key: Header("X-API-Key")},
		{Policy: sluice.FixedWindow(100, time.Hour).Named("per-ip")},
		{Policy: sluice.FixedWindow(1000, time.Hour).Named("tier"), Key: Header("X-Tier"),
			PolicyFunc: func(_ *http.Request, tier string) (sluice.Policy, bool) {
				if tier == "plat" {
					return sluice.FixedWindow(20, time.Hour).Named("plat"), true
				}
				return sluice.FixedWindow(50, time.Hour), tier == "gold"
			}},
	}, &Options{OnDecision: func(ev *Event) { got = append(got[:0], ev.Results...) }})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(okHandler)
	for i, tc := range []struct {
		apiKey, tier string
		want         [3]int64 // each limit's remaining, -1 when it does not apply
	}{
		{"k", "gold", [3]int64{9, 99, 49}},
		{"", "", [3]int64{-1, 98, -1}},
		{"", "gold", [3]int64{-1, 97, 48}},
		{"k", "", [3]int64{8, 96, -1}},
		{"k", "silver", [3]int64{7, 95, -1}},
		{"k", "gold", [3]int64{6, 94, 47}},
		{"k", "plat", [3]int64{5, 93, 19}},
		{"k", "gold", [3]int64{4, 92, 46}},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		if tc.apiKey != "" {
			r.Header.Set("X-API-Key", tc.apiKey)
		}
		if tc.tier != "" {
			r.Header.Set("X-Tier", tc.tier)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		for j, want := range tc.want {
			res := got[j]
			if res.Applied != (want >= 0) || want >= 0 && (res.Decision.Remaining != want || !res.Decision.Allowed) ||
				want < 0 && res.Decision != (sluice.Decision{}) {
				t.Errorf("request %d, limit %d: %+v, want remaining %d (-1: not applied)", i, j, res, want)
			}
		}
	}
}

// TestPenalty: a policy with a penalty blocks a client that went over it;
// Retry-After and the RateLimit field say when the block ends, and a
// client that waits that long is admitted.
func TestPenalty(t *testing.T) {
	c := newClock()
	p := sluice.GCRA(1, time.Second, 0).Named("guarded")
	p.Penalty = sluice.Penalty{BlockFor: time.Minute, Factor: 2, ForgetAfter: time.Hour}
	h := mustNew(t, newStore(c), []Limit{{Policy: p}}, nil).Handler(okHandler)
	serve(h, request("192.0.2.1:1"))
	for i, want := range []string{"60", "60"} {
		resp := serve(h, request("192.0.2.1:1"))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != want || resp.Header.Get("RateLimit") != `"guarded";r=0;t=`+want {
			t.Fatalf("request %d: %d Retry-After %q RateLimit %q, want 429, %s", i+2, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"), want)
		}
	}
	c.Advance(time.Minute)
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 200 {
		t.Fatalf("after the block: %d, want 200", resp.StatusCode)
	}
	// The second offence doubles the block.
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "120" {
		t.Errorf("second offence: %d Retry-After %q, want 429 120", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
