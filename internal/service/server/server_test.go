package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

const testYAML = `
limits:
  api-key: {algorithm: token_bucket, limit: 10, period: 1s}
  per-ip: {algorithm: sliding_window, limit: 100, period: 1m}
  tiny: {algorithm: fixed_window, limit: 2, period: 1m}
  dry: {algorithm: fixed_window, limit: 1, period: 1m, shadow: true}
  leaky: {algorithm: leaky_bucket, limit: 10, period: 1s, burst: 5}
proxy:
  trusted_proxies: [10.0.0.1]
  rules:
    - name: login
      match: {path_prefix: /login, methods: [POST]}
      limits: [{limit: tiny, key: ip}]
    - name: api
      match: {path_prefix: /api/}
      limits: [{limit: tiny, key: "header:X-API-Key"}, {limit: dry, key: ip}]
`

// start is the fixed time of the tests' store clock: 20 s into a minute,
// so that a one-minute fixed window ends 40 s later.
var start = time.Unix(1_700_000_000, 0)

// clock is a settable clock for the memory store.
type clock = teststore.Clock

func parse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), config.Formats{})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

type fixture struct {
	h     *Handler
	store *memstore.Store
	clock *clock
	reg   *prometheus.Registry
	// auth, when not empty, is the Authorization header that do sends
	// when the caller gives none.
	auth string
}

