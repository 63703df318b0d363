package algo

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

// propertySets returns the parameter sets the property tests run on: the
// named ones and n random ones drawn from seed.
func propertySets(seed uint64, n int) []Params {
	rng := rand.New(rand.NewPCG(seed, 7))
	sets := append([]Params(nil), namedParams...)
	for range n {
		sets = append(sets, randomParams(rng))
	}
	return sets
}

// forEachTrace runs f on a seeded random trace for every algorithm in algs
// and every property parameter set, each in a named subtest.
func forEachTrace(t *testing.T, algs []algorithm, shape traceShape, f func(t *testing.T, l *limiter, trace []event)) {
	t.Helper()
	for i, p := range propertySets(uint64(len(t.Name())), 8) {
		for _, a := range algs {
			t.Run(fmt.Sprintf("%v/L=%d,B=%d,P=%dus", a, p.Limit, p.Burst, p.Period), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(a)))
				var maxDelay time.Duration
				if a == leakyBucket && i%3 == 2 {
					maxDelay = time.Duration(rng.Int64N(4*max(p.Period/p.Limit, 1))+1) * time.Microsecond
				}
				l := newLimiter(a, p, maxDelay)
				sh := shape
				sh.start = origin2026 + rng.Int64N(uDay)
				f(t, l, randomTrace(rng, l.p, a.capacity(l.p), sh))
			})
		}
	}
}

// admitted is one request a trace admitted.
type admitted struct {
	t, cost int64
	delay   time.Duration
}

// run decides every event of trace (peeks only ask) and returns the
// requests admitted with a positive cost.
func run(l *limiter, trace []event) []admitted {
	var out []admitted
	for _, e := range trace {
		if e.peek {
			l.peek(e.t, e.cost)
			continue
		}
		if r := l.decide(e.t, e.cost); r.Allowed && e.cost > 0 {
			out = append(out, admitted{e.t, e.cost, r.Delay})
		}
	}
	return out
}

// mulLess reports whether a·b < c·d for non-negative a, b, c, d.
func mulLess(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || (h1 == h2 && l1 < l2)
}

// TestTokenBucketRateBound checks that the token-bucket family never admits
// more than B + L·Δ/P in any interval of length Δ: for every pair of
// admitted requests i ≤ j, the cost admitted from i to j satisfies
// (sum − B)·P ≤ L·(t_j − t_i).
func TestTokenBucketRateBound(t *testing.T) {
	shape := traceShape{n: 400, maxGap: uHour}
	forEachTrace(t, []algorithm{tokenBucket, gcra, leakyBucket}, shape, func(t *testing.T, l *limiter, trace []event) {
		got := run(l, trace)
		for i := range got {
			sum := int64(0)
			for j := i; j < len(got); j++ {
				sum += got[j].cost
				if sum > l.p.Burst && mulLess(l.p.Limit, got[j].t-got[i].t, sum-l.p.Burst, l.p.Period) {
					t.Fatalf("admitted %d from t=%d to t=%d: more than B + L·Δ/P = %d + %d·%dµs/%dµs",
						sum, got[i].t, got[j].t, l.p.Burst, l.p.Limit, got[j].t-got[i].t, l.p.Period)
				}
			}
		}
	})
}

// TestWindowBounds checks that sliding_log never admits more than L in any
// interval shorter than P (every [t−P+1µs, t]), and that fixed_window and
// sliding_window never admit more than L in one aligned window.
func TestWindowBounds(t *testing.T) {
	shape := traceShape{n: 400, maxGap: uHour}
	forEachTrace(t, []algorithm{slidingLog, fixedWindow, slidingWindow}, shape, func(t *testing.T, l *limiter, trace []event) {
		got := run(l, trace)
		for j := range got {
			sum := int64(0)
			for i := j; i >= 0; i-- {
				if l.alg == slidingLog && got[j].t-got[i].t >= l.p.Period {
					break
				}
				if l.alg != slidingLog && WindowStart(got[i].t, l.p.Period) != WindowStart(got[j].t, l.p.Period) {
					break
				}
				sum += got[i].cost
			}
			if sum > l.p.Limit {
				t.Fatalf("%v admitted %d in the period ending at t=%d, more than L = %d", l.alg, sum, got[j].t, l.p.Limit)
			}
		}
	})
}

