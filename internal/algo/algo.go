// Package algo holds Sluice's six rate-limiting algorithms as pure, exact
// state transitions.
//
// Every function here has the shape (params, state, now, cost) -> (state',
// Verdict): it reads no clock, does no I/O and keeps no state of its own.
// Those on the stores' hot paths (FixedWindow, SlidingWindow, SlidingLog,
// the Prepared ...To methods) return the new state and write the Verdict
// to a *Verdict, their last argument, so that it is not copied back
// through the stack (docs/BENCHMARKS.md, "Why the hot path is shaped as it
// is"). Time
// is an int64 count of microseconds since the Unix epoch, the resolution of
// Redis's TIME, so the Lua scripts of the Redis store can mirror these
// functions decision by decision.
//
// Arithmetic is exact. Rates are rationals (L units per P microseconds), and
// the token-bucket family keeps its single timestamp as a whole number of
// microseconds plus a remainder counted in 1/L µs, so no rounding ever
// accumulates. Products that can exceed 64 bits (B·P with B = 1e9 and P = a
// year) go through 128-bit intermediates from math/bits.
//
// Callers must pass validated Params (see Params.Check) and a cost of at least
// 0. Cost 0 asks what the state is without charging anything.
//
// Times from 0 to 2^62 µs (1970 to about 148,000 AD) give exact results:
// no intermediate value overflows there. Outside that range no function
// panics and Remaining stays within [0, capacity], but the results are
// unspecified.
//
// A clock that steps backwards never makes a decision more lenient than the
// state allows at the latest instant it has seen: for a given state,
// admission and Remaining only grow with now. The window algorithms read an
// instant before the stored window as its start, the sliding log one before
// its newest entry as that entry's time, and the token-bucket family, which
// keeps one timestamp and not the latest now, reads a backlog longer than
// the bucket (possible only with such a clock) as an empty bucket.
package algo

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Limits on Params, chosen so that every intermediate value fits its type.
const (
	// MaxLimit is the largest limit or burst, in cost units.
	MaxLimit = 1_000_000_000
	// MaxPeriodMicros is the longest period: ten years of 365.25 days.
	MaxPeriodMicros = 10 * 36525 * 24 * 3600 * 1_000_000 / 100
	// MaxHorizonMicros bounds B·P/L, the time a full bucket takes to refill
	// from empty (about 36,000 years).
	MaxHorizonMicros = 1 << 60
)

// Params is a validated policy in the algorithms' units.
type Params struct {
	Limit  int64 // L: cost units admitted per period
	Burst  int64 // B: capacity of the token-bucket family; equals Limit for windows
	Period int64 // P in microseconds
	// Cal, when set, places the windows of the window algorithms on a
	// civil calendar instead of multiples of Period since the Unix epoch;
	// Period is then Cal.Unit.Longest() and only Check reads it.
	Cal *Calendar
}

// bounds returns the windows around now: the calendar's, or windows of
// length Period aligned to multiples of it since the Unix epoch.
func (p *Params) bounds(now int64) Bounds {
	if p.Cal != nil {
		return p.Cal.Bounds(now)
	}
	return periodic(now, p.Period)
}

// Check reports whether p lies within the ranges every function here
// supports, with an error that names the offending field.
func (p Params) Check() error {
	switch {
	case p.Limit < 1:
		return fmt.Errorf("limit must be at least 1, got %d", p.Limit)
	case p.Limit > MaxLimit:
		return fmt.Errorf("limit must be at most %d, got %d", MaxLimit, p.Limit)
	case p.Burst < 1:
		return fmt.Errorf("burst must be at least 1, got %d", p.Burst)
	case p.Burst > MaxLimit:
		return fmt.Errorf("burst must be at most %d, got %d", MaxLimit, p.Burst)
	case p.Period < 1:
		return fmt.Errorf("period must be at least 1µs, got %v", time.Duration(p.Period)*time.Microsecond)
	case p.Period > MaxPeriodMicros:
		return fmt.Errorf("period must be at most 10 years, got %v", time.Duration(p.Period)*time.Microsecond)
	}
	if q, _, ok := mulDivmod(p.Burst, p.Period, p.Limit); !ok || q > MaxHorizonMicros {
		return errors.New("burst×period/limit exceeds 36,000 years")
	}
	return nil
}

// Verdict is an algorithm's decision on one request: whether it is
// admitted, and the figures a store reports with it (a sluice.Decision
// without the Limit and Degraded that the store adds). Durations are whole
// milliseconds except Delay, which is exact to the microsecond (rounded
// up). A duration longer than a time.Duration holds (about 292 years,
// which only a bucket that takes longer than that to refill can reach)
// saturates at the largest whole number of milliseconds, or microseconds
// for Delay, that it holds.
type Verdict struct {
	Allowed bool
	// Blocked and Offence, set only by a Penalty's functions, report a
	// refusal by a block, and one that started it (sluice.Decision's).
	Blocked, Offence bool
	// Remaining is how many cost units could be admitted right now, after
	// this decision, floored and never negative.
	Remaining int64
	// RetryAfter is, for a denied request, the smallest whole number of
	// milliseconds (at least 1) after which the same request would be
	// allowed if nothing else happened; 0 when allowed; Never when the cost
	// exceeds the capacity and no wait can help.
	RetryAfter time.Duration
	// ResetAfter is the time, rounded up to whole milliseconds, until the
	// key's state is back to initial if nothing else happens.
	ResetAfter time.Duration
	// Delay is how long an admitted request must wait before it proceeds
	// (leaky bucket only).
	Delay time.Duration
}

// Never is the RetryAfter of a request whose cost exceeds the capacity.
const Never time.Duration = -1

// mulDivmod returns a·b / d and a·b mod d for non-negative a, b and positive
// d. ok is false when the quotient does not fit an int64.
func mulDivmod(a, b, d int64) (q, r int64, ok bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(d) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(d))
	if uq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// mulAddDivCeil returns ceil((a·b + c) / d) for non-negative a, b, c and
// positive d, when the result is known to fit an int64.
func mulAddDivCeil(a, b, c, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(c), 0)
	hi += carry
	q, r := bits.Div64(hi, lo, uint64(d))
	if r != 0 {
		q++
	}
	return int64(q)
}

// Largest whole numbers of milliseconds and microseconds a Duration holds.
const (
	maxDurationMillis = math.MaxInt64 / int64(time.Millisecond)
	maxDurationMicros = math.MaxInt64 / int64(time.Microsecond)
)

// ceilMillis converts a non-negative microsecond count to a Duration rounded
// up to whole milliseconds, saturating at the largest one a Duration holds.
func ceilMillis(us int64) time.Duration {
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return time.Duration(min(ms, maxDurationMillis)) * time.Millisecond
}

// ceilMicros converts a non-negative microsecond count to a Duration,
// saturating at the largest whole number of µs a Duration holds.
func ceilMicros(us int64) time.Duration {
	return time.Duration(min(us, maxDurationMicros)) * time.Microsecond
}

// retryMillis is ceilMillis with the floor of 1 ms that RetryAfter promises.
func retryMillis(us int64) time.Duration {
	if us <= 1000 {
		return time.Millisecond
	}
	return ceilMillis(us)
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// WindowStart returns the start of the period-long window holding now;
// windows are aligned to multiples of the period since the Unix epoch.
func WindowStart(now, period int64) int64 {
	return floorDiv(now, period) * period
}