func newFixture(t testing.TB, yaml string) *fixture {
	t.Helper()
	c := teststore.NewClock(start)
	store := memstore.New(memstore.Options{Now: c.Now})
	reg := prometheus.NewRegistry()
	measuredStore, opts := measured(t, store, Options{Registry: reg, Now: c.Now, OpenTable: openTableFile(c.Now)}, metrics.StoreGauges{Keys: store.Len})
	h, err := New(parse(t, yaml), measuredStore, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{h: h, store: store, clock: c, reg: reg}
}

// measured registers the metrics on opts.Registry as cmd/sluice does, and
// returns store decorated with them and opts with them.
func measured(t testing.TB, store sluice.Store, opts Options, g metrics.StoreGauges) (sluice.Store, Options) {
	t.Helper()
	m, err := metrics.New(opts.Registry)
	if err == nil {
		err = m.ReadStore(g)
	}
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = m
	return m.Store(store), opts
}

// do serves one request and returns the response.
func (f *fixture) do(method, target, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.10:40000"
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "RemoteAddr" {
			req.RemoteAddr = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	if f.auth != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", f.auth)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func (f *fixture) check(body string) *httptest.ResponseRecorder {
	return f.do("POST", "/v1/check", body)
}

// wantCheck posts body to /v1/check and fails unless the answer's body,
// without its final newline, is want; format and args say what was
// checked, as for t.Errorf.
func (f *fixture) wantCheck(t *testing.T, body, want, format string, args ...any) {
	t.Helper()
	if got := strings.TrimSpace(f.check(body).Body.String()); got != want {
		t.Errorf(format+" = %s, want %s", append(args, got, want)...)
	}
}

func TestCheckSingle(t *testing.T) {
	f := newFixture(t, testYAML)
	rec := f.check(`{"limit":"api-key","key":"k1","cost":1}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
	}
	want := `{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	if got, want := rec.Header().Get("RateLimit-Policy"), `"api-key";q=10;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := rec.Header().Get("RateLimit"), `"api-key";r=9;t=1`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	// Cost defaults to 1, and spending the rest of the bucket empties it.
	rec = f.check(`{"limit":"api-key","key":"k1"}`)
	want = `{"allowed":true,"limit":10,"remaining":8,"retry_after_ms":0,"reset_after_ms":200}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
	rec = f.check(`{"limit":"api-key","key":"k1","cost":8}`)
	want = `{"allowed":true,"limit":10,"remaining":0,"retry_after_ms":0,"reset_after_ms":1000}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
	// A denial is still a 200: the request was answered.
	rec = f.check(`{"limit":"api-key","key":"k1","cost":3}`)
	want = `{"allowed":false,"limit":10,"remaining":0,"retry_after_ms":300,"reset_after_ms":1000}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Errorf("denied: %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
	if got, want := rec.Header().Get("RateLimit"), `"api-key";r=0;t=1`; got != want {
		t.Errorf("RateLimit on a denial = %q, want %q", got, want)
	}
	// Another key has its own bucket.
	rec = f.check(`{"limit":"api-key","key":"k2","cost":10}`)
	want = `{"allowed":true,"limit":10,"remaining":0,"retry_after_ms":0,"reset_after_ms":1000}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("other key: body = %s, want %s", got, want)
	}
}

func TestCheckFixedWindow(t *testing.T) {
	f := newFixture(t, testYAML)
	for i, want := range []string{
		`{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":40000}`,
		`{"allowed":true,"limit":2,"remaining":0,"retry_after_ms":0,"reset_after_ms":40000}`,
		`{"allowed":false,"limit":2,"remaining":0,"retry_after_ms":40000,"reset_after_ms":40000}`,
	} {
		f.wantCheck(t, `{"limit":"tiny","key":"a"}`, want, "check %d", i)
	}
	f.clock.Advance(40 * time.Second)
	want := `{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":60000}`
	f.wantCheck(t, `{"limit":"tiny","key":"a"}`, want, "next window")
}

// TestCheckLeakyDelay checks the answer of a leaky bucket whose burst (5)
// is not its limit (10): it says the burst, which remaining counts up to.
func TestCheckLeakyDelay(t *testing.T) {
	f := newFixture(t, testYAML)
	f.check(`{"limit":"leaky","key":"q"}`)
	want := `{"allowed":true,"limit":10,"burst":5,"remaining":3,"retry_after_ms":0,"reset_after_ms":200,"delay_ms":100}`
	f.wantCheck(t, `{"limit":"leaky","key":"q"}`, want, "second leaky check")
}

func TestCheckMulti(t *testing.T) {
	f := newFixture(t, testYAML)
	both := `{"checks":[{"limit":"tiny","key":"u"},{"limit":"api-key","key":"u","cost":5}]}`
	rec := f.check(both)
	want := `{"allowed":true,"retry_after_ms":0,"results":[` +
		`{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":40000},` +
		`{"allowed":true,"limit":10,"remaining":5,"retry_after_ms":0,"reset_after_ms":500}]}`
	if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != want {
		t.Fatalf("first: %d %s, want 200 %s", rec.Code, got, want)
	}
	// The RateLimit field reports the limit closest to its end.
	if got, want := rec.Header().Get("RateLimit-Policy"), `"tiny";q=2;w=60, "api-key";q=10;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := rec.Header().Get("RateLimit"), `"tiny";r=1;t=40`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	f.check(`{"limit":"tiny","key":"u"}`) // spends tiny
	rec = f.check(both)
	want = `{"allowed":false,"retry_after_ms":40000,"results":[` +
		`{"allowed":false,"limit":2,"remaining":0,"retry_after_ms":40000,"reset_after_ms":40000},` +
		`{"allowed":true,"limit":10,"remaining":5,"retry_after_ms":0,"reset_after_ms":500}]}`
	if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != want {
		t.Fatalf("denied: %d %s, want 200 %s", rec.Code, got, want)
	}
	// Nothing was charged to api-key by the denied request.
	want = `{"allowed":true,"limit":10,"remaining":4,"retry_after_ms":0,"reset_after_ms":600}`
	f.wantCheck(t, `{"limit":"api-key","key":"u"}`, want, "api-key after a denied batch")
}

func TestCheckShadow(t *testing.T) {
	f := newFixture(t, testYAML)
	want := []string{
		`{"allowed":true,"limit":1,"remaining":0,"retry_after_ms":0,"reset_after_ms":40000,"shadow":true}`,
		`{"allowed":true,"limit":1,"remaining":0,"retry_after_ms":40000,"reset_after_ms":40000,"shadow":true,"shadow_denied":true}`,
	}
	for i, w := range want {
		rec := f.check(`{"limit":"dry","key":"s"}`)
		if got := strings.TrimSpace(rec.Body.String()); got != w {
			t.Errorf("check %d = %s, want %s", i, got, w)
		}
		if got := rec.Header().Get("RateLimit"); got != "" {
			t.Errorf("RateLimit = %q for a dry-run limit, want none", got)
		}
	}
	// In a batch, a dry-run limit never denies, nor stops the others being
	// charged.
	rec := f.check(`{"checks":[{"limit":"dry","key":"s"},{"limit":"tiny","key":"s"}]}`)
	w := `{"allowed":true,"retry_after_ms":0,"results":[` +
		`{"allowed":true,"limit":1,"remaining":0,"retry_after_ms":40000,"reset_after_ms":40000,"shadow":true,"shadow_denied":true},` +
		`{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":40000}]}`
	if got := strings.TrimSpace(rec.Body.String()); got != w {
		t.Errorf("batch = %s, want %s", got, w)
	}
	if got := counter(t, f.reg, "sluice_decisions_total", "dry", "shadow_denied"); got != 2 {
		t.Errorf("shadow_denied count = %v, want 2", got)
	}
	if got := counter(t, f.reg, "sluice_decisions_total", "dry", "allowed"); got != 1 {
		t.Errorf("dry allowed count = %v, want 1", got)
	}
}

// TestCheckBodyOfUnknownLength: a body without a Content-Length (chunked)
// is read within maxBody as one with it is: one within it is decided, a
// longer one refused.
func TestCheckBodyOfUnknownLength(t *testing.T) {
	f := newFixture(t, testYAML)
	for _, tt := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"limit":"api-key","key":"k1"}`, 200, `{"allowed":true,`},
		{`{"limit":"tiny","key":"` + strings.Repeat("x", maxBody) + `"}`, 400, "larger than 65536 bytes"},
	} {
		req := httptest.NewRequest("POST", "/v1/check", io.MultiReader(strings.NewReader(tt.body)))
		if req.ContentLength != -1 {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("a body of %d bytes without a length: %d %s, want %d with %q", len(tt.body), rec.Code, rec.Body, tt.status, tt.want)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	f := newFixture(t, testYAML)
	big := `{"limit":"tiny","key":"` + strings.Repeat("x", maxBody) + `"}`
	many := `{"checks":[` + strings.Repeat(`{"limit":"tiny","key":"a"},`, maxChecks) + `{"limit":"tiny","key":"a"}]}`
	tests := []struct {
		name, body string
		status     int
		want       string // a part of the error message
	}{
		{"empty body", ``, 400, "the body is empty"},
		{"malformed", `{"limit":`, 400, "ends in the middle"},
		{"syntax", `{"limit" "x"}`, 400, "not valid JSON"},
		{"not an object", `[1,2]`, 400, "must be a JSON object"},
		{"unknown field", `{"limit":"tiny","key":"a","weight":2}`, 400, `unknown field "weight"`},
		{"unknown field in checks", `{"checks":[{"limit":"tiny","key":"a","x":1}]}`, 400, `unknown field "x"`},
		{"cost negative", `{"limit":"tiny","key":"a","cost":-3}`, 400, "cost must be 0 or more, got -3"},
		{"cost negative in checks", `{"checks":[{"limit":"tiny","key":"a","cost":-1}]}`, 400, "checks[0].cost must be 0 or more, got -1"},
		{"lease not a boolean", `{"limit":"tiny","key":"a","lease":"yes"}`, 400, "lease must be true or false"},
		{"lease null", `{"limit":"tiny","key":"a","lease":null}`, 400, "lease is null"},
		{"lease in checks", `{"checks":[{"limit":"tiny","key":"a","lease":true}]}`, 400, `unknown field "lease"`},
		{"lease twice", `{"limit":"tiny","key":"a","lease":true,"lease":false}`, 400, "lease is given twice"},
		{"cost fractional", `{"limit":"tiny","key":"a","cost":1.5}`, 400, "cost must be a whole number"},
		{"cost string", `{"limit":"tiny","key":"a","cost":"2"}`, 400, "cost must be a whole number"},
		{"cost huge", `{"limit":"tiny","key":"a","cost":99999999999999999999999}`, 400, "cost 99999999999999999999999 is too large (at most 9223372036854775807)"},
		{"cost huge in checks", `{"checks":[{"limit":"tiny","key":"a","cost":99999999999999999999999}]}`, 400, "checks.cost 99999999999999999999999 is too large (at most 9223372036854775807)"},
		{"cost hugely negative", `{"limit":"tiny","key":"a","cost":-99999999999999999999999}`, 400, "cost -99999999999999999999999 is negative"},
		{"cost huge exponent", `{"limit":"tiny","key":"a","cost":1e30}`, 400, "cost must be a whole number, not number 1e30"},
		{"duplicate key", `{"limit":"a","key":"a","key":"b"}`, 400, "key is given twice; each field may appear only once"},
		{"duplicate key, other case", `{"limit":"tiny","Key":"a","key":"b"}`, 400, `unknown field "Key": field names are matched exactly, in lower case (key)`},
		{"names in capitals", `{"LIMIT":"tiny","KEY":"a"}`, 400, `unknown field "LIMIT"`},
		{"name in another case", `{"limit":"tiny","key":"a","Cost":1}`, 400, `unknown field "Cost"`},
		{"name with the Kelvin sign", `{"limit":"tiny","\u212aey":"a"}`, 400, `unknown field`},
		{"name with a long s", `{"limit":"tiny","key":"a","co\u017ft":1}`, 400, `unknown field`},
		{"name in another case in checks", `{"checks":[{"limit":"tiny","KEY":"a"}]}`, 400, `unknown field "checks[0].KEY"`},
		{"null cost", `{"limit":"tiny","key":"a","cost":null}`, 400, "cost is null: give a value, or leave the field out for its default"},
		{"null cost in checks", `{"checks":[{"limit":"tiny","key":"a","cost":null}]}`, 400, "checks[0].cost is null"},
		{"null checks", `{"checks":null}`, 400, "checks is null"},
		{"duplicate limit", `{"limit":"tiny","key":"a","limit":"tiny"}`, 400, "limit is given twice"},
		{"duplicate cost", `{"limit":"tiny","key":"a","cost":1,"cost":1}`, 400, "cost is given twice"},
		{"duplicate in checks", `{"checks":[{"limit":"tiny","key":"a"},{"limit":"tiny","key":"a","cost":1,"cost":2}]}`, 400, "checks[1].cost is given twice"},
		{"duplicate checks", `{"checks":[{"limit":"tiny","key":"a"}],"checks":[{"limit":"tiny","key":"b"}]}`, 400, "checks is given twice"},
		{"duplicate plan", `{"plan":"free","plan":"pro","key":"a"}`, 400, "plan is given twice"},
		{"missing key", `{"limit":"tiny"}`, 400, "key is missing"},
		{"empty key", `{"limit":"tiny","key":""}`, 400, "key is empty"},
		{"null key", `{"limit":"tiny","key":null}`, 400, "key is null"},
		{"missing limit", `{"key":"a"}`, 400, "limit is missing"},
		{"nothing", `{}`, 400, `must hold "limit" and "key"`},
		{"key in checks missing", `{"checks":[{"limit":"tiny","key":"a"},{"limit":"tiny"}]}`, 400, "checks[1].key is missing"},
		{"both forms", `{"limit":"tiny","key":"a","checks":[{"limit":"tiny","key":"a"}]}`, 400, `cannot be combined`},
		{"no checks", `{"checks":[]}`, 400, "at least one check"},
		{"too many checks", many, 400, "at most 128"},
		{"two objects", `{"limit":"tiny","key":"a"} {}`, 400, "more than one JSON value"},
		{"too large", big, 400, "larger than 65536 bytes"},
		{"unknown limit", `{"limit":"nope","key":"a"}`, 404, `no limit named "nope"`},
		{"unknown limit in checks", `{"checks":[{"limit":"tiny","key":"a"},{"limit":"nope","key":"a"}]}`, 404, `checks[1].limit: no limit named "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := f.check(tt.body)
			if rec.Code != tt.status {
				t.Errorf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q is not JSON: %v", rec.Body, err)
			}
			if !strings.Contains(e.Error, tt.want) {
				t.Errorf("error = %q, want it to contain %q", e.Error, tt.want)
			}
		})
	}
	// None of the refused requests was charged.
	want := `{"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":40000}`
	f.wantCheck(t, `{"limit":"tiny","key":"a"}`, want, "after refused requests")
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t, testYAML)
	rec := f.do("GET", "/v1/check", "")
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET /v1/check = %d (Allow %q), want 405 (POST)", rec.Code, rec.Header().Get("Allow"))
	}
	if rec := f.do("POST", "/metrics", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics = %d, want 405", rec.Code)
	}
	if rec := f.do("GET", "/v2/nothing", ""); rec.Code != http.StatusNotFound {
		t.Errorf("GET /v2/nothing = %d, want 404", rec.Code)
	}
}

func TestForwardAuth(t *testing.T) {
	f := newFixture(t, testYAML)
	const proxy = "10.0.0.1:5555"
	login := func(client string) *httptest.ResponseRecorder {
		return f.do("GET", "/v1/forward-auth", "", "RemoteAddr", proxy,
			"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login?next=/home", "X-Forwarded-For", client)
	}
	for i := range 2 {
		rec := login("203.0.113.5")
		if rec.Code != http.StatusOK {
			t.Fatalf("login %d = %d %s, want 200", i, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get("RateLimit"), `"tiny";r=`+string(rune('1'-i))+`;t=40`; got != want {
			t.Errorf("login %d RateLimit = %q, want %q", i, got, want)
		}
	}
	rec := login("203.0.113.5")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("third login = %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "40" {
		t.Errorf("Retry-After = %q, want 40", got)
	}
	if got := rec.Header().Get("RateLimit"); got != `"tiny";r=0;t=40` {
		t.Errorf("RateLimit = %q", got)
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"tiny";q=2;w=60` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q", got)
	}
	// Another client behind the same proxy has its own budget.
	if rec := login("203.0.113.6"); rec.Code != http.StatusOK {
		t.Errorf("other client = %d, want 200", rec.Code)
	}
	// A GET to /login matches no rule: let through, no quota fields.
	rec = f.do("GET", "/v1/forward-auth", "", "RemoteAddr", proxy,
		"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/login", "X-Forwarded-For", "203.0.113.5")
	if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" {
		t.Errorf("unmatched = %d (RateLimit %q), want 200 without fields", rec.Code, rec.Header().Get("RateLimit"))
	}
	// The api rule keys by header; requests without it have no key there.
	for i, want := range []int{200, 200, 429} {
		rec := f.do("GET", "/v1/forward-auth", "", "RemoteAddr", proxy,
			"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/items", "X-API-Key", "k9")
		if rec.Code != want {
			t.Errorf("api %d = %d, want %d", i, rec.Code, want)
		}
	}
}

func TestForwardAuthUntrusted(t *testing.T) {
	f := newFixture(t, testYAML)
	// An untrusted peer's X-Forwarded-* are ignored: the request is taken
	// as it is, GET /v1/forward-auth, which matches no rule...
	rec := f.do("GET", "/v1/forward-auth", "", "RemoteAddr", "198.51.100.1:1",
		"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login")
	if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" {
		t.Errorf("untrusted = %d (RateLimit %q), want 200 without fields", rec.Code, rec.Header().Get("RateLimit"))
	}
	// ...and a named rule counts the peer, whatever X-Forwarded-For says.
	for i, want := range []int{200, 200, 429, 429} {
		rec := f.do("GET", "/v1/forward-auth?rule=login", "", "RemoteAddr", "198.51.100.1:1",
			"X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		if rec.Code != want {
			t.Errorf("request %d = %d, want %d", i, rec.Code, want)
		}
	}
}

func TestForwardAuthErrors(t *testing.T) {
	f := newFixture(t, testYAML)
	rec := f.do("GET", "/v1/forward-auth?rule=nope", "")
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `no rule named \"nope\"`) {
		t.Errorf("unknown rule = %d %s, want 404", rec.Code, rec.Body)
	}
	rec = f.do("GET", "/v1/forward-auth", "", "RemoteAddr", "10.0.0.1:1", "X-Forwarded-Uri", "not a uri")
	if rec.Code != http.StatusBadRequest {
		t.Errorf("bad X-Forwarded-Uri = %d %s, want 400", rec.Code, rec.Body)
	}
	// Any method: nginx's auth_request sends the original one.
	if rec := f.do("POST", "/v1/forward-auth?rule=login", ""); rec.Code != http.StatusOK {
		t.Errorf("POST forward-auth = %d, want 200", rec.Code)
	}
	// nginx's auth_request passes on only 401 and 403.
	for i, want := range []int{200, 200, 403} {
		rec := f.do("GET", "/v1/forward-auth?rule=login&deny_status=403", "", "RemoteAddr", "192.0.2.99:1")
		if rec.Code != want {
			t.Errorf("deny_status=403, request %d = %d, want %d", i, rec.Code, want)
		}
		if want == 403 && rec.Header().Get("Retry-After") != "40" {
			t.Errorf("deny_status=403: Retry-After = %q, want 40", rec.Header().Get("Retry-After"))
		}
		// The 429's problem body travels in a field, which nginx returns
		// as the body of its own 429 (docs/configuration.md).
		const problem = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Too many requests; retry in 40 seconds.","retry-after":40,"violated-policies":["tiny"]}`
		if got := rec.Header().Get(ProblemHeader); (want == 403) != (got == problem) {
			t.Errorf("deny_status=403, request %d: %s = %s, want it only on the denial, as %s", i, ProblemHeader, got, problem)
		}
	}
	if rec := f.do("GET", "/v1/forward-auth?rule=login&deny_status=500", ""); rec.Code != http.StatusBadRequest {
		t.Errorf("deny_status=500 = %d, want 400", rec.Code)
	}
	// Without a proxy section there are no rules: all pass, names are unknown.
	g := newFixture(t, "limits: {a: {algorithm: gcra, limit: 1, period: 1s}}")
	if rec := g.do("GET", "/v1/forward-auth", ""); rec.Code != http.StatusOK {
		t.Errorf("no rules = %d, want 200", rec.Code)
	}
	if rec := g.do("GET", "/v1/forward-auth?rule=a", ""); rec.Code != http.StatusNotFound {
		t.Errorf("no rules, named = %d, want 404", rec.Code)
	}
}

func TestHealth(t *testing.T) {
	f := newFixture(t, testYAML)
	if rec := f.do("GET", "/healthz", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
		t.Errorf("healthz = %d %s", rec.Code, rec.Body)
	}
	rec := f.do("GET", "/readyz", "")
	if want := `{"config":"test.yaml","limits":5,"status":"ready"}`; rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("readyz = %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
	f.h.Drain()
	if rec := f.do("GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("readyz while draining = %d, want 503", rec.Code)
	}
	if rec := f.check(`{"limit":"tiny","key":"a"}`); rec.Code != 200 {
		t.Errorf("check while draining = %d, want 200", rec.Code)
	}
}

func TestReloadKeepsState(t *testing.T) {
	f := newFixture(t, testYAML)
	for range 2 {
		f.check(`{"limit":"tiny","key":"a"}`)
	}
	f.check(`{"limit":"api-key","key":"a","cost":10}`)
	// tiny is unchanged; api-key doubles; per-ip goes; fresh comes.
	next := strings.Replace(testYAML, "api-key: {algorithm: token_bucket, limit: 10, period: 1s}",
		"api-key: {algorithm: token_bucket, limit: 20, period: 1s}", 1)
	next = strings.Replace(next, "per-ip: {algorithm: sliding_window, limit: 100, period: 1m}",
		"fresh: {algorithm: gcra, limit: 3, period: 1s}", 1)
	cfg := parse(t, next)
	if err := f.h.Reload(cfg); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if f.h.Config() != cfg {
		t.Errorf("Config() is not the reloaded configuration")
	}
	tests := []struct{ body, want string }{
		{`{"limit":"tiny","key":"a"}`, `{"allowed":false,"limit":2,"remaining":0,"retry_after_ms":40000,"reset_after_ms":40000}`},
		{`{"limit":"api-key","key":"a"}`, `{"allowed":true,"limit":20,"remaining":19,"retry_after_ms":0,"reset_after_ms":50}`},
		{`{"limit":"fresh","key":"a"}`, `{"allowed":true,"limit":3,"remaining":2,"retry_after_ms":0,"reset_after_ms":334}`},
	}
	for _, tt := range tests {
		f.wantCheck(t, tt.body, tt.want, "after reload %s", tt.body)
	}
	if rec := f.check(`{"limit":"per-ip","key":"a"}`); rec.Code != http.StatusNotFound {
		t.Errorf("removed limit = %d, want 404", rec.Code)
	}
	body := scrape(t, f.h)
	if strings.Contains(body, `limit="per-ip"`) {
		t.Errorf("metrics still show the removed limit per-ip")
	}
	testkit.WantAll(t, "metrics", body, `sluice_decisions_total{limit="fresh",outcome="allowed"} 1`, "sluice_config_reloads_total 1", "sluice_config_limits 5")
	// A rule's limits keep their state too: spend login's budget, reload
	// an equal configuration, and it stays spent.
	for range 2 {
		f.do("GET", "/v1/forward-auth?rule=login", "", "RemoteAddr", "198.51.100.7:1")
	}
	if err := f.h.Reload(parse(t, next)); err != nil {
		t.Fatal(err)
	}
	if rec := f.do("GET", "/v1/forward-auth?rule=login", "", "RemoteAddr", "198.51.100.7:1"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("forward-auth after reload = %d, want 429 (state kept)", rec.Code)
	}
	if err := f.h.Reload(nil); err == nil {
		t.Errorf("Reload(nil) = nil, want an error")
	}
}

// TestReloadUnderLoad reloads while requests are served: every request is
// answered under one configuration or the other, never with an error.
func TestReloadUnderLoad(t *testing.T) {
	f := newFixture(t, testYAML)
	a := parse(t, testYAML)
	b := parse(t, strings.Replace(testYAML, "limit: 100, period: 1m", "limit: 50, period: 1m", 1))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var served atomic.Int64
	for range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 100_000; i++ {
				rec := f.check(`{"checks":[{"limit":"per-ip","key":"x"},{"limit":"api-key","key":"y"}]}`)
				if rec.Code != http.StatusOK {
					t.Errorf("status %d during reloads: %s", rec.Code, rec.Body)
					return
				}
				served.Add(1)
			}
		})
	}
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	for i := range 200 {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if err := f.h.Reload(cfg); err != nil {
			cancel()
			<-stopped
			t.Fatal(err)
		}
		// Serve at least one request under each configuration.
		for n := served.Load(); served.Load() == n; runtime.Gosched() {
			select {
			case <-stopped:
				t.Fatalf("the requests stopped after %d reloads", i+1)
			default:
			}
		}
	}
	cancel()
	<-stopped
}

// scrape returns the /metrics exposition.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	return rec.Body.String()
}

// counter returns the value of a counter with the given label values (in
// any order), 0 when there is no such series.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, _ := testkit.MetricValue(t, reg, name, labels...)
	return v
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, testYAML)
	for range 3 {
		f.check(`{"limit":"tiny","key":"client-key-1"}`)
	}
	f.do("GET", "/v1/forward-auth?rule=login", "")
	body := scrape(t, f.h)
	testkit.WantAll(t, "metrics", body,
		`sluice_decisions_total{limit="tiny",outcome="allowed"} 3`,
		`sluice_decisions_total{limit="tiny",outcome="denied"} 1`,
		`sluice_decisions_total{limit="per-ip",outcome="allowed"} 0`,
		`sluice_decisions_total{limit="dry",outcome="shadow_denied"} 0`,
		`sluice_decisions_total{limit="api-key",outcome="degraded"} 0`,
		`sluice_store_duration_seconds_bucket{operation="allow",le="0.001"}`,
		`sluice_store_duration_seconds_count{operation="allow"} 4`,
		`sluice_store_errors_total{operation="allow"} 0`,
		`sluice_store_keys 2`,
		`sluice_http_requests_total{code="200",handler="check"} 3`,
		`sluice_http_requests_total{code="200",handler="forward_auth"} 1`,
		`sluice_http_request_duration_seconds_count{handler="check"} 3`,
		`sluice_config_limits 5`,
		`sluice_config_reloads_total 0`,
		`sluice_config_last_reload_timestamp_seconds 1.7e+09`,
		"# TYPE sluice_decisions_total counter",
		"# TYPE sluice_store_duration_seconds histogram",
	)
	if strings.Contains(body, "client-key-1") || strings.Contains(body, "192.0.2.10") {
		t.Errorf("a key appears in the metrics")
	}
	// With no registry given, the Go and process collectors are there too.
	h, err := New(parse(t, testYAML), memstore.New(memstore.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, h); !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "sluice_decisions_total") {
		t.Errorf("default registry lacks go_goroutines or sluice_decisions_total")
	}
	// One registry serves one handler.
	if _, err := New(parse(t, testYAML), f.store, Options{Registry: f.reg}); err == nil {
		t.Errorf("a second New on one registry = nil error, want one")
	}
}

func TestNewErrors(t *testing.T) {
	cfg := parse(t, testYAML)
	if _, err := New(nil, memstore.New(memstore.Options{}), Options{}); err == nil {
		t.Errorf("New(nil config) = nil error")
	}
	if _, err := New(cfg, nil, Options{}); err == nil {
		t.Errorf("New(nil store) = nil error")
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg, err := config.Default(config.Formats{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, memstore.New(memstore.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"limit":"demo","key":"alice"}`)))
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), `{"allowed":true,"limit":10,"remaining":9,`) {
		t.Errorf("demo check = %d %s", rec.Code, rec.Body)
	}
	for i := range 11 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/forward-auth?rule=demo", nil)
		req.RemoteAddr = "127.0.0.1:1"
		req.Header.Set("X-Forwarded-For", "203.0.113.1")
		h.ServeHTTP(rec, req)
		want := http.StatusOK
		if i == 10 {
			want = http.StatusTooManyRequests
		}
		if rec.Code != want {
			t.Fatalf("demo forward-auth %d = %d, want %d", i, rec.Code, want)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"single", `{"limit":"per-ip","key":"203.0.113.7"}`},
		{"checks", `{"checks":[{"limit":"per-ip","key":"203.0.113.7"},{"limit":"api-key","key":"k1"}]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Limits no benchmark can exhaust, so that every decision is
			// an admission.
			yaml := strings.Replace(testYAML, "limit: 100, period: 1m", "limit: 1000000000, period: 1s", 1)
			yaml = strings.Replace(yaml, "limit: 10, period: 1s}", "limit: 1000000000, period: 1s}", 1)
			f := newFixture(b, yaml)
			benchCheck(b, f.h, []byte(bc.body))
		})
	}
}

// benchCheck posts body to /v1/check through h on every core, each
// answer 200.
func benchCheck(b *testing.B, h http.Handler, body []byte) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rd := bytes.NewReader(body)
		req := httptest.NewRequest("POST", "/v1/check", rd)
		rec := testkit.NewWriter()
		for pb.Next() {
			rd.Reset(body)
			req.Body = io.NopCloser(rd)
			rec.Reset()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
	})
}

// FuzzCheck sends arbitrary bodies to /v1/check: every answer is 200, 400
// or 404 with a JSON body, and nothing panics.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"limit":"api-key","key":"k1","cost":1}`,
		`{"checks":[{"limit":"per-ip","key":"1.2.3.4"},{"limit":"api-key","key":"k1","cost":5}]}`,
		`{"checks":[{"limit":"dry","key":"s"},{"limit":"tiny","key":"s","cost":2}]}`,
		`{"limit":"leaky","key":"q","cost":5}`,
		`{"limit":"nope","key":"a"}`,
		`{"limit":"tiny","key":"a","cost":-1}`,
		`{"checks":[]}`,
		`[]`, `null`, ``, `{"limit":"tiny","key":"a"} x`,
	} {
		f.Add([]byte(s))
	}
	fx := newFixture(f, testYAML)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := fx.check(string(body))
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("answer to %q is not a JSON object: %q", body, rec.Body)
		}
		if rec.Code == http.StatusOK {
			if _, ok := v["allowed"].(bool); !ok {
				t.Fatalf("200 without allowed: %s", rec.Body)
			}
		} else if _, ok := v["error"].(string); !ok {
			t.Fatalf("%d without error: %s", rec.Code, rec.Body)
		}
	})
}
