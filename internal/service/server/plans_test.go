package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/plans/redisplans"
)

// plansYAML has three plans, a rule that takes the plan from a header and
// one that looks the key up in a table file (TABLE is replaced).
const plansYAML = `
limits:
  free-hourly: {algorithm: fixed_window, limit: 2, period: 1h}
  pro-hourly: {algorithm: fixed_window, limit: 5, period: 1h}
  pro-second: {algorithm: fixed_window, limit: 3, period: 1s}
  per-ip: {algorithm: fixed_window, limit: 1000, period: 1h}
plans:
  free: [{limit: free-hourly}]
  pro: [pro-hourly, pro-second]
  internal: unlimited
plan_tables:
  customers: {file: TABLE, default: free}
proxy:
  rules:
    - name: by-header
      match: {path_prefix: /h/}
      plan: {key: "header:X-API-Key", from: "header:X-Plan", default: free}
      limits: [{limit: per-ip, key: ip}]
    - name: by-table
      match: {path_prefix: /t/}
      plan: {key: "header:X-API-Key", table: customers}
`

// openTableFile returns an Options.OpenTable that opens plan table files
// (as cmd/sluice opens the tables of sluice serve), looked at for changes
// every millisecond of the clock now.
func openTableFile(now func() time.Time) func(config.PlanTable, []string) (plans.Table, error) {
	return func(tc config.PlanTable, planNames []string) (plans.Table, error) {
		return plans.OpenFile(tc.File, plans.FileOptions{CheckEvery: time.Millisecond, Plans: planNames, Now: now})
	}
}

// plFixture serves plansYAML with the table file holding table.
func plFixture(t *testing.T, table string, opts ...func(*Options)) (*fixture, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "customers.csv")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	c := teststore.NewClock(start)
	store := memstore.New(memstore.Options{Now: c.Now})
	reg := prometheus.NewRegistry()
	o := Options{Registry: reg, Now: c.Now, OpenTable: openTableFile(c.Now)}
	for _, fn := range opts {
		fn(&o)
	}
	h, err := New(parse(t, strings.Replace(plansYAML, "TABLE", path, 1)), store, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{h: h, store: store, clock: c, reg: reg}, path
}

// admitted sends n forward-auth requests for rule with the header pairs
// and returns how many were let through, and the RateLimit-Policy of the
// first answer.
func (f *fixture) admitted(n int, rule string, header ...string) (int, string) {
	ok, policy := 0, ""
	for i := range n {
		rec := f.do("GET", "/v1/forward-auth?rule="+rule, "", header...)
		if i == 0 {
			policy = rec.Header().Get("RateLimit-Policy")
		}
		if rec.Code == http.StatusOK {
			ok++
		}
	}
	return ok, policy
}

func TestPlansByHeader(t *testing.T) {
	tests := []struct {
		name     string
		header   []string
		admitted int
		policy   string
	}{
		{"free", []string{"X-API-Key", "k1", "X-Plan", "free"}, 2, `"per-ip";q=1000;w=3600, "free-hourly";q=2;w=3600`},
		{"pro: the per-second limit binds", []string{"X-API-Key", "k2", "X-Plan", "pro"}, 3, `"per-ip";q=1000;w=3600, "pro-hourly";q=5;w=3600, "pro-second";q=3;w=1`},
		{"unknown plan gets the default", []string{"X-API-Key", "k3", "X-Plan", "gold"}, 2, `"per-ip";q=1000;w=3600, "free-hourly";q=2;w=3600`},
		{"no plan header gets the default", []string{"X-API-Key", "k4"}, 2, `"per-ip";q=1000;w=3600, "free-hourly";q=2;w=3600`},
		{"internal: the rule's own limits only", []string{"X-API-Key", "k5", "X-Plan", "internal"}, 20, `"per-ip";q=1000;w=3600`},
		{"no key: the rule's own limits only", []string{"X-Plan", "free"}, 20, `"per-ip";q=1000;w=3600`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := plFixture(t, "")
			got, policy := f.admitted(20, "by-header", tt.header...)
			if got != tt.admitted {
				t.Errorf("admitted %d of 20, want %d", got, tt.admitted)
			}
			if policy != tt.policy {
				t.Errorf("RateLimit-Policy = %q, want %q", policy, tt.policy)
			}
		})
	}
	// Each key counts apart, the pro plan's hourly limit binds over time.
	f, _ := plFixture(t, "")
	if got, _ := f.admitted(10, "by-header", "X-API-Key", "p", "X-Plan", "pro"); got != 3 {
		t.Errorf("first second: admitted %d, want 3", got)
	}
	f.clock.Advance(time.Second)
	if got, _ := f.admitted(10, "by-header", "X-API-Key", "p", "X-Plan", "pro"); got != 2 {
		t.Errorf("second second: admitted %d, want 2 (5 an hour)", got)
	}
}

