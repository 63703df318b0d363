package simulate

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// maxInPeriod is the definition, computed by brute force: the most cost
// admitted for one key within any interval [s, s+P); it suffices to try
// every s that is the time of an admitted request.
func maxInPeriod(admitted []Request, period time.Duration) int64 {
	best := int64(0)
	for _, a := range admitted {
		sum := int64(0)
		for _, b := range admitted {
			if b.Key == a.Key && b.T >= a.T && time.Duration(b.T-a.T)*time.Millisecond < period {
				sum += b.Cost
			}
		}
		best = max(best, sum)
	}
	return best
}

func TestComparisonMaxCostInPeriod(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	periods := []time.Duration{time.Millisecond, 1500 * time.Microsecond, 7 * time.Millisecond, 100 * time.Millisecond, 2500 * time.Microsecond}
	for trial := range 300 {
		period := periods[trial%len(periods)]
		var reqs []Request
		var admitted []Request
		now := int64(rng.IntN(1000))
		ds := make([]sluice.Decision, 1)
		cmp := NewComparison([]sluice.Policy{sluice.SlidingLog(1000, period)})
		for range 1 + rng.IntN(60) {
			now += int64(rng.IntN(4))
			r := Request{T: now, Key: string(rune('a' + rng.IntN(3))), Cost: 1 + int64(rng.IntN(5))}
			ds[0] = sluice.Decision{Allowed: rng.IntN(3) > 0}
			if ds[0].Allowed {
				admitted = append(admitted, r)
			}
			reqs = append(reqs, r)
			cmp.Add(r, ds)
		}
		got := cmp.Stats()[0].MaxCostInPeriod
		if want := maxInPeriod(admitted, period); got != want {
			t.Fatalf("period %v, requests %v, admitted %v: MaxCostInPeriod = %d, want %d", period, reqs, admitted, got, want)
		}
	}
}

func TestNearestRank(t *testing.T) {
	ms := time.Millisecond
	counts := func(vals ...time.Duration) (int64, int64, map[time.Duration]int64) {
		zero, m := int64(0), make(map[time.Duration]int64)
		for _, v := range vals {
			if v == 0 {
				zero++
			} else {
				m[v]++
			}
		}
		return int64(len(vals)), zero, m
	}
	seq := func(n int) []time.Duration { // 1ms, 2ms, ... n ms
		var vs []time.Duration
		for i := 1; i <= n; i++ {
			vs = append(vs, time.Duration(i)*ms)
		}
		return vs
	}
	tests := []struct {
		name string
		vals []time.Duration
		want time.Duration
	}{
		{"none", nil, 0},
		{"one", []time.Duration{5 * ms}, 5 * ms},
		{"all zero", []time.Duration{0, 0, 0}, 0},
		{"1 to 100", seq(100), 99 * ms},                                           // rank ⌈99⌉ = 99
		{"1 to 101", seq(101), 100 * ms},                                          // rank ⌈99.99⌉ = 100
		{"1 to 200", seq(200), 198 * ms},                                          // rank 198
		{"1 to 10", seq(10), 10 * ms},                                             // rank ⌈9.9⌉ = 10
		{"zeros then one", append(make([]time.Duration, 99), 7*ms), 0},            // n 100, rank 99: a zero
		{"zeros then two", append(make([]time.Duration, 98), 7*ms, 8*ms), 7 * ms}, // rank 99: 7ms
		{"repeated", []time.Duration{3 * ms, 3 * ms, 3 * ms, 9 * ms}, 9 * ms},     // rank ⌈3.96⌉ = 4
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, zero, m := counts(tt.vals...)
			if got := nearestRank(99, n, zero, m); got != tt.want {
				t.Errorf("nearestRank(99, %v) = %v, want %v", tt.vals, got, tt.want)
			}
		})
	}
}

func TestComparisonWriteTable(t *testing.T) {
	ps := allPolicies(2, time.Second, 3)
	cmp := NewComparison(ps)
	reqs := []Request{{T: 1000, Key: "a", Cost: 1}, {T: 1000, Key: "a", Cost: 1}, {T: 1000, Key: "a", Cost: 1}, {T: 1500, Key: "b", Cost: 2}}
	err := Run(t.Context(), &sliceSource{reqs: reqs}, ps, func(r Request, ds []sluice.Decision) error {
		cmp.Add(r, ds)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := table(t, cmp)
	testkit.WantAll(t, "table", got,
		"Trace: 4 requests, 1970-01-01T00:00:01Z to 1970-01-01T00:00:01.5Z (500ms), 2 keys\n",
		"Policy: limit 2 per 1s, burst 3 for token_bucket, gcra, leaky_bucket\n",
		"ALGORITHM       ADMITTED  DENIED  COST ADMITTED  MAX COST IN ANY 1s  P99 DELAY\n",
		"token_bucket    4         0       5              3                   0s\n",
		"leaky_bucket    4         0       5              3                   1s\n",
		"fixed_window    3         1       4              2                   0s\n",
	)
}

// TestComparisonWriteTableMixed checks the table of policies that do not
// share a limit: each row names its policy.
func TestComparisonWriteTableMixed(t *testing.T) {
	ps := []sluice.Policy{sluice.TokenBucket(2, time.Second, 0), sluice.TokenBucket(5, time.Minute, 1)}
	cmp := NewComparison(ps)
	cmp.Add(Request{T: 1, Key: "a", Cost: 1}, []sluice.Decision{{Allowed: true}, {Allowed: false}})
	got := table(t, cmp)
	testkit.WantAll(t, "table", got,
		"Trace: 1 request, at 1970-01-01T00:00:00.001Z, 1 key\n\n",
		"MAX COST IN ANY PERIOD: the most cost admitted for one key within any interval of the policy's period,\n"+
			"counted when admitted (a --chart row adds up all keys, and counts leaky_bucket's requests when they start).\n",
	)
	lines := strings.Split(got, "\n")
	for i, want := range [][]string{
		{"POLICY", "ADMITTED", "DENIED", "COST ADMITTED", "MAX COST IN ANY PERIOD", "P99 DELAY"},
		{"token_bucket, limit 2 per 1s, burst 2", "1", "0", "1", "1", "0s"},
		{"token_bucket, limit 5 per 1m0s, burst 1", "0", "1", "0", "0", "0s"},
	} {
		if got := columns(lines[2+i]); !slices.Equal(got, want) {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
}

// table returns the table that w (a Comparison or a KeySummary) writes.
func table(t *testing.T, w interface{ WriteTable(io.Writer) error }) string {
	t.Helper()
	var buf bytes.Buffer
	if err := w.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// columns splits a tabwriter row on runs of two or more spaces.
func columns(line string) []string {
	var out []string
	for _, f := range strings.Split(strings.TrimSpace(line), "  ") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
