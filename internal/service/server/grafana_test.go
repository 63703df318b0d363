package server

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// dashboardFile is the Grafana dashboard shipped for the service.
const dashboardFile = "../../../deploy/grafana/sluice.json"

// TestGrafanaDashboardMetrics checks that every metric the dashboard
// queries is one the service exports: it scrapes /metrics of a real
// Handler (memory store, a circuit breaker, the default registry with the
// Go and process collectors) after some traffic, and looks up each metric
// name found in the dashboard's PromQL.
func TestGrafanaDashboardMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	var exprs []string
	collectQueries(dash, &exprs)
	if len(exprs) < 20 {
		t.Fatalf("found %d queries in %s, want the dashboard's 20 or more", len(exprs), dashboardFile)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range promqlMetrics(e) {
			used[name] = true
		}
	}

	h, err := New(parse(t, testYAML), memstore.New(memstore.Options{}), Options{CircuitState: func() string { return "closed" }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h}
	f.check(`{"limit":"tiny","key":"k"}`)
	f.check(`{"limit":"tiny","key":"k"}`)
	f.check(`{"limit":"tiny","key":"k"}`)
	f.check(`{"checks":[{"limit":"api-key","key":"k"},{"limit":"per-ip","key":"k"}]}`)
	exported := exportedMetrics(t, scrape(t, h))

	for name := range used {
		if !exported[name] {
			t.Errorf("the dashboard queries %s, which the service does not export", name)
		}
	}
	for _, want := range []string{
		"sluice_decisions_total", "sluice_store_duration_seconds_bucket", "sluice_store_errors_total",
		"sluice_store_circuit_state", "sluice_store_keys",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not query %s", want)
		}
	}
	var unused []string
	for name := range exported {
		if strings.HasPrefix(name, "sluice_") && !used[name] && !used[name+"_bucket"] && !used[name+"_count"] &&
			!strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") && !strings.HasSuffix(name, "_bucket") {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	t.Logf("exported sluice metrics the dashboard does not show: %v", unused)
}

// TestGrafanaDashboardShape checks what Grafana needs to import the file:
// a title and uid, panels with unique ids and a place on the grid, and
// every query on the dashboard's data source variable.
func TestGrafanaDashboardShape(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title, UID string
		Panels     []struct {
			ID         int
			Type       string
			Title      string
			GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
			Datasource *struct{ UID string }     `json:"datasource"`
			Targets    []struct {
				Expr       string
				Datasource struct{ UID string }
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title != "Sluice" || dash.UID == "" {
		t.Errorf("title %q, uid %q; want Sluice and a uid", dash.Title, dash.UID)
	}
	ids := map[int]string{}
	for _, p := range dash.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q has no valid gridPos: %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("a query of panel %q does not use the datasource variable", p.Title)
			}
			if !strings.Contains(tg.Expr, `job=~"$job"`) {
				t.Errorf("query %q of panel %q is not scoped to $job", tg.Expr, p.Title)
			}
		}
	}
}

func TestPromqlMetrics(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`sum by (limit, outcome) (rate(sluice_decisions_total{job=~"$job",outcome="denied"}[$__rate_interval]))`, []string{"sluice_decisions_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y}"}[5m]))) / on (le) group_left b`, []string{"a_bucket", "b"}},
		{`time() - max(c) or vector(0) > bool 1e3`, []string{"c"}},
		{`label_values(sluice_config_limits{job=~"$job"}, job)`, []string{"sluice_config_limits"}},
		{`x offset 5m unless ignoring(a) y`, []string{"x", "y"}},
	} {
		if got := promqlMetrics(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("promqlMetrics(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// collectQueries appends every PromQL query of a dashboard: the expr of
// each target, and the query of each query variable.
func collectQueries(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch {
			case k == "expr":
				if s, ok := x.(string); ok {
					*out = append(*out, s)
				}
			case k == "query":
				if s, ok := x.(string); ok && strings.Contains(s, "(") {
					*out = append(*out, s)
				}
			}
			collectQueries(x, out)
		}
	case []any:
		for _, x := range v {
			collectQueries(x, out)
		}
	}
}

var (
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
	quoted      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces      = regexp.MustCompile(`\{[^}]*\}`)
	brackets    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	variable    = regexp.MustCompile(`\$\{?\w+\}?`)
	identifier  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords    = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}
)

// promqlMetrics returns the metric names a PromQL expression (or a
// Grafana label_values query) reads, in order of appearance: the
// identifiers left once strings, label matchers, ranges, groupings and
// variables are removed, that are neither functions nor keywords.
func promqlMetrics(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	s := quoted.ReplaceAllString(expr, " ")
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	s = variable.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent of a number such as 1e3
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function
		}
		if slices.Contains(keywords, strings.ToLower(name)) || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// exportedMetrics returns the series names a scrape in the Prometheus text
// format can hold: each family, and a histogram's or summary's _bucket,
// _sum and _count.
func exportedMetrics(t *testing.T, text string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			out[f[2]+"_sum"], out[f[2]+"_count"] = true, true
			if f[3] == "histogram" {
				out[f[2]+"_bucket"] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("the scrape has no metric families:\n%s", text)
	}
	return out
}
