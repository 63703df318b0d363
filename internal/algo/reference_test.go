package algo

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"time"
)

// This file holds the reference model: each algorithm written again,
// straight from its definition in docs/algorithms.md, with exact rationals
// (math/big) and none of the implementation's tricks. The token bucket keeps
// tokens and the time of the last update, the leaky bucket the instant V,
// the windows a count per window index, the sliding log a plain list.
//
// retry_after and reset_after are not computed by formula: the model answers
// "would this request pass at t'?" and "is the state initial at t'?", and
// the reference searches for the smallest whole number of milliseconds at
// which the answer becomes yes. Both answers are monotone in t' (waiting
// never hurts), which the property tests check on the implementation.
//
// A model is only asked about instants at or after the last request it was
// charged with: the definitions say nothing about clocks that run backwards.

// model is the reference state of one key under one algorithm.
type model interface {
	// capacity is the largest cost that can ever be admitted.
	capacity() int64
	// allows reports whether a request of cost c at t would be admitted.
	allows(t, c int64) bool
	// remaining is the number of cost units admissible at t, floored.
	remaining(t int64) int64
	// initial reports whether the state at t is the initial state.
	initial(t int64) bool
	// charge records an admitted request of cost c at t and returns how
	// long it must wait before it proceeds (nil when it need not).
	charge(t, c int64) *big.Rat
	// clone returns an independent copy.
	clone() model
}

// newModel returns the reference model of a under p, initial.
func newModel(a algorithm, p Params, maxDelay time.Duration) model {
	p = a.params(p)
	switch a {
	case tokenBucket, gcra:
		return &tokenBucketModel{p: p}
	case leakyBucket:
		return &leakyModel{p: p, maxDelay: maxDelay}
	case fixedWindow:
		return &fixedModel{p: p, counts: map[int64]int64{}}
	case slidingWindow:
		return &slidingWindowModel{p: p, counts: map[int64]int64{}}
	case slidingLog:
		return &slidingLogModel{p: p}
	}
	panic(fmt.Sprintf("newModel: unknown algorithm %v", a))
}

// refDecide is the reference decision for a request of cost c at t: it
// returns the model after the decision and the Verdict the definitions ask
// for. m itself is not changed.
//
// guess, typically the implementation's answer, only makes the searches
// cheap: a RetryAfter or ResetAfter d is the smallest one iff the predicate
// holds at d and not at d − 1 ms (the predicates are monotone), which takes
// two evaluations instead of a search; a wrong guess costs a full search.
func refDecide(m model, t, c int64, guess Verdict) (model, Verdict) {
	if c > m.capacity() {
		return m, Verdict{Remaining: m.remaining(t), RetryAfter: Never, ResetAfter: refResetAfter(m, t, guess.ResetAfter)}
	}
	if !m.allows(t, c) {
		r := Verdict{
			Remaining:  m.remaining(t),
			RetryAfter: refRetryAfter(m, t, c, guess.RetryAfter),
			ResetAfter: refResetAfter(m, t, guess.ResetAfter),
		}
		if l, ok := m.(*leakyModel); ok && l.fits(t, c) {
			// Refused only because the caller cannot wait that long: the
			// extension to the definition reports the wait it would have had.
			r.Delay = durationMicros(ceilRat(l.backlog(t)))
		}
		return m, r
	}
	n := m.clone()
	var delay time.Duration
	if d := n.charge(t, c); d != nil {
		delay = durationMicros(ceilRat(d))
	}
	return n, Verdict{Allowed: true, Remaining: n.remaining(t), ResetAfter: refResetAfter(n, t, guess.ResetAfter), Delay: delay}
}

// refRetryAfter returns the smallest whole number of milliseconds d ≥ 1 such
// that the request would pass at t + d.
func refRetryAfter(m model, t, c int64, guess time.Duration) time.Duration {
	d := smallest(1, guess.Milliseconds(), func(d int64) bool { return m.allows(t+d*uMS, c) })
	return durationMillis(d)
}

// durationMillis returns d milliseconds as a Duration, saturated at the
// largest whole number of milliseconds a Duration holds (292 years): the one
// place where the exact answer cannot be represented.
func durationMillis(d int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	return time.Duration(min(d, most)) * time.Millisecond
}

// durationMicros is durationMillis for microseconds.
func durationMicros(d int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Microsecond)
	return time.Duration(min(d, most)) * time.Microsecond
}

// refResetAfter returns the smallest whole number of milliseconds d ≥ 0 such
// that the state is initial at t + d.
func refResetAfter(m model, t int64, guess time.Duration) time.Duration {
	d := smallest(0, guess.Milliseconds(), func(d int64) bool { return m.initial(t + d*uMS) })
	return durationMillis(d)
}

