package server

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func (f *fixture) explain(t *testing.T, query string) (int, map[string]any) {
	t.Helper()
	rec := f.do("GET", "/v1/explain?"+query, "")
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /v1/explain?%s: %v in %s", query, err, rec.Body)
	}
	return rec.Code, body
}

// TestExplain spends part of a limit, moves the clock, and compares every
// field of the explanation with numbers worked out by hand.
func TestExplain(t *testing.T) {
	at := func(d time.Duration) string { return start.Add(d).UTC().Format(timeFormat) }
	tests := []struct {
		name   string
		limit  string
		checks int
		wait   time.Duration
		want   map[string]any // less what every case has alike (below)
	}{
		{
			name: "token bucket", limit: "api-key", checks: 3, wait: 50 * time.Millisecond,
			want: map[string]any{
				"algorithm": "token_bucket",
				"policy":    map[string]any{"limit": 10.0, "period": "1s", "period_ms": 1000.0, "burst": 10.0},
				"state":     map[string]any{"tokens": "7.5", "queued": "2.5", "backlog_us": 250000.0, "full_at": at(300 * time.Millisecond)},
				"allowed":   true, "remaining": 6.0, "retry_after_ms": 0.0, "reset_after_ms": 350.0,
				"summary": "The bucket holds 7.5 of 10 tokens and is full again in 250ms. A request of cost 1 would be allowed, leaving 6.",
			},
		},
		{
			name: "untracked", limit: "api-key", checks: 0,
			want: map[string]any{
				"algorithm": "token_bucket",
				"policy":    map[string]any{"limit": 10.0, "period": "1s", "period_ms": 1000.0, "burst": 10.0},
				"state":     map[string]any{"tokens": "10", "queued": "0", "backlog_us": 0.0},
				"allowed":   true, "remaining": 9.0, "retry_after_ms": 0.0, "reset_after_ms": 100.0,
				"summary": "The bucket holds 10 of 10 tokens (full). Sluice keeps no state for this key: it is at its initial state. A request of cost 1 would be allowed, leaving 9.",
			},
		},
		{
			name: "leaky bucket", limit: "leaky", checks: 5, wait: 20 * time.Millisecond,
			want: map[string]any{
				"algorithm": "leaky_bucket",
				"policy":    map[string]any{"limit": 10.0, "period": "1s", "period_ms": 1000.0, "burst": 5.0},
				"state":     map[string]any{"tokens": "0.2", "queued": "4.8", "backlog_us": 480000.0, "full_at": at(500 * time.Millisecond)},
				"allowed":   false, "remaining": 0.0, "retry_after_ms": 80.0, "reset_after_ms": 480.0,
				"summary": "The queue holds 4.8 of 5 units and is empty in 480ms. A request of cost 1 would be denied; retry in 80ms.",
			},
		},
		{
			name: "fixed window", limit: "tiny", checks: 3, wait: 10 * time.Second,
			want: map[string]any{
				"algorithm": "fixed_window",
				"policy":    map[string]any{"limit": 2.0, "period": "1m", "period_ms": 60000.0},
				"state":     map[string]any{"window_start": at(-20 * time.Second), "window_end": at(40 * time.Second), "current": 2.0, "estimate": "2"},
				"allowed":   false, "remaining": 0.0, "retry_after_ms": 30000.0, "reset_after_ms": 30000.0,
				"summary": "The window that ends in 30s has counted 2 of 2. A request of cost 1 would be denied; retry in 30s.",
			},
		},
		{
			name: "sliding window", limit: "per-ip", checks: 30, wait: 55 * time.Second, // 15 s into the next window
			want: map[string]any{
				"algorithm": "sliding_window",
				"policy":    map[string]any{"limit": 100.0, "period": "1m", "period_ms": 60000.0},
				"state":     map[string]any{"window_start": at(40 * time.Second), "window_end": at(100 * time.Second), "current": 0.0, "previous": 30.0, "estimate": "22.5"},
				"allowed":   true, "remaining": 76.0, "retry_after_ms": 0.0, "reset_after_ms": 105000.0,
				"summary": "The estimate is 22.5 of 100: 30 in the previous window, weighted by the 45s of it still in the last 1m, plus 0 in the current one. A request of cost 1 would be allowed, leaving 76.",
			},
		},
		{
			name: "dry run", limit: "dry", checks: 2, wait: time.Second,
			want: map[string]any{
				"algorithm": "fixed_window",
				"policy":    map[string]any{"limit": 1.0, "period": "1m", "period_ms": 60000.0, "shadow": true},
				"state":     map[string]any{"window_start": at(-20 * time.Second), "window_end": at(40 * time.Second), "current": 1.0, "estimate": "1"},
				"allowed":   false, "remaining": 0.0, "retry_after_ms": 39000.0, "reset_after_ms": 39000.0,
				"summary": "The window that ends in 39s has counted 1 of 1. A request of cost 1 would be denied; retry in 39s. This limit is a dry run: it is counted but never denies.",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, testYAML)
			for range tt.checks {
				f.check(`{"limit":"` + tt.limit + `","key":"k"}`)
			}
			f.clock.Advance(tt.wait)
			code, got := f.explain(t, "limit="+tt.limit+"&key=k")
			if code != http.StatusOK {
				t.Fatalf("status %d, body %v", code, got)
			}
			// What every case explains alike: the limit and key asked, at
			// the clock's time, tracked once checked, for a cost of 1.
			want := map[string]any{"limit": tt.limit, "key": "k", "at": at(tt.wait), "tracked": tt.checks > 0, "cost": 1.0}
			maps.Copy(want, tt.want)
			gb, _ := json.MarshalIndent(got, "", " ")
			wb, _ := json.MarshalIndent(want, "", " ")
			if string(gb) != string(wb) {
				t.Errorf("explain =\n%s\nwant\n%s", gb, wb)
			}
		})
	}
}

