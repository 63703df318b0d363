package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// usageYAML has a budget of tokens (a fixed window, so that the numbers
// are plain counts) with a settle_within of its own, a token bucket
// budget, a dry run and a concurrency limit.
const usageYAML = `
limits:
  tokens: {algorithm: fixed_window, limit: 1000, period: 1h, settle_within: 2m}
  team: {algorithm: token_bucket, limit: 3600, period: 1h}
  dry: {algorithm: fixed_window, limit: 10, period: 1h, shadow: true}
  inflight: {algorithm: concurrency, limit: 2, lease: 30s}
`

// answer posts body to path, wants 200, and returns the answer's fields.
func answer(t *testing.T, f *fixture, path, body string) map[string]any {
	t.Helper()
	rec := f.do("POST", path, body)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s %s = %d %s, want 200", path, body, rec.Code, rec.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("POST %s %s: %v in %s", path, body, err, rec.Body)
	}
	return got
}

// remaining returns what a check of cost 0 answers for key under limit:
// allowed and remaining.
func remaining(t *testing.T, f *fixture, limit, key string) (bool, float64) {
	t.Helper()
	a := answer(t, f, "/v1/check", `{"limit":`+quote(limit)+`,"key":`+quote(key)+`,"cost":0}`)
	return a["allowed"] == true, a["remaining"].(float64)
}

// TestCheckCostZero checks that a check of cost 0 charges nothing and is
// allowed while a unit is left: refused once the budget is spent, or in
// debt, with the retry_after_ms of a request of 1 and RateLimit r=0.
func TestCheckCostZero(t *testing.T) {
	f := newFixture(t, usageYAML)
	if ok, rem := remaining(t, f, "tokens", "a"); !ok || rem != 1000 {
		t.Fatalf("check of 0 on a new key = %v, %v; want allowed, 1000", ok, rem)
	}
	if ok, rem := remaining(t, f, "tokens", "a"); !ok || rem != 1000 {
		t.Fatalf("a second check of 0 = %v, %v; want allowed, 1000 (nothing charged)", ok, rem)
	}
	answer(t, f, "/v1/charge", `{"limit":"tokens","key":"a","cost":1000}`)
	rec := f.check(`{"limit":"tokens","key":"a","cost":0}`)
	var a map[string]any
	json.Unmarshal(rec.Body.Bytes(), &a)
	// start is 20 s into an hour's minute: the window ends at the hour.
	end := start.Truncate(time.Hour).Add(time.Hour).Sub(start)
	if a["allowed"] != false || a["remaining"] != 0.0 || a["retry_after_ms"] != float64(end.Milliseconds()) {
		t.Errorf("check of 0 with the budget spent = %s, want refused, 0 left, retry_after_ms %d", rec.Body, end.Milliseconds())
	}
	if got := rec.Header().Get("RateLimit"); !strings.Contains(got, `"tokens";r=0;`) {
		t.Errorf("RateLimit = %q, want r=0", got)
	}
}

// TestChargeAndRefund checks POST /v1/charge and /v1/refund: a charge is
// counted whether or not it fits and answers whether it did; a key in
// debt is refused until the debt is repaid; a refund gives units back.
func TestChargeAndRefund(t *testing.T) {
	f := newFixture(t, usageYAML)
	a := answer(t, f, "/v1/charge", `{"limit":"team","key":"k","cost":3000}`)
	if a["allowed"] != true || a["remaining"] != 600.0 {
		t.Fatalf("charge of 3000 of 3600 = %v, want allowed, 600 left", a)
	}
	rec := f.do("POST", "/v1/charge", `{"limit":"team","key":"k","cost":1200}`)
	json.Unmarshal(rec.Body.Bytes(), &a)
	// 600 units owed beyond the bucket at 1 a second: a request of 1
	// passes in 601 s.
	if a["allowed"] != false || a["remaining"] != 0.0 || a["retry_after_ms"] != 601000.0 {
		t.Fatalf("charge of 1200 more = %s, want not fitted, 0 left, retry_after_ms 601000", rec.Body)
	}
	if got := rec.Header().Get("RateLimit"); !strings.Contains(got, `"team";r=0;`) {
		t.Errorf("RateLimit after going into debt = %q, want r=0", got)
	}
	if ok, _ := remaining(t, f, "team", "k"); ok {
		t.Fatal("check of 0 in debt is allowed, want refused")
	}
	if rec := f.check(`{"limit":"team","key":"k"}`); !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Fatalf("check of 1 in debt = %s, want refused", rec.Body)
	}
	a = answer(t, f, "/v1/refund", `{"limit":"team","key":"k","cost":700}`)
	if a["allowed"] != true || a["remaining"] != 100.0 {
		t.Fatalf("refund of 700 = %v, want allowed, 100 left", a)
	}
	f.clock.Advance(601 * time.Second)
	if ok, rem := remaining(t, f, "team", "k"); !ok || rem != 701 {
		t.Fatalf("check of 0 after 601 s = %v, %v; want allowed, 701", ok, rem)
	}
	// A refund never leaves a key better than new.
	a = answer(t, f, "/v1/refund", `{"limit":"team","key":"k","cost":100000}`)
	if a["remaining"] != 3600.0 {
		t.Errorf("refund of everything = %v, want 3600 left", a)
	}
}