// refExpiry returns the first microsecond at or after t at which the state
// is initial.
func refExpiry(m model, t, guess int64) int64 {
	return t + smallest(0, guess-t, func(d int64) bool { return m.initial(t + d) })
}

// smallest returns the smallest n ≥ lo for which the monotone predicate ok
// holds. When guess is that n (ok(guess) and, above lo, not ok(guess−1)) it
// is confirmed in two calls; otherwise smallest doubles and bisects. It
// panics when ok does not hold below 2^56, which no valid state needs.
func smallest(lo, guess int64, ok func(int64) bool) int64 {
	if guess >= lo && ok(guess) && (guess == lo || !ok(guess-1)) {
		return guess
	}
	if ok(lo) {
		return lo
	}
	bad, good := lo, max(lo, 1)
	for !ok(good) {
		if good > 1<<56 {
			panic("smallest: predicate never holds")
		}
		bad, good = good, 2*good
	}
	for good-bad > 1 {
		mid := bad + (good-bad)/2
		if ok(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// Rational helpers.

func rat(a int64) *big.Rat       { return new(big.Rat).SetInt64(a) }
func frac(a, b int64) *big.Rat   { return new(big.Rat).SetFrac64(a, b) }
func add(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func sub(a, b *big.Rat) *big.Rat { return new(big.Rat).Sub(a, b) }
func mul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }

// floorRat returns ⌊x⌋; it panics if that does not fit an int64.
func floorRat(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom()) // Euclidean: floor for a positive denominator
	if !q.IsInt64() {
		panic(fmt.Sprintf("floorRat(%v) overflows int64", x))
	}
	return q.Int64()
}

// ceilRat returns ⌈x⌉.
func ceilRat(x *big.Rat) int64 { return -floorRat(new(big.Rat).Neg(x)) }

func maxRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

// tokenBucketModel is token_bucket (and gcra): a bucket of capacity B, full
// at first, refilled continuously at L/P tokens per µs up to B; a request of
// cost c passes iff tokens ≥ c and then takes c tokens.
type tokenBucketModel struct {
	p       Params
	started bool
	tokens  *big.Rat // at last
	last    int64
}

func (m *tokenBucketModel) capacity() int64 { return m.p.Burst }

// tokensAt returns the tokens in the bucket at t ≥ last.
func (m *tokenBucketModel) tokensAt(t int64) *big.Rat {
	b := rat(m.p.Burst)
	if !m.started {
		return b
	}
	refill := mul(rat(t-m.last), frac(m.p.Limit, m.p.Period))
	return minRat(b, add(m.tokens, refill))
}

func (m *tokenBucketModel) allows(t, c int64) bool  { return m.tokensAt(t).Cmp(rat(c)) >= 0 }
func (m *tokenBucketModel) remaining(t int64) int64 { return max(floorRat(m.tokensAt(t)), 0) }
func (m *tokenBucketModel) initial(t int64) bool    { return m.tokensAt(t).Cmp(rat(m.p.Burst)) == 0 }

func (m *tokenBucketModel) charge(t, c int64) *big.Rat {
	m.tokens, m.last, m.started = sub(m.tokensAt(t), rat(c)), t, true
	return nil
}

func (m *tokenBucketModel) clone() model { c := *m; return &c }

// leakyModel is leaky_bucket: a queue drained at one cost unit per
// T = P/L. V is the instant at which everything accepted has left; a
// request of cost c at t is accepted iff (V − t) + c·T ≤ B·T, with
// V = max(V, t); it waits V − t and V grows by c·T. With maxDelay > 0 a
// request whose delay, rounded up to the µs, exceeds maxDelay is refused too.
type leakyModel struct {
	p        Params
	maxDelay time.Duration
	v        *big.Rat // nil: a new key
}

func (m *leakyModel) capacity() int64 { return m.p.Burst }

func (m *leakyModel) drain() *big.Rat { return frac(m.p.Period, m.p.Limit) } // T

// backlog returns V − t with V = max(V, t).
func (m *leakyModel) backlog(t int64) *big.Rat {
	if m.v == nil {
		return new(big.Rat)
	}
	return maxRat(sub(m.v, rat(t)), new(big.Rat))
}

// fits reports whether the queue has room for c at t: (V − t) + c·T ≤ B·T.
func (m *leakyModel) fits(t, c int64) bool {
	return add(m.backlog(t), mul(rat(c), m.drain())).Cmp(mul(rat(m.p.Burst), m.drain())) <= 0
}

func (m *leakyModel) allows(t, c int64) bool {
	if !m.fits(t, c) {
		return false
	}
	return m.maxDelay <= 0 || durationMicros(ceilRat(m.backlog(t))) <= m.maxDelay
}

func (m *leakyModel) remaining(t int64) int64 {
	units := new(big.Rat).Quo(m.backlog(t), m.drain())
	return max(floorRat(sub(rat(m.p.Burst), units)), 0)
}

func (m *leakyModel) initial(t int64) bool { return m.backlog(t).Sign() == 0 }

func (m *leakyModel) charge(t, c int64) *big.Rat {
	d := m.backlog(t)
	m.v = add(add(rat(t), d), mul(rat(c), m.drain()))
	return d
}

func (m *leakyModel) clone() model { c := *m; return &c }

// fixedModel is fixed_window: windows [k·P, (k+1)·P) since the Unix epoch;
// a request passes iff the count in its window plus its cost is at most L.
type fixedModel struct {
	p      Params
	counts map[int64]int64 // by window index k
}

func (m *fixedModel) capacity() int64         { return m.p.Limit }
func (m *fixedModel) index(t int64) int64     { return t / m.p.Period } // t ≥ 0
func (m *fixedModel) allows(t, c int64) bool  { return m.counts[m.index(t)]+c <= m.p.Limit }
func (m *fixedModel) remaining(t int64) int64 { return max(m.p.Limit-m.counts[m.index(t)], 0) }
func (m *fixedModel) initial(t int64) bool    { return m.counts[m.index(t)] == 0 }
func (m *fixedModel) charge(t, c int64) *big.Rat {
	k := m.index(t)
	m.counts[k] += c
	// Older windows never count again.
	maps.DeleteFunc(m.counts, func(w, _ int64) bool { return w < k })
	return nil
}

func (m *fixedModel) clone() model {
	return &fixedModel{p: m.p, counts: maps.Clone(m.counts)}
}

// slidingWindowModel is sliding_window: fixed_window's windows and the
// estimate prev·(P − (t − windowStart))/P + curr, exactly; a request passes
// iff estimate + c ≤ L.
type slidingWindowModel struct {
	p      Params
	counts map[int64]int64 // by window index k
}

func (m *slidingWindowModel) capacity() int64 { return m.p.Limit }

func (m *slidingWindowModel) estimate(t int64) *big.Rat {
	P := m.p.Period
	k := t / P // t ≥ 0
	prev, curr := m.counts[k-1], m.counts[k]
	elapsed := t - k*P
	return add(mul(rat(prev), frac(P-elapsed, P)), rat(curr))
}

func (m *slidingWindowModel) allows(t, c int64) bool {
	return add(m.estimate(t), rat(c)).Cmp(rat(m.p.Limit)) <= 0
}

func (m *slidingWindowModel) remaining(t int64) int64 {
	return max(floorRat(sub(rat(m.p.Limit), m.estimate(t))), 0)
}

func (m *slidingWindowModel) initial(t int64) bool { return m.estimate(t).Sign() == 0 }

func (m *slidingWindowModel) charge(t, c int64) *big.Rat {
	k := t / m.p.Period
	m.counts[k] += c
	maps.DeleteFunc(m.counts, func(w, _ int64) bool { return w < k-1 })
	return nil
}

func (m *slidingWindowModel) clone() model {
	return &slidingWindowModel{p: m.p, counts: maps.Clone(m.counts)}
}

// slidingLogModel is sliding_log: the list of admitted requests; one
// admitted at s counts at t iff t − s < P; a request passes iff the counted
// cost plus its own is at most L.
type slidingLogModel struct {
	p       Params
	entries []LogEntry
}

func (m *slidingLogModel) capacity() int64 { return m.p.Limit }

func (m *slidingLogModel) counted(t int64) int64 {
	var sum int64
	for _, e := range m.entries {
		if t-e.At < m.p.Period {
			sum += e.Cost
		}
	}
	return sum
}

func (m *slidingLogModel) allows(t, c int64) bool  { return m.counted(t)+c <= m.p.Limit }
func (m *slidingLogModel) remaining(t int64) int64 { return max(m.p.Limit-m.counted(t), 0) }
func (m *slidingLogModel) initial(t int64) bool    { return m.counted(t) == 0 }

func (m *slidingLogModel) charge(t, c int64) *big.Rat {
	kept := m.entries[:0:0]
	for _, e := range m.entries {
		if t-e.At < m.p.Period { // an entry that stopped counting never counts again
			kept = append(kept, e)
		}
	}
	if c > 0 {
		kept = append(kept, LogEntry{At: t, Cost: c})
	}
	m.entries = kept
	return nil
}

func (m *slidingLogModel) clone() model {
	return &slidingLogModel{p: m.p, entries: append([]LogEntry(nil), m.entries...)}
}
