package algo

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// The reference model's debits and refunds, from their definitions in
// docs/algorithms.md: a debit charges whether or not the units fit, a
// refund gives units back to the charges that still count, never past the
// initial state.

// debtModel is a model that can be debited and refunded.
type debtModel interface {
	model
	debit(t, c int64)
	// refund gives back c units charged at or before at (≤ t).
	refund(t, at, c int64)
}

// The bounds of a debt: a bucket owes at most MaxCount units beyond empty
// and takes at most MaxBacklogMicros to refill.
func bucketFloor(p Params) *big.Rat {
	byTime := sub(rat(p.Burst), mul(rat(MaxBacklogMicros), frac(p.Limit, p.Period)))
	return maxRat(rat(-MaxCount), byTime)
}

func (m *tokenBucketModel) debit(t, c int64) {
	m.tokens, m.last, m.started = maxRat(sub(m.tokensAt(t), rat(c)), bucketFloor(m.p)), t, true
}

func (m *tokenBucketModel) refund(t, _, c int64) {
	m.tokens, m.last, m.started = minRat(add(m.tokensAt(t), rat(c)), rat(m.p.Burst)), t, true
}

func (m *leakyModel) debit(t, c int64) {
	most := mul(sub(rat(m.p.Burst), bucketFloor(m.p)), m.drain())
	m.v = add(rat(t), minRat(add(m.backlog(t), mul(rat(c), m.drain())), most))
}

func (m *leakyModel) refund(t, _, c int64) {
	m.v = add(rat(t), maxRat(sub(m.backlog(t), mul(rat(c), m.drain())), new(big.Rat)))
}

func (m *fixedModel) debit(t, c int64) {
	m.charge(t, min(c, MaxCount-m.counts[m.index(t)]))
}

func (m *fixedModel) refund(t, at, c int64) {
	if k := m.index(t); m.index(at) == k {
		m.counts[k] = max(m.counts[k]-c, 0)
	}
}

func (m *slidingWindowModel) debit(t, c int64) {
	m.charge(t, min(c, MaxCount-m.counts[t/m.p.Period]))
}

func (m *slidingWindowModel) refund(t, at, c int64) {
	k, ka := t/m.p.Period, at/m.p.Period
	if ka == k || ka == k-1 {
		m.counts[ka] = max(m.counts[ka]-c, 0)
	}
}

func (m *slidingLogModel) debit(t, c int64) {
	m.charge(t, min(c, MaxCount-m.counted(t)))
}

func (m *slidingLogModel) refund(t, at, c int64) {
	for i := len(m.entries) - 1; i >= 0 && c > 0; i-- {
		e := &m.entries[i]
		if e.At <= at && t-e.At < m.p.Period {
			take := min(e.Cost, c)
			e.Cost -= take
			c -= take
		}
	}
}

// refDebit returns the model after a debit of c at t and its verdict.
func refDebit(m debtModel, t, c int64, guess Verdict) (debtModel, Verdict) {
	fitted := m.allows(t, c)
	if l, ok := m.(*leakyModel); ok {
		fitted = l.fits(t, c)
	}
	n := m.clone().(debtModel)
	n.debit(t, c)
	v := Verdict{Allowed: fitted, Remaining: n.remaining(t), ResetAfter: refResetAfter(n, t, guess.ResetAfter)}
	if !fitted {
		v.RetryAfter = refRetryAfter(n, t, 1, guess.RetryAfter)
	}
	return n, v
}

// refRefund returns the model after a refund of c charged at or before at,
// at t, and its verdict.
func refRefund(m debtModel, t, at, c int64, guess Verdict) (debtModel, Verdict) {
	n := m.clone().(debtModel)
	n.refund(t, at, c)
	return n, Verdict{Allowed: true, Remaining: n.remaining(t), ResetAfter: refResetAfter(n, t, guess.ResetAfter)}
}

// refCheck returns the verdict of a check at t: admitted iff a unit is
// left, charging nothing.
func refCheck(m model, t int64, guess Verdict) Verdict {
	v := Verdict{Allowed: m.allows(t, 1), Remaining: m.remaining(t), ResetAfter: refResetAfter(m, t, guess.ResetAfter)}
	if !v.Allowed {
		v.RetryAfter = refRetryAfter(m, t, 1, guess.RetryAfter)
	}
	return v
}