// TestChargeErrors checks that a malformed charge or refund is a 400
// problem+json naming the field, a concurrency limit a 422, and an
// unknown limit a 404, never a 5xx.
func TestChargeErrors(t *testing.T) {
	f := newFixture(t, usageYAML)
	for _, path := range []string{"/v1/charge", "/v1/refund"} {
		for _, tt := range []struct {
			body   string
			status int
			want   string
		}{
			{``, 400, "the body is empty"},
			{`{}`, 400, `the body must hold "limit", "key" and "cost"`},
			{`{"limit":"tokens","key":"a"}`, 400, "cost is missing"},
			{`{"limit":"tokens","key":"a","cost":0}`, 400, "cost must be at least 1, got 0"},
			{`{"limit":"tokens","key":"a","cost":-5}`, 400, "cost must be 0 or more, got -5"},
			{`{"limit":"tokens","key":"a","cost":1.5}`, 400, "cost must be a whole number"},
			{`{"limit":"tokens","key":"a","cost":99999999999999999999}`, 400, "too large"},
			{`{"limit":"tokens","key":"","cost":1}`, 400, "key is empty"},
			{`{"limit":"tokens","cost":1}`, 400, "key is missing"},
			{`{"key":"a","cost":1}`, 400, "limit is missing"},
			{`{"limit":"tokens","key":"a","cost":1,"cost":2}`, 400, "cost is given twice"},
			{`{"limit":"tokens","key":"a","cost":null}`, 400, "cost is null"},
			{`{"limit":"tokens","key":"a","cost":1,"lease":true}`, 400, `unknown field "lease" (want limit, key and cost)`},
			{`{"limit":"tokens","key":"a","Cost":1}`, 400, `unknown field "Cost"`},
			{`{"limit":"tokens","key":"a","cost":1} {}`, 400, "more than one JSON value"},
			{`[]`, 400, "must be a JSON object"},
			{`{"limit":"nope","key":"a","cost":1}`, 404, `no limit named "nope"`},
			{`{"limit":"inflight","key":"a","cost":1}`, 422, "is a concurrency limit"},
		} {
			rec := f.do("POST", path, tt.body)
			var p struct{ Detail string }
			json.Unmarshal(rec.Body.Bytes(), &p)
			if rec.Code != tt.status || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, tt.want) {
				t.Errorf("POST %s %s = %d %s %s, want %d problem+json containing %q", path, tt.body, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.status, tt.want)
			}
		}
		if rec := f.do("GET", path, ""); rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s = %d, want 405", path, rec.Code)
		}
	}
}

