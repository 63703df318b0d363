package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/service/overrides"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

const ovToken = "override-test-token-0123456789abcdef"

const ovYAML = `
limits:
  api-key: {algorithm: token_bucket, limit: 10, period: 1s}
  tiny: {algorithm: fixed_window, limit: 2, period: 1m}
  inflight: {algorithm: concurrency, limit: 2, lease: 1m}
  bulk: {algorithm: token_bucket, limit: 10, period: 1s}
proxy:
  rules:
    - name: api
      limits: [{limit: api-key, key: "header:X-API-Key"}]
    - name: bulk
      match: {path_prefix: /bulk}
      limits: [{limit: bulk, key: "header:X-API-Key", cost: 4}]
`

// ovFixture serves ovYAML (with extra YAML appended) and logs to a buffer.
func ovFixture(t *testing.T, extra string, store overrides.Store) (*fixture, *bytes.Buffer) {
	t.Helper()
	c := teststore.NewClock(start)
	ms := memstore.New(memstore.Options{Now: c.Now})
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	auth := ""
	if !strings.Contains(extra, "admin:") {
		// Writing overrides needs an admin token.
		extra += "admin: {token: " + ovToken + "}\n"
		auth = "Bearer " + ovToken
	}
	h, err := New(parse(t, ovYAML+extra), ms, Options{
		Registry: reg, Now: c.Now, Overrides: store,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{h: h, store: ms, clock: c, reg: reg, auth: auth}, &logs
}

func TestOverridesAuth(t *testing.T) {
	f, _ := ovFixture(t, "listen: {admin: 127.0.0.1:0}\nadmin: {token: "+ovToken+"}\n", nil)
	body := `{"limit":100,"period":"1s"}`
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+ovToken))
	tests := []struct {
		name    string
		handler http.Handler
		auth    string
		code    int
	}{
		{"no token", f.h.Admin(), "", 401},
		{"wrong token", f.h.Admin(), "Bearer wrong-token-0123456789abcdef", 401},
		{"token of another scheme", f.h.Admin(), "Token " + ovToken, 401},
		{"right token", f.h.Admin(), "Bearer " + ovToken, 201},
		{"right token again", f.h.Admin(), "Bearer " + ovToken, 200},
		{"basic with the token as password", f.h.Admin(), basic, 200},
		{"the public listener has no admin API", f.h.Public(), "Bearer " + ovToken, 404},
		{"the whole handler needs the token too", f.h, "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			for _, method := range []string{"PUT", "GET", "DELETE"} {
				if tt.code != 401 && tt.code != 404 && method != "PUT" {
					continue // a success changes the state; the rows check PUT
				}
				rec := serve(tt.handler, method, "/v1/overrides/api-key/k1", body, hdr...)
				if rec.Code != tt.code {
					t.Errorf("%s = %d %s, want %d", method, rec.Code, rec.Body, tt.code)
				}
				if tt.code == 401 && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s 401 without a Bearer challenge: %q", method, rec.Header().Get("WWW-Authenticate"))
				}
			}
		})
	}
}

// TestOverrideWritesNeedAToken: without an admin token configured, the
// overrides can be read but not written, on any listener; the refusal
// says how to turn writing on.
func TestOverrideWritesNeedAToken(t *testing.T) {
	for _, extra := range []string{"listen: {admin: 127.0.0.1:0}\n", "listen: {admin: 127.0.0.1:0}\nadmin: {}\n"} {
		f, _ := ovFixture(t, extra, nil)
		for _, h := range []http.Handler{f.h, f.h.Admin()} {
			for _, method := range []string{"PUT", "DELETE"} {
				rec := serve(h, method, "/v1/overrides/api-key/k1", `{"limit":100,"period":"1s"}`)
				if rec.Code != 404 || !strings.Contains(rec.Body.String(), "admin.token_file") {
					t.Errorf("%s without a configured token = %d %s, want 404 naming admin.token_file", method, rec.Code, rec.Body)
				}
			}
			if rec := serve(h, "GET", "/v1/overrides", ""); rec.Code != 200 {
				t.Errorf("GET without a configured token = %d %s, want 200", rec.Code, rec.Body)
			}
		}
		if got := f.check(`{"limit":"api-key","key":"k1"}`).Body.String(); !strings.Contains(got, `"limit":10,`) {
			t.Errorf("after refused writes, check = %s, want the configured limit 10", got)
		}
	}
}