// TestPlansByTable: the plan comes from the table file; a changed file
// applies at the next look, a broken one is refused (cmd/sluice's
// TestOpenTable checks what is logged).
func TestPlansByTable(t *testing.T) {
	f, path := plFixture(t, "key,plan\nk-pro,pro\nk-int,internal\n")
	for _, tt := range []struct {
		key      string
		admitted int
	}{{"k-pro", 3}, {"k-int", 20}, {"k-other", 2}} {
		if got, _ := f.admitted(20, "by-table", "X-API-Key", tt.key); got != tt.admitted {
			t.Errorf("%s: admitted %d of 20, want %d", tt.key, got, tt.admitted)
		}
	}
	// The file changes: k-new is pro from the next look on.
	future := time.Now().Add(time.Minute)
	testkit.WriteFileAt(t, path, "k-new,pro\n", future)
	f.clock.Advance(time.Millisecond) // the next look
	if got, _ := f.admitted(20, "by-table", "X-API-Key", "k-new"); got != 3 {
		t.Errorf("k-new after the change: admitted %d of 20, want 3 (pro)", got)
	}
	// A broken file keeps the table in use.
	future = future.Add(time.Minute)
	testkit.WriteFileAt(t, path, "k-new,gold\n", future)
	f.clock.Advance(time.Second)
	if got, _ := f.admitted(20, "by-table", "X-API-Key", "k-new"); got != 2 {
		t.Errorf("k-new after a broken file: admitted %d, want 2 (the rest of pro's 5 an hour)", got)
	}
}