// TestLeakySpacing checks that a leaky bucket's admitted requests start
// (t + Delay) in order and spaced by at least c_prev·T. Delays are rounded
// up to the µs, so two rounded starts can be up to 1µs closer than the
// exact ones: the check is start_j − start_i > c_i·T − 1µs, that is
// (start_j − start_i + 1µs)·L > c_i·P, which implies a spacing of at least
// ⌊c_i·T⌋ µs. TestDifferential checks that every Delay is the reference
// model's exact V − t rounded up, so the exact starts are the definition's,
// spaced by at least c_i·T.
func TestLeakySpacing(t *testing.T) {
	shape := traceShape{n: 400, maxGap: uHour}
	forEachTrace(t, []algorithm{leakyBucket}, shape, func(t *testing.T, l *limiter, trace []event) {
		got := run(l, trace)
		for k := 1; k < len(got); k++ {
			prev, cur := got[k-1], got[k]
			gap := (cur.t + micros(cur.delay)) - (prev.t + micros(prev.delay))
			if gap < 0 || !mulLess(prev.cost, l.p.Period, gap+1, l.p.Limit) {
				t.Fatalf("requests admitted at t=%d (cost %d, delay %v) and t=%d (delay %v) start %dµs apart, want more than %d·%d/%d − 1µs",
					prev.t, prev.cost, prev.delay, cur.t, cur.delay, gap, prev.cost, l.p.Period, l.p.Limit)
			}
		}
	})
}

// TestTokenBucketFamilyAgrees checks that GCRA decides exactly as
// TokenBucket, that the leaky bucket admits exactly what the token bucket
// admits (with the same Remaining, RetryAfter and ResetAfter), and that the
// Prepared methods equal the plain functions, on traces whose clock also
// steps back.
func TestTokenBucketFamilyAgrees(t *testing.T) {
	shape := traceShape{n: 400, maxGap: uHour, backwards: 20}
	forEachTrace(t, []algorithm{tokenBucket}, shape, func(t *testing.T, l *limiter, trace []event) {
		p := l.p
		pp := Prepare(p)
		var tb, g, lb, ptb, plb TAT
		for _, e := range trace {
			var rtb, rg, rlb, rptb, rplb Verdict
			tb, rtb = TokenBucket(p, tb, e.t, e.cost)
			g, rg = GCRA(p, g, e.t, e.cost)
			lb, rlb = LeakyBucket(p, lb, e.t, e.cost, 0)
			ptb, rptb = pp.TokenBucket(ptb, e.t, e.cost)
			plb, rplb = pp.LeakyBucket(plb, e.t, e.cost, 0)
			if rg != rtb || g != tb {
				t.Fatalf("GCRA(t=%d, cost=%d) = %+v, %+v, want TokenBucket's %+v, %+v", e.t, e.cost, g, rg, tb, rtb)
			}
			if rptb != rtb || ptb != tb {
				t.Fatalf("Prepared.TokenBucket(t=%d, cost=%d) = %+v, %+v, want %+v, %+v", e.t, e.cost, ptb, rptb, tb, rtb)
			}
			if rplb != rlb || plb != lb {
				t.Fatalf("Prepared.LeakyBucket(t=%d, cost=%d) = %+v, %+v, want %+v, %+v", e.t, e.cost, plb, rplb, lb, rlb)
			}
			noDelay := rlb
			noDelay.Delay = 0
			if noDelay != rtb || lb != tb {
				t.Fatalf("LeakyBucket(t=%d, cost=%d) = %+v, %+v, want TokenBucket's %+v, %+v apart from Delay", e.t, e.cost, lb, rlb, tb, rtb)
			}
		}
	})
}