func TestExplainSlidingLog(t *testing.T) {
	yaml := `
limits:
  log: {algorithm: sliding_log, limit: 3, period: 10s}
`
	f := newFixture(t, yaml)
	f.check(`{"limit":"log","key":"k"}`)
	f.clock.Advance(2 * time.Second)
	f.check(`{"limit":"log","key":"k","cost":2}`)
	f.clock.Advance(time.Second)
	_, got := f.explain(t, "limit=log&key=k")
	state := got["state"].(map[string]any)
	if state["entries"] != 2.0 || state["counted"] != 3.0 ||
		state["oldest"] != start.UTC().Format(timeFormat) || state["newest"] != start.Add(2*time.Second).UTC().Format(timeFormat) {
		t.Errorf("state = %v, want 2 entries of cost 3 from start to start+2s", state)
	}
	want := "The log holds 3 of 3 in the last 10s (2 entries); the oldest stops counting in 7s. A request of cost 1 would be denied; retry in 7s."
	if got["summary"] != want {
		t.Errorf("summary = %q, want %q", got["summary"], want)
	}
}

// TestExplainChargesNothing explains a key many times and checks that the
// next decision is the one it would have been.
func TestExplainChargesNothing(t *testing.T) {
	f := newFixture(t, testYAML)
	for range 5 {
		f.explain(t, "limit=tiny&key=k")
		f.explain(t, "limit=tiny&key=k&cost=2")
	}
	if n := f.store.Len(); n != 0 {
		t.Errorf("the store tracks %d keys after explaining, want 0", n)
	}
	want := `{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":40000}`
	f.wantCheck(t, `{"limit":"tiny","key":"k"}`, want, "check after explaining")
}

