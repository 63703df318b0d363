package algo

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

// event is one request of a trace: at t (µs since the epoch), of the given
// cost; a peek asks without charging (SlidingLogPeek, or a discarded state).
type event struct {
	t    int64
	cost int64
	peek bool
}

// origin2026 is 2026-03-14 12:00:00 UTC in µs, a multiple of every period
// from 1µs to one hour.
var origin2026 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixMicro()

// namedParams are the fixed parameter sets every randomized test covers:
// round and non-round rates, bursts above and below the limit, T = P/L
// both whole and fractional in µs, and the extremes of the ranges.
var namedParams = []Params{
	{Limit: 100, Burst: 100, Period: uMin},
	{Limit: 7, Burst: 7, Period: uSec},         // T = 142857.142857… µs
	{Limit: 3, Burst: 3, Period: 10 * uSec},    // T = 3333333.33… µs
	{Limit: 10, Burst: 1, Period: uSec},        // burst below the limit
	{Limit: 7, Burst: 1000, Period: uSec},      // burst far above it
	{Limit: 13, Burst: 20, Period: 7*uSec + 3}, // nothing divides anything
	{Limit: 3, Burst: 2, Period: 333_333},      // period not a whole ms
	{Limit: 1, Burst: 5, Period: uHour},        // slow
	{Limit: 1, Burst: 1, Period: 1},            // the shortest period
	{Limit: 5, Burst: 5, Period: uMS},          // T = 200 µs
	{Limit: 1_000_000_000, Burst: 1_000_000_000, Period: uYear},
	{Limit: 999_999_937, Burst: 3, Period: uYear}, // prime limit, tiny burst
	{Limit: 6, Burst: 4, Period: 10 * uYear},      // the longest period
}

// randomParams draws valid Params: limit and period log-uniform over their
// whole ranges, burst within a factor 100 of the limit.
func randomParams(rng *rand.Rand) Params {
	for {
		p := Params{
			Limit:  logUniform(rng, 1, MaxLimit),
			Period: logUniform(rng, 1, uYear),
		}
		p.Burst = min(max(p.Limit*logUniform(rng, 1, 100)/logUniform(rng, 1, 100), 1), MaxLimit)
		if p.Check() == nil {
			return p
		}
	}
}

// logUniform returns an integer in [lo, hi] with a roughly uniform
// logarithm: a uniform bit length, then a uniform value of that length.
func logUniform(rng *rand.Rand, lo, hi int64) int64 {
	for {
		n := rng.Int64N(int64(1) << rng.IntN(bits.Len64(uint64(hi))+1))
		if n >= lo && n <= hi {
			return n
		}
	}
}

// traceShape says how a random trace is drawn.
type traceShape struct {
	n     int   // number of events
	start int64 // time of the first event
	// maxGap bounds the long gaps (the short ones are scaled to T and P).
	maxGap int64
	// backwards, when positive, makes about one event in backwards step
	// back in time instead of forward (only for tests that expect it).
	backwards int
}

// randomTrace draws a trace for capacity c under p: mostly costs 1..5,
// sometimes 0 (asking only), exactly c, or c+1 (never admissible); gaps of
// 0, of a few T = P/L, of up to 2P, and of up to shape.maxGap.
func randomTrace(rng *rand.Rand, p Params, capacity int64, shape traceShape) []event {
	T := max(p.Period/p.Limit, 1)
	t := shape.start
	out := make([]event, 0, shape.n)
	for range shape.n {
		var gap int64
		switch k := rng.IntN(100); {
		case k < 30:
			gap = 0
		case k < 60:
			gap = rng.Int64N(3 * T)
		case k < 75:
			gap = rng.Int64N(1000)
		case k < 92:
			gap = rng.Int64N(2*p.Period + 1)
		default:
			gap = rng.Int64N(shape.maxGap + 1)
		}
		if shape.backwards > 0 && rng.IntN(shape.backwards) == 0 {
			gap = -rng.Int64N(2*p.Period + 2*T + 1)
		}
		t += gap
		var cost int64
		switch k := rng.IntN(100); {
		case k < 5:
			cost = 0
		case k < 8:
			cost = capacity
		case k < 10:
			cost = capacity + 1
		default:
			cost = 1 + rng.Int64N(5)
		}
		out = append(out, event{t: t, cost: cost, peek: rng.IntN(10) == 0})
	}
	return out
}

// differential runs trace through the implementation of a and through the
// reference model and fails on the first field that differs: every field of
// every Verdict, and the instant the state says it is back to initial.
func differential(t *testing.T, a algorithm, p Params, maxDelay time.Duration, trace []event) {
	t.Helper()
	lim := newLimiter(a, p, maxDelay)
	m := newModel(a, p, lim.maxDelay)
	for i, e := range trace {
		var got Verdict
		if e.peek {
			got = lim.peek(e.t, e.cost)
		} else {
			got = lim.decide(e.t, e.cost)
		}
		next, want := refDecide(m, e.t, e.cost, got)
		if got != want {
			t.Fatalf("event %d: %v(t=%d, cost=%d) = %+v, want %+v (params %+v, maxDelay %v)",
				i, a, e.t, e.cost, got, want, lim.p, lim.maxDelay)
		}
		if e.peek {
			continue
		}
		m = next
		if got, want := max(lim.expiry(), e.t), refExpiry(m, e.t, max(lim.expiry(), e.t)); got != want {
			t.Fatalf("event %d: after %v(t=%d, cost=%d) the state expires at %d, want %d (params %+v)",
				i, a, e.t, e.cost, got, want, lim.p)
		}
	}
}

// TestDifferential compares every field of every decision of the six
// algorithms with the reference model on seeded random traces: the named
// parameter sets and as many random ones, about 30,000 decisions in all.
func TestDifferential(t *testing.T) {
	eachTrace(t, 3, 1, func(t *testing.T, rng *rand.Rand, i int, a algorithm, p Params) {
		var maxDelay time.Duration
		if a == leakyBucket && i%2 == 1 {
			// Half the leaky buckets refuse requests that would wait
			// longer than a random bound up to the full horizon.
			h, _, _ := mulDivmod(p.Burst, p.Period, p.Limit)
			maxDelay = time.Duration(rng.Int64N(min(h, 1<<40)+1)) * time.Microsecond
		}
		shape := traceShape{n: 400, start: origin2026 + rng.Int64N(uDay), maxGap: 3 * uHour}
		differential(t, a, p, maxDelay, randomTrace(rng, p, a.capacity(a.params(p)), shape))
	})
}

// eachTrace runs f as a subtest for every algorithm under each of the
// named parameter sets and 13 random ones (drawn from the random stream
// sets of seed 2026), with the set's index and a random source of its own
// for the trace (the stream traces of a seed made of the set and the
// algorithm), so that every subtest replays alone.
func eachTrace(t *testing.T, sets, traces uint64, f func(t *testing.T, rng *rand.Rand, i int, a algorithm, p Params)) {
	rng := rand.New(rand.NewPCG(2026, sets))
	ps := append([]Params(nil), namedParams...)
	for range 13 {
		ps = append(ps, randomParams(rng))
	}
	for i, p := range ps {
		for _, a := range algorithms {
			seed := uint64(i)<<8 | uint64(a)
			t.Run(fmt.Sprintf("%v/L=%d,B=%d,P=%dus", a, p.Limit, p.Burst, p.Period), func(t *testing.T) {
				f(t, rand.New(rand.NewPCG(seed, traces)), i, a, p)
			})
		}
	}
}