// TestRetryAfterTight checks, for every denied request that a wait can
// help, that the same request passes at t + RetryAfter and, when
// RetryAfter > 1ms, not 1ms earlier (RetryAfter is at least 1ms).
func TestRetryAfterTight(t *testing.T) {
	shape := traceShape{n: 300, maxGap: uHour}
	forEachTrace(t, algorithms, shape, func(t *testing.T, l *limiter, trace []event) {
		for _, e := range trace {
			r := l.decide(e.t, e.cost)
			if r.Allowed || r.RetryAfter == Never {
				continue
			}
			if r.RetryAfter < time.Millisecond || r.RetryAfter%time.Millisecond != 0 {
				t.Fatalf("%v(t=%d, cost=%d).RetryAfter = %v, want a whole number of ms ≥ 1ms", l.alg, e.t, e.cost, r.RetryAfter)
			}
			at := e.t + micros(r.RetryAfter)
			if got := l.peek(at, e.cost); !got.Allowed {
				t.Fatalf("%v(t=%d, cost=%d) = %+v, but at t + RetryAfter it is %+v", l.alg, e.t, e.cost, r, got)
			}
			if r.RetryAfter > time.Millisecond {
				if got := l.peek(at-uMS, e.cost); got.Allowed {
					t.Fatalf("%v(t=%d, cost=%d) = %+v, but 1ms before t + RetryAfter it is already %+v", l.alg, e.t, e.cost, r, got)
				}
			}
		}
	})
}

// TestResetAfterTight checks, after every decision, that the state is
// initial at t + ResetAfter: a cost-0 peek shows the whole capacity, any
// request is decided exactly as for a new key, and the state's own expiry
// (what a store drops keys by) has passed; and that it is not initial 1ms
// earlier when ResetAfter ≥ 1ms.
func TestResetAfterTight(t *testing.T) {
	shape := traceShape{n: 300, maxGap: uHour}
	forEachTrace(t, algorithms, shape, func(t *testing.T, l *limiter, trace []event) {
		capacity := l.alg.capacity(l.p)
		for _, e := range trace {
			r := l.decide(e.t, e.cost)
			if r.ResetAfter < 0 || r.ResetAfter%time.Millisecond != 0 {
				t.Fatalf("%v(t=%d, cost=%d).ResetAfter = %v, want a whole number of ms ≥ 0", l.alg, e.t, e.cost, r.ResetAfter)
			}
			at := e.t + micros(r.ResetAfter)
			if got := l.peek(at, 0); got.Remaining != capacity {
				t.Fatalf("%v(t=%d, cost=%d) = %+v, but at t + ResetAfter a peek is %+v, want Remaining %d",
					l.alg, e.t, e.cost, r, got, capacity)
			}
			if x := l.expiry(); x > at {
				t.Fatalf("%v(t=%d, cost=%d) = %+v, but the state expires at %d, after t + ResetAfter = %d", l.alg, e.t, e.cost, r, x, at)
			}
			for _, c := range []int64{1, capacity} {
				used, fresh := l.clone(), l.fresh()
				if got, want := used.decide(at, c), fresh.decide(at, c); got != want || !used.sameState(fresh, at) {
					t.Fatalf("%v at t + ResetAfter = %d, cost %d: %+v, want the new key's %+v", l.alg, at, c, got, want)
				}
			}
			if r.ResetAfter >= time.Millisecond {
				if got := l.peek(at-uMS, 0); got.Remaining >= capacity {
					t.Fatalf("%v(t=%d, cost=%d) = %+v, but 1ms before t + ResetAfter a peek is already %+v", l.alg, e.t, e.cost, r, got)
				}
				if x := l.expiry(); x <= at-uMS {
					t.Fatalf("%v(t=%d, cost=%d) = %+v, but the state expires at %d, 1ms before t + ResetAfter or earlier", l.alg, e.t, e.cost, r, x)
				}
			}
		}
	})
}