// TestCheckLeaseSettles checks a check's lease of estimates: the answer's
// lease and settle_within_ms, a release whose usage charges more than the
// estimate or gives some back, once, and a lease past settle_within that
// settles nothing.
func TestCheckLeaseSettles(t *testing.T) {
	f := newFixture(t, usageYAML)
	a := answer(t, f, "/v1/check", `{"limit":"tokens","key":"a","cost":100,"lease":true}`)
	lease, _ := a["lease"].(string)
	if a["allowed"] != true || a["remaining"] != 900.0 || !strings.HasPrefix(lease, "u1.") ||
		a["settle_within_ms"] != 120000.0 || a["lease_expires_in_ms"] != 120000.0 {
		t.Fatalf("check with a lease = %v, want allowed, 900 left, a u1. lease to settle within 120000 ms", a)
	}
	release := func(lease, usage string) string {
		t.Helper()
		rec := f.do("POST", "/v1/release", `{"lease":`+quote(lease)+`,"usage":`+usage+`}`)
		if rec.Code != http.StatusOK {
			t.Fatalf("release %s = %d %s", usage, rec.Code, rec.Body)
		}
		return strings.TrimSpace(rec.Body.String())
	}
	if got := release(lease, `{"tokens":250}`); got != `{"released":true}` {
		t.Fatalf("release with usage 250 = %s, want released", got)
	}
	if _, rem := remaining(t, f, "tokens", "a"); rem != 750 {
		t.Fatalf("after usage 250 of an estimate of 100: %v left, want 750", rem)
	}
	if got := release(lease, `{"tokens":250}`); got != `{"released":false}` {
		t.Fatalf("a second release = %s, want released false", got)
	}
	if _, rem := remaining(t, f, "tokens", "a"); rem != 750 {
		t.Fatalf("after a second release: %v left, want 750 (nothing charged twice)", rem)
	}

	// An estimate above the usage gives the difference back.
	a = answer(t, f, "/v1/check", `{"limit":"tokens","key":"a","cost":500,"lease":true}`)
	release(a["lease"].(string), `{"tokens":20}`)
	if _, rem := remaining(t, f, "tokens", "a"); rem != 730 {
		t.Fatalf("after usage 20 of an estimate of 500: %v left, want 730", rem)
	}

	// A check of 0 with a lease charges only what the release reports.
	a = answer(t, f, "/v1/check", `{"limit":"tokens","key":"b","cost":0,"lease":true}`)
	release(a["lease"].(string), `{"tokens":1200}`)
	if ok, rem := remaining(t, f, "tokens", "b"); ok || rem != 0 {
		t.Fatalf("after usage 1200 of 1000 from a check of 0: %v, %v; want refused, 0 left", ok, rem)
	}

	// Past settle_within, the estimate stands.
	a = answer(t, f, "/v1/check", `{"limit":"tokens","key":"c","cost":300,"lease":true}`)
	f.clock.Advance(2*time.Minute + time.Millisecond)
	if got := release(a["lease"].(string), `{"tokens":0}`); got != `{"released":false}` {
		t.Fatalf("release after settle_within = %s, want released false", got)
	}
	if _, rem := remaining(t, f, "tokens", "c"); rem != 700 {
		t.Fatalf("after a release past settle_within: %v left, want 700 (the estimate)", rem)
	}

	// The store's counts: 150 and 1200 charged above their estimates, 480
	// given back below one, and the estimate of c left unsettled.
	for _, m := range []struct {
		name string
		want float64
	}{
		{"sluice_usage_debited_units_total", 1350},
		{"sluice_usage_refunded_units_total", 480},
		{"sluice_usage_expired_total", 1},
	} {
		if got := counter(t, f.reg, m.name, "tokens"); got != m.want {
			t.Errorf("%s{limit=tokens} = %v, want %v", m.name, got, m.want)
		}
	}

	// A lease of estimates alone holds nothing to renew.
	a = answer(t, f, "/v1/check", `{"limit":"tokens","key":"d","cost":1,"lease":true}`)
	if rec := f.do("POST", "/v1/renew", `{"lease":`+quote(a["lease"].(string))+`}`); rec.Code != http.StatusNotFound {
		t.Errorf("renew of a lease of estimates = %d %s, want 404", rec.Code, rec.Body)
	}
}

