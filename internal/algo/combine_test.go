package algo

import (
	"testing"
	"time"
)

// result is a defined type of sluice.Decision's struct, as sluice.Decision
// is.
type result decision

func TestCombine(t *testing.T) {
	ms := time.Millisecond
	ok := func(limit, remaining int64, reset, delay time.Duration) result {
		return result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset, Delay: delay}
	}
	no := func(limit, remaining int64, retry, reset time.Duration) result {
		return result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
	}
	for _, c := range []struct {
		name    string
		ds      []result
		want    result
		decider int
	}{
		{"none", nil, result{}, -1},
		{"one", []result{ok(10, 3, 5*ms, 0)}, ok(10, 3, 5*ms, 0), 0},
		{"the fewest remaining decides", []result{ok(10, 3, 5*ms, 0), ok(1000, 2, 9*ms, 0), ok(5, 4, ms, 0)}, ok(1000, 2, 9*ms, 0), 1},
		{"a tie keeps the first", []result{ok(10, 2, 0, 0), ok(20, 2, 0, 0)}, ok(10, 2, 0, 0), 0},
		{"the denying one decides", []result{ok(10, 0, 100*ms, 0), no(1000, 5, 3*ms, 7*ms)}, no(1000, 5, 3*ms, 100*ms), 1},
		{"the longest wait decides", []result{no(10, 0, 100*ms, 100*ms), no(1000, 0, time.Hour, time.Hour), no(5, 0, ms, ms)}, no(1000, 0, time.Hour, time.Hour), 1},
		{"never beats any wait", []result{no(10, 0, time.Hour, ms), no(3, 2, Never, 0), no(5, 0, 24*time.Hour, 0)}, no(3, 2, Never, ms), 1},
		{"never after never keeps the first", []result{no(3, 2, Never, 0), no(4, 1, Never, 0)}, no(3, 2, Never, 0), 0},
		{"equal waits keep the first", []result{no(3, 2, ms, 0), no(4, 1, ms, 0)}, no(3, 2, ms, 0), 0},
		{"the longest delay", []result{ok(10, 5, 0, 20*ms), ok(10, 6, 0, 30*ms)}, ok(10, 5, 0, 30*ms), 0},
		{"degraded spreads", []result{ok(10, 5, 0, 0), {Allowed: true, Limit: 10, Remaining: 6, Degraded: true}}, result{Allowed: true, Limit: 10, Remaining: 5, Degraded: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Combine(c.ds); got != c.want {
				t.Errorf("Combine(%+v) = %+v, want %+v", c.ds, got, c.want)
			}
			if got, want := Decider(c.ds), c.decider; got != want {
				t.Errorf("Decider(%+v) = %d, want %d", c.ds, got, want)
			}
		})
	}
}

// TestRankAsPrecedes: Rank.Precedes orders every pair of a set of
// decisions (admitted and refused, equal and different waits and
// remainders, Never) as Precedes does.
func TestRankAsPrecedes(t *testing.T) {
	var ds []result
	for _, allowed := range []bool{false, true} {
		for _, retry := range []time.Duration{0, time.Second, 2 * time.Second, Never} {
			for _, remaining := range []int64{-1, 0, 3} {
				ds = append(ds, result{Allowed: allowed, RetryAfter: retry, Remaining: remaining})
			}
		}
	}
	rank := func(d result) Rank { return Rank{d.Allowed, d.RetryAfter, d.Remaining} }
	for _, d := range ds {
		for _, e := range ds {
			if got, want := rank(d).Precedes(rank(e)), Precedes(d, e); got != want {
				t.Errorf("Rank(%+v).Precedes(%+v) = %v, Precedes = %v", d, e, got, want)
			}
		}
	}
}