func (l *limiter) debit(now, cost int64) Verdict {
	var r Verdict
	switch l.alg {
	case tokenBucket, gcra, leakyBucket:
		pp := Prepare(l.p)
		l.tat, r = pp.Debit(l.tat, now, cost)
	case fixedWindow:
		l.win, r = FixedWindowDebit(l.p, l.win, now, cost)
	case slidingWindow:
		l.win, r = SlidingWindowDebit(l.p, l.win, now, cost)
	case slidingLog:
		r = SlidingLogDebit(l.p, &l.log, now, cost)
	}
	return r
}

func (l *limiter) refund(now, at, cost int64) Verdict {
	var r Verdict
	switch l.alg {
	case tokenBucket, gcra, leakyBucket:
		pp := Prepare(l.p)
		l.tat, r = pp.Refund(l.tat, now, cost)
	case fixedWindow:
		l.win, r = FixedWindowRefund(l.p, l.win, now, at, cost)
	case slidingWindow:
		l.win, r = SlidingWindowRefund(l.p, l.win, now, at, cost)
	case slidingLog:
		r = SlidingLogRefund(l.p, &l.log, now, at, cost)
	}
	return r
}

func (l *limiter) check(now int64) Verdict {
	return Check(l.peek(now, 0), l.peek(now, 1))
}

// TestDebtDifferential runs random traces of admissions, checks, debits
// (often past the limit) and refunds (of charges made at earlier
// instants, some of whose windows have moved on) through each algorithm
// and through the reference model, comparing every field of every verdict
// and the instant the state says it is back to initial.
func TestDebtDifferential(t *testing.T) {
	eachTrace(t, 30, 30, func(t *testing.T, rng *rand.Rand, _ int, a algorithm, p Params) {
		debtTrace(t, rng, a, p, 400)
	})
}

func debtTrace(t *testing.T, rng *rand.Rand, a algorithm, p Params, n int) {
	t.Helper()
	lim := newLimiter(a, p, 0)
	m := newModel(a, p, 0).(debtModel)
	capacity := a.capacity(lim.p)
	T := max(p.Period/p.Limit, 1)
	now := origin2026 + rng.Int64N(uDay)
	var times []int64 // instants of earlier operations, for refunds
	for i := range n {
		switch k := rng.IntN(100); {
		case k < 40:
		case k < 70:
			now += rng.Int64N(3 * T)
		case k < 90:
			now += rng.Int64N(2*p.Period + 1)
		default:
			now += rng.Int64N(3 * uHour)
		}
		times = append(times, now)
		var op string
		var got, want Verdict
		var next model
		switch k := rng.IntN(100); {
		case k < 35:
			cost := 1 + rng.Int64N(5)
			if rng.IntN(5) == 0 {
				cost = capacity
			}
			op = fmt.Sprintf("decide(cost=%d)", cost)
			got = lim.decide(now, cost)
			next, want = refDecide(m, now, cost, got)
		case k < 45:
			op = "check"
			got = lim.check(now)
			next, want = m, refCheck(m, now, got)
		case k < 75:
			cost := 1 + rng.Int64N(3*capacity)
			if capacity > 1000 {
				cost = 1 + rng.Int64N(10)
				if rng.IntN(4) == 0 {
					cost = capacity + rng.Int64N(capacity)
				}
			}
			op = fmt.Sprintf("debit(cost=%d)", cost)
			got = lim.debit(now, cost)
			next, want = refDebit(m, now, cost, got)
		default:
			cost := 1 + rng.Int64N(max(min(capacity, 20), 1))
			at := times[len(times)-1-rng.IntN(min(len(times), 8))]
			op = fmt.Sprintf("refund(at=now-%d, cost=%d)", now-at, cost)
			got = lim.refund(now, at, cost)
			next, want = refRefund(m, now, at, cost, got)
		}
		if got != want {
			t.Fatalf("op %d at t=%d: %v %s = %+v, want %+v (params %+v)", i, now, a, op, got, want, lim.p)
		}
		m = next.(debtModel)
		if got, want := max(lim.expiry(), now), refExpiry(m, now, max(lim.expiry(), now)); got != want {
			t.Fatalf("op %d: after %v %s at t=%d the state expires at %d, want %d (params %+v)", i, a, op, now, got, want, lim.p)
		}
	}
}