// TestExplainNever: a cost above the capacity is explained as every door
// decides it: never allowed (retry_after_ms -1), nothing charged, with the
// key's state described as for any cost; and /v1/check agrees.
func TestExplainNever(t *testing.T) {
	f := newFixture(t, testYAML)
	f.check(`{"limit":"tiny","key":"k"}`)
	code, body := f.explain(t, "limit=tiny&key=k&cost=3")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/explain cost 3 of 2 = %d %v, want 200", code, body)
	}
	for field, want := range map[string]any{"cost": 3.0, "allowed": false, "remaining": 1.0, "retry_after_ms": -1.0, "reset_after_ms": 40000.0, "tracked": true} {
		if body[field] != want {
			t.Errorf("%s = %v, want %v", field, body[field], want)
		}
	}
	if state, _ := body["state"].(map[string]any); state["current"] != 1.0 {
		t.Errorf("state = %v, want the window's count of 1", body["state"])
	}
	if s, _ := body["summary"].(string); !strings.HasSuffix(s, "A request of cost 3 can never be allowed: it exceeds the capacity of 2, and it would be denied without charging anything.") {
		t.Errorf("summary = %q", s)
	}
	want := `{"allowed":false,"limit":2,"remaining":1,"retry_after_ms":-1,"reset_after_ms":40000}`
	f.wantCheck(t, `{"limit":"tiny","key":"k","cost":3}`, want, "check of cost 3")
	want = `{"allowed":true,"limit":2,"remaining":0,"retry_after_ms":0,"reset_after_ms":40000}`
	f.wantCheck(t, `{"limit":"tiny","key":"k"}`, want, "check after explaining (nothing charged)")
}

func TestExplainErrors(t *testing.T) {
	f := newFixture(t, testYAML)
	for _, tt := range []struct {
		query  string
		status int
		msg    string
	}{
		{"key=k", 400, "limit is missing: /v1/explain?limit=NAME&key=KEY"},
		{"limit=tiny", 400, "key is missing: /v1/explain?limit=NAME&key=KEY"},
		{"limit=tiny&key=", 400, "key is empty"},
		{"limit=nope&key=k", 404, `no limit named "nope"`},
		{"limit=tiny&key=k&cost=0", 400, `cost must be a whole number of at least 1, got "0"`},
		{"limit=tiny&key=k&cost=x", 400, `cost must be a whole number of at least 1, got "x"`},
	} {
		t.Run(tt.query, func(t *testing.T) {
			code, body := f.explain(t, tt.query)
			if code != tt.status || body["error"] != tt.msg {
				t.Errorf("GET /v1/explain?%s = %d %v, want %d %q", tt.query, code, body, tt.status, tt.msg)
			}
		})
	}
	if rec := f.do("POST", "/v1/explain?limit=tiny&key=k", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/explain = %d, want 405", rec.Code)
	}
	// Keys with any bytes travel in the query.
	key := "a b&c=d\x00{é}"
	if code, body := f.explain(t, "limit=tiny&key="+url.QueryEscape(key)); code != 200 || body["key"] != key {
		t.Errorf("explain of %q = %d %v", key, code, body)
	}
}

// plainStore is a Store that cannot report state.
type plainStore struct{ sluice.Store }

func TestExplainWithoutInspector(t *testing.T) {
	h, err := New(parse(t, testYAML), plainStore{memstore.New(memstore.Options{})}, Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h}
	code, body := f.explain(t, "limit=tiny&key=k")
	if code != http.StatusNotImplemented || body["error"] != "the store cannot report the state of a key" {
		t.Errorf("explain = %d %v, want 501", code, body)
	}
}

// TestExplainOverride checks that an explanation says when a runtime
// override sets the key's numbers.
func TestExplainOverride(t *testing.T) {
	f := newFixture(t, testYAML+"admin: {token: "+ovToken+"}\n")
	f.auth = "Bearer " + ovToken
	if rec := f.do("PUT", "/v1/overrides/tiny/k1", `{"limit":7,"period":"1m"}`); rec.Code != http.StatusCreated {
		t.Fatalf("PUT override = %d %s", rec.Code, rec.Body)
	}
	_, got := f.explain(t, "limit=tiny&key=k1")
	if got["override"] != true || !strings.HasSuffix(got["summary"].(string), " A runtime override sets this key's numbers (see /v1/overrides).") {
		t.Errorf("explain of an overridden key = %v, want override true and a summary that says so", got)
	}
	if _, got := f.explain(t, "limit=tiny&key=k2"); got["override"] != nil {
		t.Errorf("explain of another key = %v, want no override", got)
	}
}