// TestCheckLeaseMixed checks a lease over a concurrency limit, a dry run
// and two budgets: the usage of each budget, named, settles its own
// estimate, the dry run has none, and the same release frees the slot.
func TestCheckLeaseMixed(t *testing.T) {
	f := newFixture(t, usageYAML)
	body := `{"checks":[{"limit":"dry","key":"m","cost":5},{"limit":"inflight","key":"m"},{"limit":"tokens","key":"m","cost":100},{"limit":"team","key":"m","cost":50}],"lease":true}`
	a := answer(t, f, "/v1/check", body)
	lease, _ := a["lease"].(string)
	if a["allowed"] != true || lease == "" || a["lease_expires_in_ms"] != 30000.0 || a["settle_within_ms"] != 120000.0 {
		t.Fatalf("check = %v, want allowed, a lease expiring with the slot in 30000 ms, settled within 120000", a)
	}
	// A renewal extends the slot's hold.
	f.clock.Advance(20 * time.Second)
	if rec := f.do("POST", "/v1/renew", `{"lease":`+quote(lease)+`}`); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"lease_expires_in_ms":30000}` {
		t.Fatalf("renew = %d %s, want 200 lease_expires_in_ms 30000", rec.Code, rec.Body)
	}
	rec := f.do("POST", "/v1/release", `{"lease":`+quote(lease)+`,"usage":{"dry":1}}`)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `usage.dry: the lease holds no estimate of limit`) {
		t.Fatalf("release with the dry run's usage = %d %s, want 400", rec.Code, rec.Body)
	}
	if got := body2(t, f, `{"lease":`+quote(lease)+`,"usage":{"tokens":10,"team":80}}`); got != `{"released":true}` {
		t.Fatalf("release = %s, want released", got)
	}
	if _, rem := remaining(t, f, "tokens", "m"); rem != 990 {
		t.Errorf("tokens after usage 10 of 100: %v left, want 990", rem)
	}
	if _, rem := remaining(t, f, "team", "m"); rem != 3540 {
		t.Errorf("team after usage 80 of 50 and 20 s: %v left, want 3540", rem)
	}
	for range 2 {
		if a := answer(t, f, "/v1/check", `{"limit":"inflight","key":"m"}`); a["allowed"] != true {
			t.Fatalf("inflight after the release = %v, want its 2 slots free", a)
		}
	}
}

// body2 releases with body and returns the answer.
func body2(t *testing.T, f *fixture, body string) string {
	t.Helper()
	rec := f.do("POST", "/v1/release", body)
	if rec.Code != http.StatusOK {
		t.Fatalf("release %s = %d %s", body, rec.Code, rec.Body)
	}
	return strings.TrimSpace(rec.Body.String())
}

// TestExplainDebt checks that /v1/explain shows a key's debt, the units
// owed beyond its limit, and when a request of 1 passes again, worked
// out by hand for each algorithm: and nothing for a key without debt.
func TestExplainDebt(t *testing.T) {
	f := newFixture(t, `
limits:
  fw: {algorithm: fixed_window, limit: 100, period: 1h}
  tb: {algorithm: token_bucket, limit: 100, period: 100s}
  sw: {algorithm: sliding_window, limit: 100, period: 1h}
  sl: {algorithm: sliding_log, limit: 100, period: 1h}
`)
	// start is 20 s into a minute, 13m20s into an hour (1_700_000_000 s).
	toHour := start.Truncate(time.Hour).Add(time.Hour).Sub(start)
	for _, tt := range []struct {
		limit string
		debt  float64
		in    time.Duration
	}{
		{"fw", 20, toHour},                                   // the window ends
		{"tb", 20, 21 * time.Second},                         // 20 units owed and 1 more, at 1 a second
		{"sw", 20, toHour + 10*time.Minute + 30*time.Second}, // in the next window 120·(1 − x) + 1 ≤ 100 from x = 0.175 of it
		{"sl", 20, time.Hour},                                // the entry leaves the log
	} {
		answer(t, f, "/v1/charge", `{"limit":"`+tt.limit+`","key":"k","cost":120}`)
		for _, q := range []string{"limit=" + tt.limit + "&key=k", "limit=" + tt.limit + "&key=k&cost=5"} {
			code, e := f.explain(t, q)
			if code != http.StatusOK || e["debt"] != tt.debt || e["debt_repaid_in_ms"] != float64(tt.in.Milliseconds()) ||
				e["debt_repaid_at"] != start.Add(tt.in).UTC().Format(timeFormat) || !strings.Contains(e["summary"].(string), "It owes 20 units beyond its limit") {
				t.Errorf("explain %s = %d %v, want debt %v repaid in %v", q, code, e, tt.debt, tt.in)
			}
		}
		_, e := f.explain(t, "limit="+tt.limit+"&key=other")
		if _, ok := e["debt"]; ok {
			t.Errorf("explain of a key without debt = %v, want no debt", e)
		}
	}
}