// TestPlansByRedisTable: the plan comes from a Redis hash shared by the
// instances, cached for cache_ttl.
func TestPlansByRedisTable(t *testing.T) {
	srv := testkit.StartRedis(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	srv.Do("HSET", "test:plans", "k-pro", "pro")
	yaml := `
store: {backend: redis, redis: {addrs: ["` + srv.Addr + `"]}}
limits:
  free-hourly: {algorithm: fixed_window, limit: 2, period: 1h}
  pro-hourly: {algorithm: fixed_window, limit: 5, period: 1h}
plans:
  free: [free-hourly]
  pro: [pro-hourly]
plan_tables:
  accounts: {redis_hash: "test:plans", default: free, cache_ttl: 50ms}
proxy:
  rules:
    - name: api
      plan: {key: "header:X-API-Key", table: accounts}
`
	// Two instances on their own memory stores: the plan is shared, the
	// counts are not (the store is the caller's choice).
	var fs [2]*fixture
	for i := range fs {
		c := teststore.NewClock(start)
		h, err := New(parse(t, yaml), memstore.New(memstore.Options{Now: c.Now}), Options{Registry: prometheus.NewRegistry(), Now: c.Now,
			OpenTable: func(tc config.PlanTable, _ []string) (plans.Table, error) {
				return plans.NewCache(redisplans.New(client, tc.RedisHash, 0), plans.CacheOptions{TTL: tc.CacheTTL, Size: tc.CacheSize, Now: c.Now}), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = &fixture{h: h, clock: c}
	}
	for i, f := range fs {
		if got, _ := f.admitted(10, "api", "X-API-Key", "k-pro"); got != 5 {
			t.Errorf("instance %d: k-pro admitted %d, want 5 (pro)", i, got)
		}
		if got, _ := f.admitted(10, "api", "X-API-Key", "k-up"); got != 2 {
			t.Errorf("instance %d: k-up admitted %d, want 2 (free)", i, got)
		}
	}
	// k-up moves to pro: both instances apply it once their cache expires.
	srv.Do("HSET", "test:plans", "k-up", "pro")
	for i, f := range fs {
		f.clock.Advance(50*time.Millisecond - time.Nanosecond) // just short of cache_ttl
		if got, _ := f.admitted(1, "api", "X-API-Key", "k-up"); got != 0 {
			t.Errorf("instance %d: k-up before its cache expires admitted %d, want 0 (free, spent)", i, got)
		}
		f.clock.Advance(time.Nanosecond)
	}
	for i, f := range fs {
		// pro-hourly counts apart from free-hourly: all 5 are left.
		if got, _ := f.admitted(10, "api", "X-API-Key", "k-up"); got != 5 {
			t.Errorf("instance %d: k-up on pro admitted %d more, want 5", i, got)
		}
	}
	// /v1/check looks the key up in the table too (50ms later than start,
	// so 50ms nearer the window's end).
	rec := fs[0].check(`{"plan_table":"accounts","key":"k-new"}`)
	want := `{"allowed":true,"plan":"free","retry_after_ms":0,"results":[{"allowed":true,"policy":"free-hourly","limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":2799950}]}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Errorf("plan_table check = %s, want %s", got, want)
	}
	// A server that cannot open plan tables refuses a configuration
	// with one.
	if _, err := New(parse(t, yaml), memstore.New(memstore.Options{}), Options{Registry: prometheus.NewRegistry()}); err == nil || !strings.Contains(err.Error(), `plan table "accounts": the server cannot open plan tables (Options.OpenTable)`) {
		t.Errorf("New without Options.OpenTable = %v, want an error", err)
	}
}

func TestCheckPlan(t *testing.T) {
	f, _ := plFixture(t, "k-pro,pro\n")
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"pro", `{"plan":"pro","key":"a"}`, 200,
			`{"allowed":true,"plan":"pro","retry_after_ms":0,"results":[{"allowed":true,"policy":"pro-hourly","limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":2800000},{"allowed":true,"policy":"pro-second","limit":3,"remaining":2,"retry_after_ms":0,"reset_after_ms":1000}]}`},
		{"unlimited", `{"plan":"internal","key":"a"}`, 200, `{"allowed":true,"plan":"internal","retry_after_ms":0,"results":[]}`},
		{"by table", `{"plan_table":"customers","key":"k-pro","cost":2}`, 200,
			`{"allowed":true,"plan":"pro","retry_after_ms":0,"results":[{"allowed":true,"policy":"pro-hourly","limit":5,"remaining":3,"retry_after_ms":0,"reset_after_ms":2800000},{"allowed":true,"policy":"pro-second","limit":3,"remaining":1,"retry_after_ms":0,"reset_after_ms":1000}]}`},
		{"table default", `{"plan_table":"customers","key":"nobody"}`, 200,
			`{"allowed":true,"plan":"free","retry_after_ms":0,"results":[{"allowed":true,"policy":"free-hourly","limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":2800000}]}`},
		{"unknown plan", `{"plan":"gold","key":"a"}`, 404, `{"error":"plan: no plan named \"gold\""}`},
		{"unknown table", `{"plan_table":"nope","key":"a"}`, 404, `{"error":"plan_table: no plan table named \"nope\""}`},
		{"both", `{"plan":"pro","plan_table":"customers","key":"a"}`, 400, `{"error":"\"plan\" and \"plan_table\" cannot be combined; give one"}`},
		{"with limit", `{"plan":"pro","limit":"per-ip","key":"a"}`, 400, `{"error":"\"plan\" and \"plan_table\" cannot be combined with \"limit\" or \"checks\""}`},
		{"no key", `{"plan":"pro"}`, 400, `{"error":"key is missing: the client whose plan's limits are checked"}`},
		// A cost no limit of the plan can ever admit is refused, and
		// nothing is charged (pro-hourly keeps its 4).
		{"cost too high", `{"plan":"pro","key":"a","cost":4}`, 200,
			`{"allowed":false,"plan":"pro","retry_after_ms":-1,"results":[{"allowed":true,"policy":"pro-hourly","limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":2800000},{"allowed":false,"policy":"pro-second","limit":3,"remaining":2,"retry_after_ms":-1,"reset_after_ms":1000}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := f.check(tt.body)
			if got := strings.TrimSpace(rec.Body.String()); rec.Code != tt.code || got != tt.want {
				t.Errorf("check(%s) = %d %s, want %d %s", tt.body, rec.Code, got, tt.code, tt.want)
			}
		})
	}
	rec := f.check(`{"plan":"pro","key":"hdr"}`)
	if got, want := rec.Header().Get("RateLimit-Policy"), `"pro-hourly";q=5;w=3600, "pro-second";q=3;w=1`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
}

// TestPlansProxy: through the reverse proxy, the plan's limits apply and
// the headers name them.
func TestPlansProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "t.csv")
	os.WriteFile(path, nil, 0o644)
	yaml := strings.Replace(strings.Replace(plansYAML, "TABLE", path, 1), "proxy:\n", "proxy:\n  upstream: "+up.URL+"\n", 1)
	f := newFixture(t, yaml)
	front := httptest.NewServer(f.h)
	t.Cleanup(front.Close)
	codes := ""
	for range 3 {
		resp, _ := get(t, front.Client(), "GET", front.URL+"/h/x", nil, "X-API-Key", "k", "X-Plan", "free")
		codes += resp.Status[:3] + " "
		if got, want := resp.Header.Get("RateLimit-Policy"), `"per-ip";q=1000;w=3600, "free-hourly";q=2;w=3600`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
	}
	if codes != "200 200 429 " {
		t.Errorf("statuses = %s, want 200 200 429", codes)
	}
}

// TestPlansRefuseUnknown: with plan.unknown: refuse, a client whose key
// the table does not hold gets 403 from forward-auth and from the proxy,
// which forwards nothing; known clients get their plans, and a request
// without the key gets the rule's own limits.
func TestPlansRefuseUnknown(t *testing.T) {
	up := &echo{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	path := filepath.Join(t.TempDir(), "customers.csv")
	if err := os.WriteFile(path, []byte("key,plan\nk-pro,pro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(plansYAML, "TABLE", path, 1) +
		"      limits: [{limit: per-ip, key: ip}]\n" +
		"    - name: known-only\n      match: {path_prefix: /k/}\n      plan: {key: \"header:X-API-Key\", table: customers, unknown: refuse}\n"
	yaml = strings.Replace(yaml, "proxy:\n", "proxy:\n  upstream: "+upstream.URL+"\n", 1)
	c := teststore.NewClock(start)
	store := memstore.New(memstore.Options{Now: c.Now})
	h, err := New(parse(t, yaml), store, Options{Registry: prometheus.NewRegistry(), Now: c.Now, OpenTable: openTableFile(c.Now)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f := &fixture{h: h, store: store, clock: c}
	if got, _ := f.admitted(5, "known-only", "X-API-Key", "k-other"); got != 0 {
		t.Errorf("forward-auth admitted %d requests of an unknown key, want 0", got)
	}
	rec := f.do("GET", "/v1/forward-auth?rule=known-only", "", "X-API-Key", "k-other")
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "plan.unknown: refuse") {
		t.Errorf("forward-auth of an unknown key = %d %s, want 403 naming plan.unknown", rec.Code, rec.Body)
	}
	if got, _ := f.admitted(5, "known-only", "X-API-Key", "k-pro"); got != 3 {
		t.Errorf("forward-auth admitted %d requests of a pro key, want its plan's 3", got)
	}
	if got, _ := f.admitted(5, "known-only"); got != 5 {
		t.Errorf("forward-auth admitted %d requests without a key, want 5 (no limits of the rule's own)", got)
	}
	if rec := f.do("GET", "/k/x", "", "X-API-Key", "k-other"); rec.Code != 403 {
		t.Errorf("proxy of an unknown key = %d %s, want 403", rec.Code, rec.Body)
	}
	f.clock.Advance(time.Second) // past the pro plan's second
	if rec := f.do("GET", "/k/x", "", "X-API-Key", "k-pro"); rec.Code != 200 {
		t.Errorf("proxy of a known key = %d %s, want 200", rec.Code, rec.Body)
	}
	if n := up.hits.Load(); n != 1 {
		t.Errorf("the upstream saw %d requests, want 1 (the known key's)", n)
	}
}

// TestPlanPenalty: a plan's limit with a penalty blocks the plan's client
// that went over it, through forward-auth.
func TestPlanPenalty(t *testing.T) {
	const y = `
limits:
  trial-minute:
    algorithm: fixed_window
    limit: 2
    period: 1m
    penalty: {block_for: 10m}
plans:
  trial: [trial-minute]
  internal: unlimited
proxy:
  rules:
    - name: api
      plan: {key: "header:X-API-Key", from: "header:X-Plan", default: trial}
`
	c := teststore.NewClock(start)
	store := memstore.New(memstore.Options{Now: c.Now})
	h, err := New(parse(t, y), store, Options{Registry: prometheus.NewRegistry(), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, store: store, clock: c}
	if got, _ := f.admitted(2, "api", "X-API-Key", "k1"); got != 2 {
		t.Fatalf("admitted %d of 2", got)
	}
	retryAfter := func(what, want string) {
		t.Helper()
		rec := f.do("GET", "/v1/forward-auth?rule=api", "", "X-API-Key", "k1")
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != want {
			t.Errorf("%s: forward-auth = %d, Retry-After %q; want 429, %s", what, rec.Code, rec.Header().Get("Retry-After"), want)
		}
	}
	retryAfter("the third request, an offence", "600")
	c.Advance(2 * time.Minute)
	retryAfter("blocked, though the window has room", "480")
	if got, _ := f.admitted(1, "api", "X-API-Key", "k1", "X-Plan", "internal"); got != 1 {
		t.Errorf("the same key on an unlimited plan: admitted %d, want 1", got)
	}
	c.Advance(8 * time.Minute)
	if got, _ := f.admitted(1, "api", "X-API-Key", "k1"); got != 1 {
		t.Errorf("after the block: admitted %d, want 1", got)
	}
}