// TestDebtBounds debits far past every bound: the state saturates, no
// value overflows, and the key is refused until the bounded debt is
// repaid.
func TestDebtBounds(t *testing.T) {
	const huge = int64(1) << 62
	for _, p := range namedParams {
		for _, a := range algorithms {
			lim := newLimiter(a, p, 0)
			now := origin2026
			for range 3 {
				v := lim.debit(now, huge)
				if v.Allowed || v.Remaining != 0 || v.RetryAfter <= 0 || v.ResetAfter <= 0 {
					t.Fatalf("%v %+v: debit of 2^62 = %+v, want refused, 0 remaining, a retry and a reset", a, lim.p, v)
				}
			}
			switch a {
			case fixedWindow, slidingWindow:
				if lim.win.Curr != MaxCount {
					t.Errorf("%v %+v: window count after huge debits = %d, want %d", a, lim.p, lim.win.Curr, uint32(MaxCount))
				}
			case slidingLog:
				if lim.log.Total() != MaxCount {
					t.Errorf("%v %+v: log total after huge debits = %d, want %d", a, lim.p, lim.log.Total(), int64(MaxCount))
				}
			default:
				pp := Prepare(lim.p)
				bq, _ := lim.tat.backlog(now)
				mq, _ := pp.mostBacklog()
				if bq != mq || bq > MaxBacklogMicros {
					t.Errorf("%v %+v: backlog after huge debits = %dµs, want the most, %dµs", a, lim.p, bq, mq)
				}
				if units := pp.ViewTAT(lim.tat, now).Queued.Whole; units > lim.p.Burst+MaxCount {
					t.Errorf("%v %+v: %d units queued, more than burst + MaxCount", a, lim.p, units)
				}
			}
			// A refund of everything brings the key back to initial.
			if v := lim.refund(now, now, huge); !v.Allowed || v.Remaining != a.capacity(lim.p) {
				t.Errorf("%v %+v: refund of everything = %+v, want allowed with full capacity", a, lim.p, v)
			}
			if e := lim.expiry(); e > now {
				t.Errorf("%v %+v: after refunding everything the state expires at %d, after now %d", a, lim.p, e, now)
			}
		}
	}
}

// TestCheckIsNotCharged: a check never changes the state.
func TestCheckIsNotCharged(t *testing.T) {
	p := Params{Limit: 3, Burst: 3, Period: uSec}
	for _, a := range algorithms {
		lim := newLimiter(a, p, 0)
		now := origin2026
		for i := range 10 {
			if v := lim.check(now); !v.Allowed || v.Remaining != 3 {
				t.Fatalf("%v: check %d on a fresh key = %+v, want allowed with 3 remaining", a, i, v)
			}
		}
		lim.decide(now, 3)
		if v := lim.check(now); v.Allowed || v.RetryAfter <= 0 || v.Remaining != 0 {
			t.Fatalf("%v: check on a spent key = %+v, want refused with a retry", a, v)
		}
	}
}

// TestDebtExtremeCosts debits costs whose products with T, or sums with
// the count, would overflow: they saturate, never fit, and report no
// negative Remaining.
func TestDebtExtremeCosts(t *testing.T) {
	for _, tc := range []struct {
		a    algorithm
		p    Params
		cost int64
	}{
		{tokenBucket, Params{Limit: 3, Burst: 2, Period: 240 * uHour}, 30958682},
		{gcra, Params{Limit: 1, Burst: 1, Period: MaxPeriodMicros}, 1 << 40},
		{slidingLog, Params{Limit: 5, Period: uSec}, math.MaxInt64},
		{fixedWindow, Params{Limit: 5, Period: uSec}, math.MaxInt64},
		{slidingWindow, Params{Limit: 5, Period: uSec}, math.MaxInt64},
	} {
		for _, first := range []int64{1, math.MaxInt64} {
			lim := newLimiter(tc.a, tc.p, 0)
			lim.debit(origin2026, first)
			if v := lim.debit(origin2026, tc.cost); v.Allowed || v.Remaining != 0 || v.RetryAfter <= 0 {
				t.Errorf("%v %+v: debit %d after %d = %+v, want not fitted, 0 remaining, a retry", tc.a, lim.p, tc.cost, first, v)
			}
		}
	}
}
