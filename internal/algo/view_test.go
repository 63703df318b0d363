package algo

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
)

// rat returns f as a big.Rat.
func (f Frac) rat() *big.Rat {
	r := new(big.Rat).SetFrac64(f.Num, f.Den)
	return r.Add(r, new(big.Rat).SetInt64(f.Whole))
}

// checkFrac fails unless f is well formed and equals want.
func checkFrac(t *testing.T, what string, f Frac, want *big.Rat) {
	t.Helper()
	if f.Den < 1 || f.Num < 0 || f.Num >= f.Den || f.Whole < 0 {
		t.Fatalf("%s = %+v, not a well-formed fraction", what, f)
	}
	if f.rat().Cmp(want) != 0 {
		t.Fatalf("%s = %+v = %s, want %s", what, f, f.rat().RatString(), want.RatString())
	}
}

// TestViews drives each algorithm with random requests and, at random
// instants, compares its View with the definitions in docs/algorithms.md
// computed with big rationals, and with the Remaining the algorithm itself
// reports for a cost-0 request.
func TestViews(t *testing.T) {
	for i, p := range propertySets(11, 16) {
		t.Run(fmt.Sprintf("L=%d,B=%d,P=%dus", p.Limit, p.Burst, p.Period), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			pp := Prepare(p)
			wp := Params{Limit: p.Limit, Burst: p.Limit, Period: p.Period}
			var tat TAT
			var fw, sw Window
			var lg Log
			now := origin2026 + rng.Int64N(p.Period)
			L, P := big.NewRat(p.Limit, 1), big.NewRat(p.Period, 1)
			for range 300 {
				now += rng.Int64N(max(2*p.Period/max(p.Limit, 1), 2))
				cost := rng.Int64N(max(p.Burst/4, 1)) + 1

				// The token bucket: queued = clamp(TAT − now, 0, B·P/L)·L/P.
				v := pp.ViewTAT(tat, now)
				backlog := new(big.Rat).SetFrac64(tat.Frac, p.Limit)
				backlog.Add(backlog, big.NewRat(tat.At-now, 1))
				if backlog.Sign() < 0 {
					backlog.SetInt64(0)
				}
				horizon := new(big.Rat).Mul(big.NewRat(p.Burst, 1), new(big.Rat).Quo(P, L))
				if backlog.Cmp(horizon) > 0 {
					backlog = horizon
				}
				queued := new(big.Rat).Quo(new(big.Rat).Mul(backlog, L), P)
				checkFrac(t, "Queued", v.Queued, queued)
				checkFrac(t, "Tokens", v.Tokens, new(big.Rat).Sub(big.NewRat(p.Burst, 1), queued))
				if _, r := pp.TokenBucket(tat, now, 0); v.Tokens.Whole != r.Remaining {
					t.Fatalf("Tokens %+v, but the bucket's Remaining is %d", v.Tokens, r.Remaining)
				}
				ceil := new(big.Int).Quo(new(big.Int).Add(backlog.Num(), new(big.Int).Sub(backlog.Denom(), big.NewInt(1))), backlog.Denom())
				if v.Backlog != ceil.Int64() {
					t.Fatalf("Backlog = %d, want %s", v.Backlog, ceil)
				}
				tat, _ = pp.TokenBucket(tat, now, cost)

				// The fixed window: the count of the window holding now.
				v = ViewFixedWindow(wp, fw, now)
				var r Verdict
				if FixedWindow(wp, fw, now, 0, &r); v.Current != wp.Limit-r.Remaining || v.WindowStart != WindowStart(now, p.Period) {
					t.Fatalf("fixed window view %+v, but Remaining is %d", v, r.Remaining)
				}
				checkFrac(t, "fixed Estimate", v.Estimate, big.NewRat(v.Current, 1))
				fw = FixedWindow(wp, fw, now, min(cost, wp.Limit), &r)

				// The sliding window: prev·(P − x)/P + curr.
				v = ViewSlidingWindow(wp, sw, now)
				est := new(big.Rat).Mul(big.NewRat(v.Previous, 1), big.NewRat(p.Period-(now-v.WindowStart), p.Period))
				est.Add(est, big.NewRat(v.Current, 1))
				checkFrac(t, "sliding Estimate", v.Estimate, est)
				if SlidingWindow(wp, sw, now, 0, &r); r.Remaining != max(wp.Limit-v.Estimate.Whole-sign(v.Estimate.Num), 0) {
					t.Fatalf("sliding window view %+v, but Remaining is %d", v, r.Remaining)
				}
				sw = SlidingWindow(wp, sw, now, min(cost, wp.Limit), &r)

				// The sliding log: the entries admitted less than P ago.
				v = ViewLog(wp, &lg, now)
				var n int
				var sum, oldest, newest int64
				for _, e := range lg.Entries() {
					if now-e.At < p.Period {
						if n == 0 {
							oldest = e.At
						}
						n, sum, newest = n+1, sum+e.Cost, e.At
					}
				}
				if v.Entries != n || v.Counted != sum || v.Oldest != oldest || v.Newest != newest {
					t.Fatalf("log view %+v, want %d entries of cost %d from %d to %d", v, n, sum, oldest, newest)
				}
				SlidingLog(wp, &lg, now, min(cost, wp.Limit), &r)
			}
		})
	}
}

func sign(x int64) int64 {
	if x > 0 {
		return 1
	}
	return 0
}
