package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

const concurrencyTrace = "../../internal/simulate/testdata/concurrency.csv"

// TestSimulateConcurrencyJSONL replays the hand-worked trace of
// docs/simulate.md through a concurrency limit of 2: the third of three
// overlapping requests is refused, and one after the first ends admitted.
func TestSimulateConcurrencyJSONL(t *testing.T) {
	r := runQuiet(t, nil, "simulate", "--algorithm", "concurrency", "--limit", "2", "--trace", concurrencyTrace, "--format", "jsonl")
	const t0 = 1767268800000
	want := []jsonlLine{
		{T: t0, Key: "client-1", Cost: 1, Allowed: true, Remaining: 1, ResetAfterMS: 30000},
		{T: t0 + 500, Key: "client-1", Cost: 1, Allowed: true, Remaining: 0, ResetAfterMS: 30000},
		// Refused: retry_after is until the first lease would expire (31 s
		// after t0), reset_after until the second's.
		{T: t0 + 1000, Key: "client-1", Cost: 1, Allowed: false, Remaining: 0, RetryAfterMS: 29000, ResetAfterMS: 29500},
		// The first request ended at t0 + 3 s and was released first.
		{T: t0 + 3000, Key: "client-1", Cost: 1, Allowed: true, Remaining: 0, ResetAfterMS: 30000},
	}
	var got []jsonlLine
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var l jsonlLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, l)
	}
	if !slices.Equal(got, want) {
		t.Errorf("decisions:\n got %+v\nwant %+v", got, want)
	}

	// The lease bounds what a request holds: with a 2 s lease the first
	// request's units are free at t0 + 2 s, before it ends.
	r = runSluice(t, strings.NewReader("0,a,1,5000\n1999,a\n2000,a\n"), "simulate", "--algorithm", "concurrency",
		"--limit", "1", "--lease", "2s", "--format", "jsonl")
	if n := strings.Count(r.stdout, `"allowed":true`); r.code != 0 || n != 2 || !strings.Contains(r.stdout, `"t":1999,"key":"a","cost":1,"allowed":false`) {
		t.Errorf("lease 2s: exit %d, stderr %q, %d admitted, want 2:\n%s", r.code, r.stderr, n, r.stdout)
	}
}

func TestSimulateConcurrencyTable(t *testing.T) {
	trace := "t_ms,key,cost,duration_ms\n0,a,1,100\n0,a,1,100\n0,b,2\n50,a,1,0\n100,a,1\n100,b,3\n"
	r := runOK(t, strings.NewReader(trace), "simulate", "--algorithm", "concurrency", "--limit", "2", "--lease", "1s")
	testkit.WantAll(t, "stdout", r.stdout,
		"Trace: 6 requests, 1970-01-01T00:00:00Z to 1970-01-01T00:00:00.1Z (100ms), 2 keys\nPolicy: concurrency, limit 2 held at once, lease 1s\n",
		"\nKEY    REQUESTS  ADMITTED  DENIED  COST  COST ADMITTED  MAX HELD\n",
		"\na      4         3         1       4     3              2\n",
		"\nb      2         1         1       5     2              2\n",
		"1 of the denied requests cost more than the capacity, 2: they can never be admitted.",
	)
}

func TestSimulateConcurrencyPattern(t *testing.T) {
	// Two requests a second, each running 1.5 s: three at a time at most
	// wanted, two admitted.
	r := runOK(t, nil, "simulate", "--algorithm", "concurrency", "--limit", "2",
		"--pattern", "steady", "--rate", "2", "--duration", "10s", "--hold", "1500ms")
	// At 0, 0.5, 1, ... s: the one at 1 s finds two running (0 and 0.5)
	// and is refused; the one at 1.5 s finds the one at 0 ended. So every
	// third request is refused: 0 1 _ 3 4 _ ... of 20.
	testkit.WantAll(t, "stdout", r.stdout,
		"Pattern: steady, 2/s per key, 10s, 1 key, each request held 1.5s\n",
		"\nclient-1  20        14        6       20    14             2\n",
	)
}

func TestSimulateConcurrencyFlagErrors(t *testing.T) {
	base := []string{"simulate", "--algorithm", "concurrency", "--limit", "2"}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	checkUsageErrors(t, []usageErrorCase{
		{"period", with("--period", "1s"),
			"sluice: simulate: --period does not apply to --algorithm concurrency, which limits the units held at once, not a rate; give the lease with --lease (default 30s)\n"},
		{"burst", with("--burst", "3"),
			"sluice: simulate: --burst does not apply to --algorithm concurrency, which limits the units held at once, not a rate; give the lease with --lease (default 30s)\n"},
		{"lease for a rate", []string{"simulate", "--algorithm", "gcra", "--limit", "2", "--period", "1s", "--lease", "5s"},
			"sluice: simulate: --lease applies only to --algorithm concurrency; a rate algorithm takes --period\n"},
		{"lease for all", []string{"simulate", "--algorithm", "all", "--limit", "2", "--period", "1s", "--lease", "5s"},
			"sluice: simulate: --lease applies only to --algorithm concurrency; a rate algorithm takes --period\n"},
		{"zero lease", with("--lease", "0s"), "sluice: simulate: invalid policy: policy: period must be positive, got 0s\n"},
		{"periodic pattern", with("--pattern", "burst", "--rate", "5", "--duration", "1s"),
			"sluice: simulate: --pattern burst repeats every period, and a concurrency limit has none; use steady, poisson or ramp, or a trace\n"},
		{"hold without pattern", with("--hold", "1s"), "sluice: simulate: --hold describes generated traffic and needs --pattern\n"},
		{"sub-ms hold", with("--pattern", "steady", "--rate", "5", "--duration", "1s", "--hold", "1500us"),
			"sluice: simulate: --pattern steady: hold must be a whole number of milliseconds from 0, got 1.5ms\n"},
	})
}

// TestSimulateConcurrencyTraceErrors checks that a bad duration stops
// the run with the line and the field named.
func TestSimulateConcurrencyTraceErrors(t *testing.T) {
	for trace, want := range map[string]string{
		"t,k,c,d\n1,a,1,10\n2,a,1,soon\n": `sluice: simulate: trace <stdin>: line 3: duration_ms "soon" is not an integer`,
		"1,a,1,-1\n":                      `sluice: simulate: trace <stdin>: line 1: duration_ms -1 is negative`,
		"1,a,,10\n":                       `sluice: simulate: trace <stdin>: line 1: cost is empty (a line with a duration_ms needs its cost)`,
	} {
		for _, format := range []string{"table", "jsonl"} {
			r := runSluice(t, strings.NewReader(trace), "simulate", "--algorithm", "concurrency", "--limit", "2", "--format", format)
			if r.code != 1 || r.stderr != want+"\n" || r.stdout != "" {
				t.Errorf("%q, %s: exit %d, stderr %q, stdout %q; want 1, %q, nothing", trace, format, r.code, r.stderr, r.stdout, want)
			}
		}
	}
}

func TestSimulateConcurrencyChart(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "concurrency.svg")
	runQuiet(t, nil, "simulate", "--algorithm", "concurrency", "--limit", "2", "--trace", concurrencyTrace, "--chart", svg)
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"concurrency: admitted 3 of 4 requests, at most 2 units held at once",
		"limit: 2 held at once",
		"Trace: " + concurrencyTrace + ", 4 requests",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}
