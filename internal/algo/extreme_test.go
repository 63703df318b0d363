package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestCheck checks the ranges Params.Check accepts and that each error names
// the field at fault.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		want string // a part of the error; "" for valid Params
	}{
		{"smallest", Params{Limit: 1, Burst: 1, Period: 1}, ""},
		{"a billion a year", Params{Limit: MaxLimit, Burst: MaxLimit, Period: uYear}, ""},
		{"a billion in ten years", Params{Limit: MaxLimit, Burst: MaxLimit, Period: MaxPeriodMicros}, ""},
		{"a billion per µs", Params{Limit: MaxLimit, Burst: MaxLimit, Period: 1}, ""},
		{"burst far above limit", Params{Limit: 1, Burst: 36_000, Period: uYear}, ""},
		{"refill horizon exactly 2^60µs", Params{Limit: 1, Burst: 1 << 20, Period: 1 << 40}, ""},
		{"limit 0", Params{Limit: 0, Burst: 1, Period: uSec}, "limit must be at least 1, got 0"},
		{"limit negative", Params{Limit: -5, Burst: 1, Period: uSec}, "limit must be at least 1, got -5"},
		{"limit too large", Params{Limit: MaxLimit + 1, Burst: 1, Period: uSec}, "limit must be at most 1000000000, got 1000000001"},
		{"burst 0", Params{Limit: 1, Burst: 0, Period: uSec}, "burst must be at least 1, got 0"},
		{"burst too large", Params{Limit: 1, Burst: MaxLimit + 1, Period: uSec}, "burst must be at most 1000000000"},
		{"period 0", Params{Limit: 1, Burst: 1, Period: 0}, "period must be at least 1µs, got 0s"},
		{"period negative", Params{Limit: 1, Burst: 1, Period: -uSec}, "period must be at least 1µs, got -1s"},
		{"period over ten years", Params{Limit: 1, Burst: 1, Period: MaxPeriodMicros + 1}, "period must be at most 10 years"},
		{"refill horizon 2^60µs + 2^40µs", Params{Limit: 1, Burst: 1<<20 + 1, Period: 1 << 40}, "burst×period/limit"},
		{"a billion burst at 1 a year", Params{Limit: 1, Burst: MaxLimit, Period: uYear}, "burst×period/limit"},
		{"everything extreme", Params{Limit: math.MinInt64, Burst: math.MaxInt64, Period: math.MinInt64}, "limit must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("%+v.Check() = %v, want nil", tt.p, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("%+v.Check() = %v, want an error containing %q", tt.p, err, tt.want)
			}
		})
	}
}

// Durations at the extremes.
const (
	yearD   = time.Duration(uYear) * time.Microsecond // 365.25 days
	longest = time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	longUS  = time.Duration(math.MaxInt64/int64(time.Microsecond)) * time.Microsecond
)

// TestExtremeTimelines works through decisions at the ends of the ranges:
// a billion a year, a bucket that takes 1000 years to refill (longer than a
// time.Duration holds: its durations saturate), and a ten-year period
// whose windows are aligned to 1970 + 10k years.
func TestExtremeTimelines(t *testing.T) {
	// T = 1y/10^9 = 31557.6µs.
	billion := []row{
		{0, MaxLimit, true, 0, 0, yearD, 0},
		// Short by T − 1µs = 31556.6µs → 32ms.
		{1 * us, 1, false, 0, 32 * ms, yearD, 0},
		// Short by 0.6µs; the bucket is full 31557µs less than a year on.
		{31557 * us, 1, false, 0, 1 * ms, yearD - 31*ms, 0},
		{31558 * us, 1, true, 0, 0, yearD, 0},
		{10 * yearD, MaxLimit, true, 0, 0, yearD, 0},
	}
	// The same for a queue: the request that passes waits for the billion.
	leakyBillion := append([]row(nil), billion...)
	leakyBillion[3].delay = yearD - 31558*us
	// H = 1000 years: ResetAfter saturates; one token a year.
	millennium := []row{
		{0, 1000, true, 0, 0, longest, 0},
		{0, 1, false, 0, yearD, longest, 0},
		{0, 1001, false, 0, Never, longest, 0},
		{yearD, 1, true, 0, 0, longest, 0},
	}
	leakyMillennium := []row{
		{0, 1000, true, 0, 0, longest, 0},
		// The request waits 999 years: the delay saturates too.
		{yearD, 1, true, 0, 0, longest, longUS},
		{yearD, 1, false, 0, yearD, longest, 0},
	}
	const decadeP = 10 * uYear
	// origin2026 lies in the window [2020-01-01, 2030-01-01) of 10 years
	// (1970 + 50y); it ends 119966400s after the origin.
	const toEnd = 119_966_400 * sec
	decade := time.Duration(decadeP) * time.Microsecond
	runTimelines(t, []algorithm{tokenBucket, gcra}, []timeline{
		{name: "a billion a year", p: Params{Limit: MaxLimit, Burst: MaxLimit, Period: uYear}, rows: billion},
		{name: "1000 years to refill", p: Params{Limit: 1, Burst: 1000, Period: uYear}, rows: millennium},
		{name: "ten-year period", p: Params{Limit: 6, Burst: 6, Period: decadeP}, rows: []row{
			{0, 6, true, 0, 0, decade, 0},
			{0, 1, false, 0, decade / 6, decade, 0}, // T = 20 months, exact in µs
		}},
	})
	runTimelines(t, []algorithm{leakyBucket}, []timeline{
		{name: "a billion a year", p: Params{Limit: MaxLimit, Burst: MaxLimit, Period: uYear}, rows: leakyBillion},
		{name: "1000 years to refill", p: Params{Limit: 1, Burst: 1000, Period: uYear}, rows: leakyMillennium},
	})
	runTimelines(t, []algorithm{fixedWindow}, []timeline{
		{name: "ten-year period", p: Params{Limit: 6, Burst: 6, Period: decadeP}, rows: []row{
			{0, 6, true, 0, 0, toEnd, 0},
			{0, 1, false, 0, toEnd, toEnd, 0},
			{toEnd, 1, true, 5, 0, decade, 0},
		}},
	})
	runTimelines(t, []algorithm{slidingWindow}, []timeline{
		{name: "ten-year period", p: Params{Limit: 6, Burst: 6, Period: decadeP}, rows: []row{
			{0, 6, true, 0, 0, toEnd + decade, 0},
			// At 2030 prev = 6 weighs 6: 1 fits after P/6.
			{toEnd, 1, false, 0, decade / 6, decade, 0},
			{toEnd + decade/6, 1, true, 0, 0, 2*decade - decade/6, 0},
		}},
	})
	runTimelines(t, []algorithm{slidingLog}, []timeline{
		{name: "ten-year period", p: Params{Limit: 6, Burst: 6, Period: decadeP}, rows: []row{
			{0, 6, true, 0, 0, decade, 0},
			{toEnd, 1, false, 0, decade - toEnd, decade - toEnd, 0},
			{decade, 6, true, 0, 0, decade, 0},
		}},
	})
}

