package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const leaseYAML = `
limits:
  inflight:
    algorithm: concurrency
    limit: 2
    lease: 30s
  per-key:
    algorithm: token_bucket
    limit: 100
    period: 1s
`

// checkLease posts a check and returns the answer's fields.
func checkLease(t *testing.T, f *fixture, body string) map[string]any {
	t.Helper()
	rec := f.check(body)
	if rec.Code != http.StatusOK {
		t.Fatalf("check %s: %d %s", body, rec.Code, rec.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("check %s: %v in %s", body, err, rec.Body)
	}
	return got
}

// TestCheckLease checks the decision API's leases: an admitted check of a
// concurrency limit answers its lease and when it expires; the limit then
// refuses until a release frees a slot; a second release frees nothing;
// a renewal answers the new expiry, and 404 once the lease is released;
// the lease expires by itself on the store's clock.
func TestCheckLease(t *testing.T) {
	f := newFixture(t, leaseYAML)
	one := `{"limit":"inflight","key":"u1"}`
	a := checkLease(t, f, one)
	if a["allowed"] != true || a["remaining"] != 1.0 || a["lease_expires_in_ms"] != 30000.0 {
		t.Fatalf("first check = %v, want allowed, remaining 1, lease_expires_in_ms 30000", a)
	}
	leaseA, _ := a["lease"].(string)
	if leaseA == "" {
		t.Fatalf("first check = %v, want a lease", a)
	}
	checks := `{"checks":[{"limit":"inflight","key":"u1"},{"limit":"per-key","key":"u1"}]}`
	b := checkLease(t, f, checks)
	leaseB, _ := b["lease"].(string)
	if b["allowed"] != true || leaseB == "" || b["lease_expires_in_ms"] != 30000.0 {
		t.Fatalf("second check (with a rate) = %v, want allowed with a lease", b)
	}
	if c := checkLease(t, f, one); c["allowed"] != false || c["lease"] != nil || c["retry_after_ms"] != 30000.0 {
		t.Fatalf("third check = %v, want refused without a lease, retry_after_ms 30000 (the first expiry)", c)
	}

	release := func(lease string) *http.Response {
		t.Helper()
		return f.do("POST", "/v1/release", `{"lease":`+quote(lease)+`}`).Result()
	}
	if got := body(t, release(leaseA)); got != `{"released":true}` {
		t.Fatalf("release = %s, want released true", got)
	}
	if got := body(t, release(leaseA)); got != `{"released":false}` {
		t.Fatalf("release again = %s, want released false", got)
	}
	if c := checkLease(t, f, one); c["allowed"] != true {
		t.Fatalf("check after the release = %v, want allowed", c)
	}

	f.clock.Advance(10 * time.Second)
	if rec := f.do("POST", "/v1/renew", `{"lease":`+quote(leaseB)+`}`); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"lease_expires_in_ms":30000}` {
		t.Fatalf("renew = %d %s, want 200 lease_expires_in_ms 30000", rec.Code, rec.Body)
	}
	release(leaseB)
	if rec := f.do("POST", "/v1/renew", `{"lease":`+quote(leaseB)+`}`); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "expired or was released") {
		t.Fatalf("renew after the release = %d %s, want 404 saying why", rec.Code, rec.Body)
	}
	// The third lease, never released, expires 30 s after its check.
	f.clock.Advance(30 * time.Second)
	if c := checkLease(t, f, one); c["allowed"] != true || c["remaining"] != 1.0 {
		t.Fatalf("check after every lease expired = %v, want allowed with remaining 1", c)
	}
	if got := counter(t, f.reg, "sluice_lease_expired_total", "inflight"); got != 1 {
		t.Errorf("sluice_lease_expired_total{limit=inflight} = %v, want 1 (the lease never released)", got)
	}
	if got := counter(t, f.reg, "sluice_lease_units_held", "inflight"); got != 1 {
		t.Errorf("sluice_lease_units_held{limit=inflight} = %v after the expiry and one new check, want 1", got)
	}
	if freed, not := counter(t, f.reg, "sluice_lease_releases_total", "true"), counter(t, f.reg, "sluice_lease_releases_total", "false"); freed != 2 || not != 1 {
		t.Errorf("sluice_lease_releases_total = %v freed, %v not, want 2 and 1", freed, not)
	}
	if r, e := counter(t, f.reg, "sluice_lease_renewals_total", "renewed"), counter(t, f.reg, "sluice_lease_renewals_total", "expired"); r != 1 || e != 1 {
		t.Errorf("sluice_lease_renewals_total = %v renewed, %v expired, want 1 and 1", r, e)
	}
}

// TestLeaseErrors checks that a malformed release or renewal is a 400
// problem+json saying what is wrong, never a 5xx.
func TestLeaseErrors(t *testing.T) {
	f := newFixture(t, leaseYAML)
	for _, tt := range []struct{ path, body, want string }{
		{"/v1/release", ``, "the body is empty"},
		{"/v1/release", `{}`, "missing lease"},
		{"/v1/release", `{"lease":null}`, "lease is null"},
		{"/v1/release", `{"lease":5}`, "lease must be a string"},
		{"/v1/release", `{"lease":"x"}`, "not one this Sluice made"},
		{"/v1/release", `{"lease":"m1.AAAA"}`, "not one this Sluice made"},
		{"/v1/release", `{"lease":"m1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","extra":1}`, `unknown field \"extra\" (want lease and usage)`},
		{"/v1/renew", `{"lease":"m1.!!"}`, "not one this Sluice made"},
		{"/v1/renew", `[]`, "must be a JSON object"},
	} {
		rec := f.do("POST", tt.path, tt.body)
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("POST %s %s = %d %s %s, want 400 problem+json containing %q", tt.path, tt.body, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.want)
		}
	}
	if rec := f.do("GET", "/v1/release", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/release = %d, want 405", rec.Code)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestExplainLease checks that /v1/explain shows what a concurrency limit
// holds for a key: the units, the leases and when the last runs out.
func TestExplainLease(t *testing.T) {
	f := newFixture(t, leaseYAML)
	checkLease(t, f, `{"limit":"inflight","key":"u1"}`)
	f.clock.Advance(10 * time.Second)
	rec := f.do("GET", "/v1/explain?limit=inflight&key=u1", "")
	var e struct {
		Summary string
		Policy  struct{ Lease string }
		State   struct {
			Held, Leases int64
			Expires      string
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("explain = %d %s, %v", rec.Code, rec.Body, err)
	}
	if e.State.Held != 1 || e.State.Leases != 1 || e.Policy.Lease != "30s" || e.State.Expires == "" ||
		!strings.Contains(e.Summary, "1 of 2 held by 1 lease; the last runs out in 20s") {
		t.Errorf("explain = %s, want 1 of 2 held by 1 lease, running out in 20s", rec.Body)
	}
}

// TestForwardAuthConcurrency checks that forward-auth answers 501
// problem+json, never an admission or a 429, for a rule that holds a
// concurrency limit (one the proxy also serves).
func TestForwardAuthConcurrency(t *testing.T) {
	f := newFixture(t, `
limits:
  inflight: {algorithm: concurrency, limit: 1, lease: 1m}
proxy:
  upstream: http://127.0.0.1:9
  rules:
    - name: work
      limits: [{limit: inflight, key: "header:X-User"}]
`)
	for range 2 {
		rec := f.do("GET", "/v1/forward-auth?rule=work", "", "X-User", "u1")
		if rec.Code != http.StatusNotImplemented || rec.Header().Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(rec.Body.String(), "forward-auth cannot") {
			t.Fatalf("forward-auth = %d %s %s, want 501 problem+json saying why", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}

// TestCheckTooManyLeaseKeys checks that a check of more concurrency keys
// than one lease can name is a 422 that says why, and holds nothing.
func TestCheckTooManyLeaseKeys(t *testing.T) {
	f := newFixture(t, leaseYAML)
	var b strings.Builder
	b.WriteString(`{"checks":[`)
	for i := range 65 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"limit":"inflight","key":"k%d"}`, i)
	}
	b.WriteString("]}")
	rec := f.check(b.String())
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "at most 64 concurrency keys") {
		t.Fatalf("65 concurrency checks = %d %s, want 422 saying at most 64", rec.Code, rec.Body)
	}
	if c := checkLease(t, f, `{"limit":"inflight","key":"k0"}`); c["remaining"] != 1.0 {
		t.Errorf("k0 after the refused request = %v, want remaining 1 (nothing held)", c)
	}
}
