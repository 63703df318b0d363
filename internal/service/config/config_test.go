package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/testkit"
)

// wantLines returns the "# want: " lines of a fixture: the problems Parse
// must report, in order, exactly.
func wantLines(t *testing.T, data []byte) []string {
	t.Helper()
	var want []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
			want = append(want, w)
		}
	}
	return want
}

func problems(err error) []string {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

// TestParseBad parses every fixture under testdata/bad, one configuration
// mistake each, and compares the problems with the fixture's "# want:"
// lines.
func TestParseBad(t *testing.T) {
	testkit.EachFile(t, "testdata/bad/*.yaml", func(t *testing.T, file string) {
		name := filepath.Base(file)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := wantLines(t, data)
		if len(want) == 0 {
			t.Fatalf("%s has no # want: lines", file)
		}
		c, err := Parse(name, data, testFormats)
		if err == nil {
			t.Fatalf("Parse(%s) = %v, nil; want problems:\n%s", name, c, strings.Join(want, "\n"))
		}
		got := problems(err)
		if got == nil {
			t.Fatalf("Parse(%s) error %T (%v), want *Error", name, err, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Parse(%s) problems:\n%s\nwant:\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if c != nil {
			t.Errorf("Parse(%s) returned a Config with its error", name)
		}
		if e := err.Error(); e != strings.Join(want, "\n") {
			t.Errorf("Error() = %q, want the problems one per line", e)
		}
	})
}

func TestParseGood(t *testing.T) {
	testkit.EachFile(t, "testdata/good/*.yaml", func(t *testing.T, file string) {
		c, err := Load(file, testFormats)
		if err != nil {
			t.Fatalf("Load(%s, testFormats): %v", file, err)
		}
		if got := c.Source(); got != file {
			t.Errorf("Source() = %q, want %q", got, file)
		}
		for _, l := range c.Limits() {
			if err := l.Policy.Validate(); err != nil {
				t.Errorf("limit %s: %v", l.Name(), err)
			}
		}
	})
}

// TestMemoryProxyExample checks every value of a configuration with both
// listeners, the memory store, two limits and a reverse proxy of two rules
// (testdata/good/memory_proxy.yaml).
func TestMemoryProxyExample(t *testing.T) {
	c := loadGood(t, "memory_proxy")
	if got, want := c.Listen(), (Listen{HTTP: "127.0.0.1:8080", GRPC: "127.0.0.1:8081"}); got != want {
		t.Errorf("Listen() = %+v, want %+v", got, want)
	}
	s := c.Store()
	if s.Backend != MemoryBackend || s.Timeout != 50*time.Millisecond || s.OnError != OnErrorAllow || s.Redis.Addrs != nil {
		t.Errorf("Store() = %+v, want memory, 50ms, allow, no redis", s)
	}
	wantLimits := []Limit{
		{Policy: sluice.TokenBucket(10, time.Second, 50).Named("api-key")},
		{Policy: sluice.SlidingWindow(100, time.Minute).Named("per-ip")},
	}
	if got := c.Limits(); !slices.Equal(got, wantLimits) {
		t.Errorf("Limits() = %+v, want %+v", got, wantLimits)
	}
	if l, ok := c.Limit("per-ip"); !ok || l != wantLimits[1] {
		t.Errorf("Limit(per-ip) = %+v, %v, want %+v, true", l, ok, wantLimits[1])
	}
	if _, ok := c.Limit("nope"); ok {
		t.Errorf("Limit(nope) found a limit")
	}
	p, ok := c.Proxy()
	if !ok {
		t.Fatal("Proxy() = false, want the proxy section")
	}
	if got := p.Upstream.String(); got != "http://127.0.0.1:9000" {
		t.Errorf("Upstream = %s", got)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}; !slices.Equal(p.TrustedProxies, want) {
		t.Errorf("TrustedProxies = %v, want %v", p.TrustedProxies, want)
	}
	if len(p.Rules) != 2 {
		t.Fatalf("len(Rules) = %d, want 2", len(p.Rules))
	}
	r0, r1 := p.Rules[0], p.Rules[1]
	if r0.Match.PathPrefix != "/login" || !slices.Equal(r0.Match.Methods, []string{"POST"}) || r0.Line != 24 {
		t.Errorf("rule 0 = %+v", r0)
	}
	if len(r0.Limits) != 1 || r0.Limits[0].Limit != "per-ip" || r0.Limits[0].Key != "ip" || r0.Limits[0].Cost != 1 {
		t.Errorf("rule 0 limits = %+v", r0.Limits)
	}
	if r1.Match.PathPrefix != "/api/" || r1.Match.Methods != nil {
		t.Errorf("rule 1 match = %+v", r1.Match)
	}
	if len(r1.Limits) != 2 || r1.Limits[0].Key != "header:X-API-Key" || r1.Limits[1].Limit != "per-ip" {
		t.Errorf("rule 1 limits = %+v", r1.Limits)
	}
	// Package server builds the key functions from the key sources (its
	// tests check that "ip" believes only the trusted proxies).
}

func TestAnchors(t *testing.T) {
	c := loadGood(t, "anchors")
	want := map[string]Limit{
		"small":    {Policy: sluice.SlidingLog(60, time.Minute).Named("small")},
		"large":    {Policy: sluice.SlidingLog(600, time.Minute).Named("large")},
		"shadowed": {Policy: sluice.SlidingLog(60, time.Minute).Named("shadowed"), Shadow: true},
	}
	for name, w := range want {
		if got, ok := c.Limit(name); !ok || got != w {
			t.Errorf("Limit(%s) = %+v, %v, want %+v", name, got, ok, w)
		}
	}
	p, _ := c.Proxy()
	if len(p.Rules) != 2 || len(p.Rules[1].Limits) != 2 || p.Rules[1].Limits[1].Key != "ip+path" {
		t.Fatalf("rules = %+v", p.Rules)
	}
	if got := p.Rules[1].Match.Methods; !slices.Equal(got, []string{"GET", "POST"}) {
		t.Errorf("methods = %v, want upper case [GET POST]", got)
	}
}

func TestRedis(t *testing.T) {
	c := loadGood(t, "redis")
	s := c.Store()
	want := Store{Backend: RedisBackend, Timeout: 20 * time.Millisecond, OnError: OnErrorLocal,
		Redis: Redis{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "redis-3.internal:6379"}, Prefix: "prod:", MaxBatch: 32,
			LocalRefusals: LocalRefusals{MaxEntries: 10000, MaxBytes: 4 << 20}}}
	if s.Backend != want.Backend || s.Timeout != want.Timeout || s.OnError != want.OnError ||
		s.Redis.Prefix != want.Redis.Prefix || !slices.Equal(s.Redis.Addrs, want.Redis.Addrs) || s.Redis.MaxBatch != want.Redis.MaxBatch ||
		s.Redis.LocalRefusals != want.Redis.LocalRefusals {
		t.Errorf("Store() = %+v, want %+v", s, want)
	}
	if got := c.Listen().HTTP; got != ":8080" {
		t.Errorf("Listen().HTTP = %q, want :8080", got)
	}
	if l, _ := c.Limit("daily"); l.Policy.Period != 24*time.Hour {
		t.Errorf("daily period = %v, want 24h", l.Policy.Period)
	}
	if _, ok := c.Proxy(); ok {
		t.Errorf("Proxy() = true for a file without a proxy section")
	}
}

func TestEnvoy(t *testing.T) {
	c := loadGood(t, "envoy")
	e, ok := c.Envoy()
	if !ok {
		t.Fatal("Envoy() = false, want the envoy section")
	}
	s, ps := rls.DecodeSection(e, "envoy")
	if len(ps) > 0 || len(s.Domains) != 1 || s.Domains[0].Domain != "edge" {
		t.Errorf("the envoy section decodes to %+v, %v, want the domain edge", s, ps)
	}
	// Envoy returns a copy: changing it changes nothing of the Config.
	e.Content[0].Content = nil
	if again, _ := c.Envoy(); again.Content[0].Content == nil {
		t.Error("changing the section Envoy returned changed the configuration")
	}
	c = loadGood(t, "memory_proxy")
	if e, ok := c.Envoy(); ok || e != nil {
		t.Errorf("Envoy() = %v, %v for a file without an envoy section", e, ok)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse("min.yaml", []byte("limits: {}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Listen(); got != (Listen{HTTP: DefaultHTTPAddr}) {
		t.Errorf("Listen() = %+v", got)
	}
	s := c.Store()
	if s.Backend != MemoryBackend || s.Timeout != DefaultTimeout || s.OnError != DefaultOnError {
		t.Errorf("Store() = %+v", s)
	}
	c, err = Parse("r.yaml", []byte("store: {backend: redis, redis: {addrs: ['[::1]:6379']}}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Store().Redis.Prefix; got != DefaultRedisPrefix {
		t.Errorf("prefix = %q, want %q", got, DefaultRedisPrefix)
	}
}

func TestDefault(t *testing.T) {
	c, err := Default(testFormats)
	if err != nil {
		t.Fatalf("Default(testFormats): %v", err)
	}
	if c.Source() != DefaultSource {
		t.Errorf("Source() = %q", c.Source())
	}
	if got := c.Listen(); got != (Listen{HTTP: "127.0.0.1:8080"}) {
		t.Errorf("Listen() = %+v", got)
	}
	if got := c.Store().Backend; got != MemoryBackend {
		t.Errorf("Backend = %q", got)
	}
	want := Limit{Policy: sluice.TokenBucket(10, time.Minute, 0).Named("demo")}
	if got, ok := c.Limit("demo"); !ok || got != want {
		t.Errorf("Limit(demo) = %+v, %v, want %+v", got, ok, want)
	}
	p, ok := c.Proxy()
	if !ok || p.Upstream != nil || len(p.Rules) != 1 || p.Rules[0].Name != "demo" {
		t.Errorf("Proxy() = %+v, %v, want one forward-auth rule named demo", p, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml"), testFormats); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing, testFormats) = %v, want an error wrapping os.ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	data := append([]byte("# "), bytes.Repeat([]byte("x"), MaxFileSize)...)
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big, testFormats)
	if got, want := problems(err), []string{big + ": file is larger than 4194304 bytes"}; !slices.Equal(got, want) {
		t.Errorf("Load(big, testFormats) = %v, want %v", got, want)
	}
}

// TestAliasBudget checks that aliases cannot make validation walk far more
// nodes than the file holds.
func TestAliasBudget(t *testing.T) {
	const n = 500 // n rules of n limits each: n² visits from a file of size O(n)
	var b strings.Builder
	b.WriteString("limits:\n")
	for i := range n {
		fmt.Fprintf(&b, "  l%d: {algorithm: gcra, limit: 10, period: 1s}\n", i)
	}
	b.WriteString("proxy:\n  rules:\n    - &r {limits: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{limit: l%d, key: ip}", i)
	}
	b.WriteString("]}\n")
	for range n {
		b.WriteString("    - *r\n")
	}
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()), testFormats)
	got := problems(err)
	if len(got) != 1 || !strings.Contains(got[0], "the document is too complex") {
		t.Errorf("Parse(bomb) problems = %q, want one 'too complex'", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Parse(bomb) took %v", d)
	}
}

// TestManyProblems checks that the report stops at maxProblems.
func TestManyProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("limits:\n")
	for i := range 3 * maxProblems {
		fmt.Fprintf(&b, "  l%d: {algorithm: gcra, limit: 0, period: 1s}\n", i)
	}
	_, err := Parse("many.yaml", []byte(b.String()), testFormats)
	got := problems(err)
	if len(got) != maxProblems+1 {
		t.Fatalf("Parse reported %d problems, want %d and a note", len(got), maxProblems)
	}
	if want := "many.yaml:2: limits.l0.limit: must be from 1 to 1000000000, got 0"; got[0] != want {
		t.Errorf("first problem = %q, want %q", got[0], want)
	}
	if want := "many.yaml: stopped after 50 problems"; got[maxProblems] != want {
		t.Errorf("last line = %q, want %q", got[maxProblems], want)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1s", time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"500ms", 500 * time.Millisecond, true},
		{"1d", 24 * time.Hour, true},
		{"7d", 7 * 24 * time.Hour, true},
		{"0", 0, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"+1d", 0, false},
		{"1.5d", 0, false},
		{"99999999999d", 0, false},
		{"1 minute", 0, false},
		{"60", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, %v, want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name         string
		m            Match
		method, path string
		want         bool
	}{
		{"zero matches all", Match{}, "GET", "/", true},
		{"prefix", Match{PathPrefix: "/api/"}, "GET", "/api/x", true},
		{"prefix exact", Match{PathPrefix: "/api/"}, "GET", "/api/", true},
		{"prefix miss", Match{PathPrefix: "/api/"}, "GET", "/api", false},
		{"method", Match{Methods: []string{"POST"}}, "POST", "/x", true},
		{"method miss", Match{Methods: []string{"POST"}}, "GET", "/x", false},
		{"both", Match{PathPrefix: "/login", Methods: []string{"POST", "PUT"}}, "PUT", "/login", true},
		{"both miss path", Match{PathPrefix: "/login", Methods: []string{"POST"}}, "POST", "/logout", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Matches(tt.method, tt.path); got != tt.want {
				t.Errorf("Matches(%q, %q) = %v, want %v", tt.method, tt.path, got, tt.want)
			}
		})
	}
}

// TestImmutable checks that changing what the accessors return does not
// change the Config.
func TestImmutable(t *testing.T) {
	c := loadGood(t, "memory_proxy")
	p, _ := c.Proxy()
	p.Upstream.Host = "evil:1"
	p.TrustedProxies[0] = netip.MustParsePrefix("0.0.0.0/0")
	p.Rules[0].Match.Methods[0] = "GET"
	p.Rules[0].Limits[0].Limit = "x"
	ls := c.Limits()
	ls[0].Policy.Limit = 1
	q, _ := c.Proxy()
	if q.Upstream.Host != "127.0.0.1:9000" || q.TrustedProxies[0].Bits() != 32 ||
		q.Rules[0].Match.Methods[0] != "POST" || q.Rules[0].Limits[0].Limit != "per-ip" {
		t.Errorf("Proxy() changed through a returned copy: %+v", q)
	}
	if l, _ := c.Limit("api-key"); l.Policy.Limit != 10 {
		t.Errorf("Limit changed through Limits(): %+v", l)
	}
	rc := loadGood(t, "redis")
	rc.Store().Redis.Addrs[0] = "x:1"
	if got := rc.Store().Redis.Addrs[0]; got != "10.0.0.1:6379" {
		t.Errorf("Store() changed through a returned copy: %s", got)
	}
}

func TestRestartRequired(t *testing.T) {
	parse := func(s string) *Config {
		t.Helper()
		c, err := Parse("x.yaml", []byte(s), testFormats)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	base := parse("limits: {a: {algorithm: gcra, limit: 1, period: 1s}}")
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"limits only", "limits: {a: {algorithm: gcra, limit: 2, period: 1s}}", nil},
		{"listen", "listen: {http: ':9', grpc: ':10'}", []string{"listen.http", "listen.grpc"}},
		{"store", "store: {backend: redis, redis: {addrs: ['r:1'], prefix: p, max_batch: 1, local_refusals: {enabled: false}}, timeout: 1s, on_error: deny}",
			[]string{"store.backend", "store.redis.addrs", "store.redis.prefix", "store.redis.max_batch", "store.redis.local_refusals", "store.timeout", "store.on_error"}},
		{"redis security", "store: {backend: redis, redis: {addrs: ['r:1'], password: pw, tls: true, sentinel: {master_set: m}}}",
			[]string{"store.backend", "store.redis.addrs", "store.redis.prefix", "store.redis credentials", "store.redis.sentinel", "store.redis.tls"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RestartRequired(base, parse(tt.yaml)); !slices.Equal(got, tt.want) {
				t.Errorf("RestartRequired = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "a.yaml", Line: 3, Column: 5, Path: "limits.x", Message: "bad"}, "a.yaml:3: limits.x: bad"},
		{Problem{File: "a.yaml", Message: "empty"}, "a.yaml: empty"},
		{Problem{File: "a.yaml", Line: 1, Message: "m"}, "a.yaml:1: m"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

// FuzzLoad checks that no input makes Parse panic, that it returns either
// a Config or an *Error with at least one problem, and that every Config it
// returns holds valid policies and rule limits.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(DefaultYAML))
	f.Add([]byte("limits: {a: {<<: {algorithm: gcra}, limit: 1, period: 1s}}"))
	f.Add([]byte("a: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, testFormats)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a Config and an error", c, err)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("Parse error %T %v, want an *Error with problems", err, err)
			}
			for _, p := range e.Problems {
				if p.File != "fuzz.yaml" || p.Message == "" {
					t.Fatalf("problem %+v lacks its file or message", p)
				}
			}
			return
		}
		for _, l := range c.Limits() {
			if err := l.Policy.Validate(); err != nil {
				t.Fatalf("limit %s: %v", l.Name(), err)
			}
		}
		if p, ok := c.Proxy(); ok {
			for _, r := range p.Rules {
				for _, rl := range r.Limits {
					l, ok := c.Limit(rl.Limit)
					minCost := int64(1)
					if rl.Usage != "" {
						minCost = 0
					}
					if !ok || rl.Key == "" || rl.Cost < minCost || rl.Cost > l.Policy.Capacity() ||
						(rl.Usage != "") != (rl.SettleWithin > 0) || rl.Usage != "" && len(rl.ChargeOn) > 0 {
						t.Fatalf("rule limit %+v is not valid", rl)
					}
				}
			}
		}
		_ = fmt.Sprint(c.Listen(), c.Store())
	})
}

// TestBurstZero checks that burst: 0 means the limit, the rule of the Go
// constructors (sluice.TokenBucket(10, time.Second, 0)) and the overrides
// API.
func TestBurstZero(t *testing.T) {
	c := loadGood(t, "burst_zero")
	l, _ := c.Limit("api-key")
	want := sluice.TokenBucket(10, time.Second, 0).Named("api-key")
	if l.Policy != want || l.Policy.Capacity() != 10 {
		t.Errorf("burst: 0 gives %+v (capacity %d), want %+v (capacity 10)", l.Policy, l.Policy.Capacity(), want)
	}
}

// loadGood loads testdata/good/NAME.yaml and fails the test if it does not
// load.
func loadGood(t *testing.T, name string) *Config {
	t.Helper()
	c, err := Load(filepath.Join("testdata", "good", name+".yaml"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConcurrencyLimits checks a concurrency limit's fields: a lease
// instead of a period, no dry run, no charge_on, and no rule that only
// forward-auth could use; each problem with its file, line and path, and
// a sentence saying why.
func TestConcurrencyLimits(t *testing.T) {
	c, err := Parse("conc.yaml", []byte("limits:\n  inflight:\n    algorithm: concurrency\n    limit: 5\n    lease: 30s\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Limit("inflight"); l.Policy != sluice.Concurrency(5, 30*time.Second).Named("inflight") {
		t.Errorf("Limit(inflight) = %v", l.Policy)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"limits:\n  c:\n    algorithm: concurrency\n    limit: 5\n    period: 30s\n",
			"conc.yaml:5: limits.c.period: a concurrency limit counts what is in flight, not a rate: it has no period; give its lease instead"},
		{"limits:\n  c:\n    algorithm: concurrency\n    limit: 5\n",
			"conc.yaml:2: limits.c.lease: missing: how long an admitted request holds its slot if it is never released"},
		{"limits:\n  c:\n    algorithm: concurrency\n    limit: 5\n    lease: 30s\n    shadow: true\n",
			"conc.yaml:6: limits.c.shadow: a concurrency limit cannot be a dry run"},
		{"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 30s}\nproxy:\n  rules:\n    - limits: [{limit: c, key: ip}]\n",
			"conc.yaml:5: proxy.rules[0].limits[0].limit: limit \"c\" is a concurrency limit, and this proxy has no upstream"},
		{"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 30s}\nproxy:\n  upstream: http://127.0.0.1:9\n  rules:\n    - limits: [{limit: c, key: ip, charge_on: [401]}]\n",
			"conc.yaml:6: proxy.rules[0].limits[0].charge_on: limit \"c\" is a concurrency limit"},
	} {
		_, err := Parse("conc.yaml", []byte(tt.yaml), testFormats)
		got := problems(err)
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, tt.want)
		}
		if !found {
			t.Errorf("Parse(%q) = %q, want a problem starting %q", tt.yaml, got, tt.want)
		}
	}
	_, err = Parse("conc.yaml", []byte("limits:\n  c: {algorithm: concurrency, limit: 5, lease: 30s}\nproxy:\n  upstream: http://127.0.0.1:9\n  rules:\n    - limits: [{limit: c, key: ip}]\n"), testFormats)
	if err != nil {
		t.Errorf("a concurrency limit on a proxied rule: %v", err)
	}
}

// TestSettleWithin checks a rate limit's settle_within, the time within
// which the cost of an admitted check may be settled:
// DefaultSettleWithin when it has none, a positive duration of at most
// MaxSettleWithin, never on a dry run or a concurrency limit.
func TestSettleWithin(t *testing.T) {
	c, err := Parse("settle.yaml", []byte("limits:\n  tokens: {algorithm: token_bucket, limit: 100000, period: 1h, settle_within: 2m}\n  plain: {algorithm: gcra, limit: 5, period: 1s}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Limit("tokens"); l.SettleWithin != 2*time.Minute || l.Settle() != 2*time.Minute {
		t.Errorf("Limit(tokens) settle_within = %v, Settle() = %v; want 2m", l.SettleWithin, l.Settle())
	}
	if l, _ := c.Limit("plain"); l.SettleWithin != 0 || l.Settle() != DefaultSettleWithin {
		t.Errorf("Limit(plain) settle_within = %v, Settle() = %v; want 0 and %v", l.SettleWithin, l.Settle(), DefaultSettleWithin)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"limits:\n  c:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    settle_within: 0s\n",
			"settle.yaml:6: limits.c.settle_within: must be positive, got 0s"},
		{"limits:\n  c:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    settle_within: 25h\n",
			"settle.yaml:6: limits.c.settle_within: must be at most 1d, got 25h"},
		{"limits:\n  c:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    settle_within: 30s\n    shadow: true\n",
			"settle.yaml:6: limits.c.settle_within: a dry run's cost is never settled"},
		{"limits:\n  c:\n    algorithm: concurrency\n    limit: 5\n    lease: 30s\n    settle_within: 30s\n",
			"settle.yaml:6: limits.c.settle_within: a concurrency limit holds units while a request runs"},
		{"limits:\n  c:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n    lease: 30s\n",
			"settle.yaml:6: limits.c.lease: applies only to algorithm concurrency"},
	} {
		_, err := Parse("settle.yaml", []byte(tt.yaml), testFormats)
		got := problems(err)
		if len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
			t.Errorf("Parse(%q) = %q, want one problem starting %q", tt.yaml, got, tt.want)
		}
	}
}

// TestEnvoyConcurrencyRefused checks that the envoy section refuses a
// concurrency algorithm, saying why: Envoy never says when a request ends.
func TestEnvoyConcurrencyRefused(t *testing.T) {
	y := "listen: {grpc: 127.0.0.1:8081}\nenvoy:\n  domains:\n    - domain: edge\n      descriptors:\n        - key: user\n          algorithm: concurrency\n          rate_limit: {unit: second, requests_per_unit: 5}\n"
	_, err := Parse("envoy.yaml", []byte(y), testFormats)
	got := problems(err)
	if len(got) != 1 || !strings.Contains(got[0], "algorithm: concurrency is not available for Envoy") || !strings.HasPrefix(got[0], "envoy.yaml:7: envoy.domains[0].descriptors[0].algorithm") {
		t.Fatalf("Parse = %q, want one problem saying concurrency is not available for Envoy", got)
	}
}

// TestUsage: a rule limit with usage keeps its spec as written, may cost
// 0, and settles within its settle_within, else its limit's.
func TestUsage(t *testing.T) {
	c := loadGood(t, "llm")
	p, _ := c.Proxy()
	got := p.Rules[0].Limits
	want := []RuleLimit{
		{Limit: "tokens-per-day", Key: "header:Authorization", Cost: 0, Usage: "openai", SettleWithin: 30 * time.Minute},
		{Limit: "prompt-per-minute", Key: "header:Authorization", Cost: 500, Usage: "openai:prompt", SettleWithin: 2 * time.Minute},
		{Limit: "requests", Key: "header:Authorization", Cost: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("limits = %+v, want %+v", got, want)
	}
	for i := range want {
		if g := got[i]; g.Limit != want[i].Limit || g.Key != want[i].Key || g.Cost != want[i].Cost || g.Usage != want[i].Usage || g.SettleWithin != want[i].SettleWithin || g.ChargeOn != nil {
			t.Errorf("limits[%d] = %+v, want %+v", i, g, want[i])
		}
	}
}