func TestOverridesValidation(t *testing.T) {
	f, _ := ovFixture(t, "", nil)
	tests := []struct {
		name, target, body string
		code               int
		want               string
	}{
		{"unknown limit", "/v1/overrides/nope/k", `{"limit":1,"period":"1s"}`, 404, `no limit named "nope"`},
		{"name in capitals", "/v1/overrides/api-key/k", `{"LIMIT":5,"period":"1s"}`, 400, `unknown field "LIMIT": field names are matched exactly`},
		{"null burst", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","burst":null}`, 400, `burst is null`},
		{"field twice", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","limit":500}`, 400, `limit is given twice`},
		{"empty body", "/v1/overrides/api-key/k", ``, 400, "the body is empty; send a JSON object"},
		{"not JSON", "/v1/overrides/api-key/k", `limit=5`, 400, "the body is not valid JSON"},
		{"two values", "/v1/overrides/api-key/k", `{"limit":1,"period":"1s"} {}`, 400, "the body holds more than one JSON value"},
		{"unknown field", "/v1/overrides/api-key/k", `{"limit":1,"period":"1s","rate":5}`, 400, `unknown field "rate" (want limit, period, time_zone, week_starts, burst, algorithm, ttl or expires_at)`},
		{"limit missing", "/v1/overrides/api-key/k", `{"period":"1s"}`, 400, "limit is missing: how many cost units the key may spend per period"},
		{"limit zero", "/v1/overrides/api-key/k", `{"limit":0,"period":"1s"}`, 400, "limit must be from 1 to 1000000000, got 0"},
		{"limit a string", "/v1/overrides/api-key/k", `{"limit":"5","period":"1s"}`, 400, "limit must be a whole number, not string"},
		{"limit fractional", "/v1/overrides/api-key/k", `{"limit":1.5,"period":"1s"}`, 400, "limit must be a whole number, not number 1.5"},
		{"period missing", "/v1/overrides/api-key/k", `{"limit":5}`, 400, "period is missing: a duration like 1s, 1m or 1h"},
		{"period unparsable", "/v1/overrides/api-key/k", `{"limit":5,"period":"1 m"}`, 400, `period: invalid duration "1 m" (want a number and a unit, like 500ms, 10s, 1m, 1h or 1d)`},
		{"period negative", "/v1/overrides/api-key/k", `{"limit":5,"period":"-1s"}`, 400, "period must be positive, got -1s"},
		{"period nanoseconds", "/v1/overrides/api-key/k", `{"limit":5,"period":"1500ns"}`, 400, "period must be a whole number of microseconds, got 1500ns"},
		{"period too long", "/v1/overrides/api-key/k", `{"limit":5,"period":"4000d"}`, 400, "period must be at most 3652d12h (10 years), got 4000d"},
		{"unknown algorithm", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","algorithm":"bucket"}`, 400, `algorithm: unknown algorithm "bucket"`},
		{"burst on a window", "/v1/overrides/tiny/k", `{"limit":5,"period":"1s","burst":10}`, 400, "burst: fixed_window has no burst"},
		{"burst negative", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","burst":-1}`, 400, "burst must be from 0 (the limit) to 1000000000, got -1"},
		{"burst on a window by algorithm", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","algorithm":"sliding_log","burst":7}`, 400, "burst: sliding_log has no burst"},
		{"refill too slow", "/v1/overrides/api-key/k", `{"limit":1,"period":"3652d","burst":1000000000}`, 400, "burst×period/limit exceeds 36,000 years"},
		{"ttl and expires_at", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","ttl":"1h","expires_at":"2030-01-01T00:00:00Z"}`, 400, "ttl and expires_at cannot be combined; give one"},
		{"ttl unparsable", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","ttl":"soon"}`, 400, `ttl: invalid duration "soon"`},
		{"ttl zero", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","ttl":"0s"}`, 400, "ttl must be at least 1ms, got 0s"},
		{"expires_at unparsable", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","expires_at":"tomorrow"}`, 400, `expires_at must be an RFC 3339 time, like 2026-12-01T00:00:00Z, got "tomorrow"`},
		{"expires_at past", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","expires_at":"2020-01-01T00:00:00Z"}`, 400, "expires_at 2020-01-01T00:00:00Z is not in the future"},
		{"capacity below a rule's cost", "/v1/overrides/bulk/k", `{"limit":3,"period":"1s"}`, 400, `the capacity 3 is below the cost 4 that proxy.rules[1].limits[0] charges to limit "bulk": no such request could pass`},
		{"body too large", "/v1/overrides/api-key/k", `{"limit":5,"period":"1s","algorithm":"` + strings.Repeat("x", 5000) + `"}`, 400, "the body is larger than 4096 bytes"},
		{"a concurrency limit", "/v1/overrides/inflight/k", `{"limit":5,"period":"1m"}`, 400, `limit "inflight" is a concurrency limit, which overrides do not change`},
		{"to concurrency", "/v1/overrides/api-key/k", `{"limit":5,"period":"1m","algorithm":"concurrency"}`, 400, "an override cannot make a rate limit a concurrency limit"},
		{"method", "/v1/overrides/api-key/k", ``, 405, "use GET, PUT or DELETE"},
		{"no key", "/v1/overrides/api-key/", ``, 404, "use /v1/overrides/{limit}/{key}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := "PUT"
			if tt.code == 405 {
				method = "POST"
			}
			rec := f.do(method, tt.target, tt.body)
			var got struct{ Error string }
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != tt.code || !strings.Contains(got.Error, tt.want) {
				t.Errorf("%s %s %s = %d %s, want %d with %q", method, tt.target, tt.body, rec.Code, rec.Body, tt.code, tt.want)
			}
		})
	}
	if rec := f.do("GET", "/v1/overrides", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"overrides":[],"shared":false}` {
		t.Errorf("after refused PUTs, GET /v1/overrides = %d %s, want none", rec.Code, rec.Body)
	}
}

// TestOverrideBurstZero: burst 0 means the limit, as in the configuration
// and the Go API.
func TestOverrideBurstZero(t *testing.T) {
	f, _ := ovFixture(t, "", nil)
	if rec := f.do("PUT", "/v1/overrides/api-key/k0", `{"limit":7,"period":"1s","burst":0}`); rec.Code != 201 || !strings.Contains(rec.Body.String(), `"limit":7,"period":"1s","period_ms":1000,"burst":7`) {
		t.Errorf("PUT with burst 0 = %d %s, want 201 and burst 7", rec.Code, rec.Body)
	}
}

// TestOverridesApply: an override changes one key's limit in the decision
// API and forward-auth, the answers say so, and removing it restores the
// limit.
func TestOverridesApply(t *testing.T) {
	f, logs := ovFixture(t, "", nil)
	rec := f.do("PUT", "/v1/overrides/api-key/k1", `{"limit":100,"period":"1s","burst":200}`)
	if rec.Code != 201 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	var put struct {
		Override, Before *overrideJSON
	}
	json.Unmarshal(rec.Body.Bytes(), &put)
	if o := put.Override; o == nil || o.LimitName != "api-key" || o.Key != "k1" || o.Algorithm != "token_bucket" || o.Limit != 100 || o.Period != "1s" || o.Burst != 200 || o.SetBy != "token:9ee0948e@192.0.2.10:40000" || put.Before != nil {
		t.Errorf("PUT answer = %s", rec.Body)
	}
	// The decision API: k1 has 200, k2 the limit's 10.
	want := `{"allowed":true,"limit":100,"burst":200,"remaining":199,"retry_after_ms":0,"reset_after_ms":10,"override":true}`
	f.wantCheck(t, `{"limit":"api-key","key":"k1"}`, want, "check k1")
	rec = f.check(`{"limit":"api-key","key":"k1","cost":150}`)
	if !strings.Contains(rec.Body.String(), `"allowed":true`) || rec.Header().Get("RateLimit-Policy") != `"api-key";q=100;w=1` {
		t.Errorf("a cost above the limit's capacity but within the override's = %s %q", rec.Body, rec.Header().Get("RateLimit-Policy"))
	}
	want = `{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100}`
	f.wantCheck(t, `{"limit":"api-key","key":"k2"}`, want, "check k2")
	// Forward-auth: k3 gets 3 a minute (with another algorithm), others 10.
	if rec := f.do("PUT", "/v1/overrides/api-key/k3", `{"limit":3,"period":"1m","algorithm":"fixed_window"}`); rec.Code != 201 {
		t.Fatalf("PUT k3 = %d %s", rec.Code, rec.Body)
	}
	if got, policy := f.admitted(20, "api", "X-API-Key", "k3"); got != 3 || policy != `"api-key";q=3;w=60` {
		t.Errorf("forward-auth k3 admitted %d with %q, want 3 with q=3;w=60", got, policy)
	}
	if got, policy := f.admitted(20, "api", "X-API-Key", "k4"); got != 10 || policy != `"api-key";q=10;w=1` {
		t.Errorf("forward-auth k4 admitted %d with %q, want 10", got, policy)
	}
	// Listing and reading.
	rec = f.do("GET", "/v1/overrides/api-key", "")
	if rec.Code != 200 || strings.Count(rec.Body.String(), `"limit_name":"api-key"`) != 2 || !strings.Contains(rec.Body.String(), `"shared":false`) {
		t.Errorf("GET /v1/overrides/api-key = %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", "/v1/overrides/tiny", ""); strings.TrimSpace(rec.Body.String()) != `{"overrides":[],"shared":false}` {
		t.Errorf("GET /v1/overrides/tiny = %s", rec.Body)
	}
	if rec := f.do("GET", "/v1/overrides/api-key/k9", ""); rec.Code != 404 {
		t.Errorf("GET of a key without an override = %d", rec.Code)
	}
	// Removing k3's restores the limit for it.
	rec = f.do("DELETE", "/v1/overrides/api-key/k3", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"deleted":{"limit_name":"api-key","key":"k3"`) {
		t.Errorf("DELETE = %d %s", rec.Code, rec.Body)
	}
	if got, _ := f.admitted(20, "api", "X-API-Key", "k3"); got != 10 {
		t.Errorf("after DELETE, k3 admitted %d, want the limit's 10", got)
	}
	if rec := f.do("DELETE", "/v1/overrides/api-key/k3", ""); rec.Code != 404 {
		t.Errorf("second DELETE = %d, want 404", rec.Code)
	}
	// Every change is logged with who, what, before and after.
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m["msg"].(string), "override ") {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("%d override log lines, want 3:\n%s", len(lines), logs)
	}
	first, last := lines[0], lines[2]
	if first["msg"] != "override set" || first["who"] != "token:9ee0948e@192.0.2.10:40000" || first["limit"] != "api-key" || first["key"] != "k1" ||
		first["before"] != "the limit's own: api-key: token_bucket 10/1s burst 10" || first["after"] != "api-key: token_bucket 100/1s burst 200" {
		t.Errorf("first log line = %v", first)
	}
	if last["msg"] != "override removed" || last["before"] != "api-key: fixed_window 3/1m0s" || last["after"] != "the limit's own: api-key: token_bucket 10/1s burst 10" {
		t.Errorf("last log line = %v", last)
	}
}

// TestOverrideExpiry: an override with a ttl applies until then, on the
// handler's clock, and then the limit's own policy is back.
func TestOverrideExpiry(t *testing.T) {
	f, _ := ovFixture(t, "", nil)
	rec := f.do("PUT", "/v1/overrides/tiny/k1", `{"limit":5,"period":"1m","ttl":"30s"}`)
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"expires_at":"2023-11-14T22:13:50Z"`) {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	at := start.Add(time.Minute).UTC().Format(time.RFC3339)
	if rec := f.do("PUT", "/v1/overrides/tiny/k2", `{"limit":5,"period":"1m","expires_at":"`+at+`"}`); rec.Code != 201 {
		t.Fatalf("PUT k2 = %d %s", rec.Code, rec.Body)
	}
	limitOf := func(key string) string {
		body := f.check(`{"limit":"tiny","key":"` + key + `"}`).Body.String()
		i := strings.Index(body, `"limit":`)
		return body[i+8 : i+9]
	}
	if a, b := limitOf("k1"), limitOf("k2"); a != "5" || b != "5" {
		t.Errorf("before expiry the limits are %s and %s, want 5 and 5", a, b)
	}
	f.clock.Advance(30*time.Second - time.Millisecond)
	if got := limitOf("k1"); got != "5" {
		t.Errorf("a millisecond before expiry the limit is %s, want 5", got)
	}
	f.clock.Advance(time.Millisecond)
	if a, b := limitOf("k1"), limitOf("k2"); a != "2" || b != "5" {
		t.Errorf("at k1's expiry the limits are %s and %s, want 2 and 5", a, b)
	}
	if rec := f.do("GET", "/v1/overrides/tiny/k1", ""); rec.Code != 404 {
		t.Errorf("GET of an expired override = %d %s", rec.Code, rec.Body)
	}
	f.clock.Advance(30 * time.Second)
	if got := limitOf("k2"); got != "2" {
		t.Errorf("at k2's expires_at the limit is %s, want 2", got)
	}
}

// TestOverridesShared: three instances share one Redis for their
// overrides; a change made on one applies on all three within a second,
// and a ttl ends on all three at once, on their clock (one clock here,
// which the test moves).
func TestOverridesShared(t *testing.T) {
	srv := testkit.StartRedis(t)
	c := teststore.NewClock(start)
	var fs [3]*fixture
	for i := range fs {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		ov := overrides.NewRedis(client, overrides.RedisOptions{Now: c.Now})
		t.Cleanup(func() { ov.Close() })
		h, err := New(parse(t, ovYAML+"admin: {token: "+ovToken+"}\n"), memstore.New(memstore.Options{Now: c.Now}), Options{Registry: prometheus.NewRegistry(), Overrides: ov, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = &fixture{h: h, clock: c, auth: "Bearer " + ovToken}
	}
	limitOn := func(f *fixture, key string) string {
		body := f.check(`{"limit":"api-key","key":"` + key + `"}`).Body.String()
		i := strings.Index(body, `"limit":`)
		return body[i+8 : strings.IndexByte(body[i:], ',')+i]
	}
	all := func(key, want string) bool {
		for _, f := range fs {
			if limitOn(f, key) != want {
				return false
			}
		}
		return true
	}
	waitAll := func(key, want string) {
		t.Helper()
		testkit.WaitFor(t, 3*time.Second, "every instance to apply limit "+want+" to "+key, func() bool { return all(key, want) })
	}
	begin := time.Now()
	rec := fs[0].do("PUT", "/v1/overrides/api-key/shared", `{"limit":777,"period":"1s"}`)
	if rec.Code != 201 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	if got := limitOn(fs[0], "shared"); got != "777" {
		t.Errorf("the instance that took the PUT applies %s, want 777 at once", got)
	}
	waitAll("shared", "777")
	d := time.Since(begin)
	t.Logf("the override applied on all three instances %v after the PUT", d)
	if d > time.Second {
		t.Errorf("the override took %v to apply on every instance, want at most 1s", d)
	}
	// Listed from any instance, as shared.
	if rec := fs[2].do("GET", "/v1/overrides", ""); !strings.Contains(rec.Body.String(), `"limit":777`) || !strings.Contains(rec.Body.String(), `"shared":true`) {
		t.Errorf("GET on another instance = %s", rec.Body)
	}
	begin = time.Now()
	if rec := fs[1].do("DELETE", "/v1/overrides/api-key/shared", ""); rec.Code != 200 {
		t.Fatalf("DELETE = %d %s", rec.Code, rec.Body)
	}
	waitAll("shared", "10")
	d = time.Since(begin)
	t.Logf("the removal applied on all three instances %v after the DELETE", d)
	if d > time.Second {
		t.Errorf("the removal took %v to apply on every instance, want at most 1s", d)
	}
	// A ttl ends on every instance at once, at its expiry.
	if rec := fs[2].do("PUT", "/v1/overrides/api-key/brief", `{"limit":55,"period":"1s","ttl":"1500ms"}`); rec.Code != 201 {
		t.Fatalf("PUT brief = %d %s", rec.Code, rec.Body)
	}
	waitAll("brief", "55")
	c.Advance(1500*time.Millisecond - time.Nanosecond)
	if !all("brief", "55") {
		t.Errorf("an override with a ttl of 1500ms stopped applying before it ended")
	}
	c.Advance(time.Nanosecond)
	for i, f := range fs {
		if got := limitOn(f, "brief"); got != "10" {
			t.Errorf("instance %d applies limit %s to brief at its expiry, want 10", i, got)
		}
	}
}

// TestOverrideExplain: /v1/explain describes a key under its override.
func TestOverrideExplain(t *testing.T) {
	f, _ := ovFixture(t, "", nil)
	if rec := f.do("PUT", "/v1/overrides/tiny/k1", `{"limit":7,"period":"1m"}`); rec.Code != 201 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	for key, want := range map[string]string{"k1": `"policy":{"limit":7,`, "k2": `"policy":{"limit":2,`} {
		rec := f.do("GET", "/v1/explain?limit=tiny&key="+key, "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("explain %s = %d %s, want %s", key, rec.Code, rec.Body, want)
		}
	}
}

// BenchmarkForwardAuth decides forward-auth requests of a rule with two
// limits, with no override set and with one set for another key.
func BenchmarkForwardAuth(b *testing.B) {
	yaml := `
limits:
  api-key: {algorithm: token_bucket, limit: 1000000000, period: 1s}
  per-ip: {algorithm: sliding_window, limit: 1000000000, period: 1s}
proxy:
  rules:
    - name: api
      limits: [{limit: api-key, key: "header:X-API-Key"}, {limit: per-ip, key: ip}]
admin: {token: ` + ovToken + `}
`
	for _, withOverride := range []bool{false, true} {
		name := "no-overrides"
		if withOverride {
			name = "one-override"
		}
		b.Run(name, func(b *testing.B) {
			h, err := New(parse(b, yaml), memstore.New(memstore.Options{}), Options{Registry: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			if withOverride {
				if rec := serve(h, "PUT", "/v1/overrides/api-key/other", `{"limit":5,"period":"1s"}`, "Authorization", "Bearer "+ovToken); rec.Code != 201 {
					b.Fatalf("PUT override = %d %s", rec.Code, rec.Body)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest("GET", "/v1/forward-auth?rule=api", nil)
				req.Header.Set("X-API-Key", "k1")
				w := httptest.NewRecorder()
				for pb.Next() {
					clear(w.Header())
					h.ServeHTTP(w, req)
				}
			})
		})
	}
}

// TestOverridesAfterReload: overrides survive a reload; those of a limit
// the new configuration no longer has stay visible and removable.
func TestOverridesAfterReload(t *testing.T) {
	f, logs := ovFixture(t, "", nil)
	f.do("PUT", "/v1/overrides/tiny/k1", `{"limit":7,"period":"1m"}`)
	f.do("PUT", "/v1/overrides/api-key/k1", `{"limit":70,"period":"1s"}`)
	if err := f.h.Reload(parse(t, strings.Replace(ovYAML, "  tiny: {algorithm: fixed_window, limit: 2, period: 1m}\n", "", 1)+"admin: {token: "+ovToken+"}\n")); err != nil {
		t.Fatal(err)
	}
	if got := f.check(`{"limit":"api-key","key":"k1"}`).Body.String(); !strings.Contains(got, `"limit":70`) {
		t.Errorf("after the reload, check = %s, want the override's 70", got)
	}
	if rec := f.do("GET", "/v1/overrides/tiny", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"key":"k1"`) {
		t.Errorf("GET /v1/overrides/tiny = %d %s, want the orphan listed", rec.Code, rec.Body)
	}
	if rec := f.do("PUT", "/v1/overrides/tiny/k2", `{"limit":7,"period":"1m"}`); rec.Code != 404 {
		t.Errorf("PUT on a removed limit = %d, want 404", rec.Code)
	}
	if rec := f.do("DELETE", "/v1/overrides/tiny/k1", ""); rec.Code != 200 {
		t.Errorf("DELETE of the orphan = %d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), `"after":"none (the limit is not in the configuration)"`) {
		t.Errorf("the removal's log line does not say the limit is gone:\n%s", logs)
	}
	for _, target := range []string{"/v1/overrides/tiny/k1", "/v1/overrides/tiny"} {
		if rec := f.do("GET", target, ""); rec.Code != 404 || !strings.Contains(rec.Body.String(), `no limit named \"tiny\"`) {
			t.Errorf("GET %s = %d %s, want 404", target, rec.Code, rec.Body)
		}
	}
}