// extremeParams are parameter sets at the ends of the supported ranges.
var extremeParams = []Params{
	{Limit: MaxLimit, Burst: MaxLimit, Period: uYear},
	{Limit: MaxLimit, Burst: MaxLimit, Period: MaxPeriodMicros},
	{Limit: MaxLimit, Burst: 1, Period: MaxPeriodMicros},
	{Limit: 1, Burst: 36_000, Period: uYear},                    // refills in 36,000 years
	{Limit: 1, Burst: 1 << 20, Period: 1 << 40},                 // horizon exactly 2^60µs
	{Limit: 999_999_937, Burst: 999_999_929, Period: uYear - 1}, // primes, nothing divides
	{Limit: MaxLimit, Burst: MaxLimit, Period: 1},
	{Limit: 1, Burst: MaxLimit, Period: 1},
	{Limit: 3, Burst: 1, Period: MaxPeriodMicros},
}

// TestExtremeDifferential compares every algorithm with the reference model
// at the extreme parameters, from 2026, 9999 and 100,000 AD, with gaps of
// up to ten years.
func TestExtremeDifferential(t *testing.T) {
	origins := []int64{
		origin2026,
		time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC).UnixMicro(),
		time.Date(100_000, 6, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
	}
	for i, p := range extremeParams {
		if err := p.Check(); err != nil {
			t.Fatalf("%+v.Check() = %v", p, err)
		}
		for j, origin := range origins {
			for _, a := range algorithms {
				t.Run(fmt.Sprintf("%v/L=%d,B=%d,P=%dus/%d", a, p.Limit, p.Burst, p.Period, j), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(i), uint64(j)<<8|uint64(a)))
					shape := traceShape{n: 60, start: origin, maxGap: 10 * uYear}
					differential(t, a, p, 0, randomTrace(rng, a.params(p), a.capacity(a.params(p)), shape))
				})
			}
		}
	}
}

// TestAnyTimeNoPanic feeds times far outside the supported range (before
// 1970, near the ends of int64) to every algorithm in several states: the
// results are unspecified there, but nothing may panic and Remaining must
// stay within [0, capacity].
func TestAnyTimeNoPanic(t *testing.T) {
	times := []int64{math.MinInt64, math.MinInt64 + 1, -uYear, -1, 0, 1, origin2026, 1 << 62, math.MaxInt64 - uYear, math.MaxInt64}
	for _, p := range append(extremeParams, namedParams...) {
		for _, a := range algorithms {
			l := newLimiter(a, p, time.Second)
			capacity := a.capacity(l.p)
			for _, t1 := range times {
				for _, t2 := range times {
					for _, c := range []int64{0, 1, capacity, capacity + 1} {
						for _, at := range []int64{t1, t2} {
							if r := l.decide(at, c); r.Remaining < 0 || r.Remaining > capacity {
								t.Fatalf("%v with %+v: decide(t=%d, cost=%d) = %+v, Remaining out of [0, %d]", a, l.p, at, c, r, capacity)
							}
						}
					}
				}
			}
		}
	}
}