// TestExpiredStateIsInitial checks what lets a store drop a key: from the
// state's expiry on, every decision equals a new key's, and so does the
// state it leaves.
func TestExpiredStateIsInitial(t *testing.T) {
	shape := traceShape{n: 300, maxGap: uHour}
	forEachTrace(t, algorithms, shape, func(t *testing.T, l *limiter, trace []event) {
		rng := rand.New(rand.NewPCG(uint64(len(trace)), 11))
		for _, e := range trace {
			l.decide(e.t, e.cost)
			at := max(l.expiry(), e.t) + rng.Int64N(3)*rng.Int64N(l.p.Period+1)
			c := rng.Int64N(l.alg.capacity(l.p) + 2)
			used, fresh := l.clone(), l.fresh()
			if got, want := used.decide(at, c), fresh.decide(at, c); got != want || !used.sameState(fresh, at) {
				t.Fatalf("%v(t=%d, cost=%d) after expiry %d: %+v, want the new key's %+v", l.alg, at, c, l.expiry(), got, want)
			}
		}
	})
}

// TestClockStepsBack checks what the algorithms promise for a clock that
// steps backwards, which the definitions leave open: nothing panics,
// Remaining stays within [0, capacity], the other fields keep their ranges,
// and for a given state the decision only gets more lenient with time
// (Allowed at t1 implies Allowed at t2 ≥ t1, and Remaining does not drop),
// so an earlier clock never grants more than a later one. A cost-0 request
// changes no later decision.
func TestClockStepsBack(t *testing.T) {
	shape := traceShape{n: 300, maxGap: 10 * uYear, backwards: 4}
	forEachTrace(t, algorithms, shape, func(t *testing.T, l *limiter, trace []event) {
		rng := rand.New(rand.NewPCG(uint64(len(trace)), 13))
		capacity := l.alg.capacity(l.p)
		check := func(at, cost int64, r Verdict) {
			t.Helper()
			switch {
			case r.Remaining < 0 || r.Remaining > capacity,
				r.Allowed && r.RetryAfter != 0,
				!r.Allowed && r.RetryAfter != Never && r.RetryAfter < time.Millisecond,
				r.ResetAfter < 0, r.Delay < 0:
				t.Fatalf("%v(t=%d, cost=%d) = %+v: a field is out of range", l.alg, at, cost, r)
			}
		}
		for _, e := range trace {
			t1 := e.t - rng.Int64N(2*l.p.Period+1)
			t2 := t1 + rng.Int64N(3*l.p.Period+1)
			r1, r2 := l.peek(t1, e.cost), l.peek(t2, e.cost)
			check(t1, e.cost, r1)
			check(t2, e.cost, r2)
			if r1.Allowed && !r2.Allowed {
				t.Fatalf("%v(t=%d, cost=%d) = %+v, but later, at t=%d, %+v", l.alg, t1, e.cost, r1, t2, r2)
			}
			if q1, q2 := l.peek(t1, 0), l.peek(t2, 0); q1.Remaining > q2.Remaining {
				t.Fatalf("%v(t=%d, cost=0) = %+v, but later, at t=%d, %+v", l.alg, t1, q1, t2, q2)
			}
			asked := l.clone()
			asked.decide(t1, 0)
			check(e.t, e.cost, l.decide(e.t, e.cost))
			asked.decide(e.t, e.cost)
			if later := e.t + rng.Int64N(l.p.Period+1); l.peek(later, 1) != asked.peek(later, 1) {
				t.Fatalf("%v: a cost-0 request at t=%d changed the decision at t=%d: %+v, want %+v",
					l.alg, t1, later, asked.peek(later, 1), l.peek(later, 1))
			}
		}
	})
}
