package config

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlans(t *testing.T) {
	c := loadGood(t, "plans")
	var got []string
	for _, p := range c.Plans() {
		got = append(got, p.Name+"="+strings.Join(p.Limits, "+"))
	}
	if want := "free=free-hourly internal= pro=pro-hourly+pro-burst team=free-hourly+team-tokens team-plus=team-tokens"; strings.Join(got, " ") != want {
		t.Errorf("Plans() = %v, want %s", got, want)
	}
	// A plan's token budget: the estimate and settle_within default to 0
	// and the limit's; a plan's limit without usage has none.
	for name, want := range map[string]map[string]PlanUsage{
		"free":      nil,
		"team":      {"team-tokens": {Spec: "openai", SettleWithin: 5 * time.Minute}},
		"team-plus": {"team-tokens": {Spec: "header:X-Tokens", Cost: 50, SettleWithin: 10 * time.Minute}},
	} {
		p, _ := c.Plan(name)
		if !maps.Equal(p.Usage, want) {
			t.Errorf("Plan(%s).Usage = %v, want %v", name, p.Usage, want)
		}
	}
	if p, ok := c.Plan("internal"); !ok || !p.Unlimited() {
		t.Errorf("Plan(internal) = %+v, %v, want unlimited", p, ok)
	}
	tables := c.PlanTables()
	want := []PlanTable{
		{Name: "accounts", RedisHash: "sluice:plans", CacheTTL: 2 * time.Second, CacheSize: 1000},
		{Name: "customers", File: filepath.Join("testdata", "good", "customers.csv"), Default: "free", CacheTTL: DefaultPlanCacheTTL, CacheSize: DefaultPlanCacheSize},
	}
	if !slices.Equal(tables, want) {
		t.Errorf("PlanTables() = %+v, want %+v", tables, want)
	}
	px, _ := c.Proxy()
	if px.Body != (Body{MaxBytes: 4096, Timeout: 2 * time.Second}) {
		t.Errorf("Body = %+v", px.Body)
	}
	login := px.Rules[0]
	if login.Plan != nil || !slices.Equal(login.Limits[0].ChargeOn, []int{401, 403}) {
		t.Errorf("login rule = %+v", login)
	}
	if got := login.Limits[0].Key; got != "form:username" {
		t.Errorf("login key = %q, want form:username", got)
	}
	for i, w := range []RulePlan{
		{Key: "header:X-API-Key", Table: "customers", Default: "free", Cost: 1},
		{Key: "json:account", Table: "accounts", Default: "pro", Cost: 2},
		{Key: "header:X-API-Key", From: "header:X-Plan", Default: "free", Cost: 1},
	} {
		p := px.Rules[i+1].Plan
		if p == nil {
			t.Fatalf("rule %d has no plan", i+1)
		}
		if p.Key != w.Key || p.From != w.From || p.Table != w.Table || p.Default != w.Default || p.Cost != w.Cost {
			t.Errorf("rule %d plan = %+v, want %+v", i+1, *p, w)
		}
	}
	// The accessor's copies do not share the configuration's slices.
	px.Rules[0].Limits[0].ChargeOn[0] = 500
	px.Rules[1].Plan.Default = "pro"
	again, _ := c.Proxy()
	if again.Rules[0].Limits[0].ChargeOn[0] != 401 || again.Rules[1].Plan.Default != "free" {
		t.Error("changing a copy changed the configuration")
	}
}

// TestBodyDefaults: a proxy without a body section reads at most 64 KiB
// for 10 s.
func TestBodyDefaults(t *testing.T) {
	c, err := Parse("x.yaml", []byte("limits: {a: {algorithm: gcra, limit: 1, period: 1s}}\nproxy:\n  rules: [{limits: [{limit: a, key: \"json:user\"}]}]\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	px, _ := c.Proxy()
	if px.Body != (Body{MaxBytes: 64 << 10, Timeout: 10 * time.Second}) {
		t.Errorf("Body = %+v", px.Body)
	}
}

// TestPlansDocs checks that the whole configurations shown in
// docs/plans.md, and examples/login.yaml, are valid. Table files resolve
// against examples/.
func TestPlansDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for block := range strings.SplitSeq(string(b), "```yaml\n") {
		y, _, ok := strings.Cut(block, "```")
		if !ok {
			continue
		}
		first := strings.SplitN(strings.TrimSpace(y), "\n", 2)[0]
		if !strings.HasPrefix(first, "listen:") && !strings.HasPrefix(first, "limits:") {
			continue // a fragment
		}
		checked++
		if _, err := Parse("../../../examples/plans-doc.yaml", []byte(y), testFormats); err != nil {
			t.Errorf("docs/plans.md: YAML block %d is not a valid configuration:\n%s\n%v", checked, y, err)
		}
	}
	if checked < 2 {
		t.Errorf("checked %d configurations in docs/plans.md, want at least 2", checked)
	}
	if _, err := Load("../../../examples/login.yaml", testFormats); err != nil {
		t.Errorf("examples/login.yaml: %v", err)
	}
}
