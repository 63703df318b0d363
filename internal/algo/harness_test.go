package algo

import (
	"fmt"
	"slices"
	"time"
)

// algorithm names one of the six algorithms under test.
type algorithm int

const (
	tokenBucket algorithm = iota
	gcra
	leakyBucket
	fixedWindow
	slidingLog
	slidingWindow
)

// algorithms lists every algorithm, in the README's order.
var algorithms = []algorithm{tokenBucket, gcra, leakyBucket, fixedWindow, slidingLog, slidingWindow}

func (a algorithm) String() string {
	switch a {
	case tokenBucket:
		return "TokenBucket"
	case gcra:
		return "GCRA"
	case leakyBucket:
		return "LeakyBucket"
	case fixedWindow:
		return "FixedWindow"
	case slidingLog:
		return "SlidingLog"
	case slidingWindow:
		return "SlidingWindow"
	}
	return fmt.Sprintf("algorithm(%d)", int(a))
}

// bucket reports whether a belongs to the token-bucket family, whose
// capacity is the burst rather than the limit.
func (a algorithm) bucket() bool { return a <= leakyBucket }

// capacity returns the largest cost a ever admits under p.
func (a algorithm) capacity(p Params) int64 {
	if a.bucket() {
		return p.Burst
	}
	return p.Limit
}

// params returns p as the algorithm sees it: the window algorithms have no
// burst, so their Burst is their Limit.
func (a algorithm) params(p Params) Params {
	if !a.bucket() {
		p.Burst = p.Limit
	}
	return p
}

// limiter is one key under one algorithm: the exported function under test
// and the state it threads through. It is what a store does with one key.
type limiter struct {
	alg      algorithm
	p        Params
	maxDelay time.Duration // leaky bucket only; 0 means none
	tat      TAT
	win      Window
	log      Log
}

func newLimiter(a algorithm, p Params, maxDelay time.Duration) *limiter {
	if a != leakyBucket {
		maxDelay = 0
	}
	return &limiter{alg: a, p: a.params(p), maxDelay: maxDelay}
}

// decide runs one request through the algorithm and keeps the new state.
func (l *limiter) decide(now, cost int64) Verdict {
	var r Verdict
	switch l.alg {
	case tokenBucket:
		l.tat, r = TokenBucket(l.p, l.tat, now, cost)
	case gcra:
		// GCRA decides through Admit, as the stores' hot paths do, and
		// through TokenBucketTo when Admit declines: every test of GCRA
		// against the reference model checks Admit too.
		pp := Prepare(l.p)
		if ns, remaining, resetAfter, ok := pp.Admit(l.tat, now, cost); ok {
			l.tat, r = ns, Verdict{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
		} else {
			l.tat = pp.TokenBucketTo(l.tat, now, cost, &r)
		}
	case leakyBucket:
		l.tat, r = LeakyBucket(l.p, l.tat, now, cost, l.maxDelay)
	case fixedWindow:
		l.win = FixedWindow(l.p, l.win, now, cost, &r)
	case slidingWindow:
		l.win = SlidingWindow(l.p, l.win, now, cost, &r)
	case slidingLog:
		SlidingLog(l.p, &l.log, now, cost, &r)
	}
	return r
}

// peek returns the decision decide would make, leaving the state as it is.
func (l *limiter) peek(now, cost int64) Verdict {
	if l.alg == slidingLog {
		var r Verdict
		SlidingLogPeek(l.p, &l.log, now, cost, &r)
		return r
	}
	c := *l
	return c.decide(now, cost)
}

// clone returns an independent copy of l, state included.
func (l *limiter) clone() *limiter {
	c := *l
	c.log.buf = slices.Clone(l.log.buf)
	return &c
}

// fresh returns a limiter with l's settings and the initial state.
func (l *limiter) fresh() *limiter {
	return &limiter{alg: l.alg, p: l.p, maxDelay: l.maxDelay}
}

// expiry returns the instant, in µs, from which the state is back to
// initial according to the state itself (what a store uses to drop keys).
// It may lie in the past.
func (l *limiter) expiry() int64 {
	switch l.alg {
	case fixedWindow, slidingWindow:
		return l.win.Expire
	case slidingLog:
		return l.log.Expiry(l.p.Period)
	}
	return l.tat.Expiry()
}

// sameState reports whether l and m hold the same state at now: both back
// to initial by then (a state a store may drop), or equal.
func (l *limiter) sameState(m *limiter, now int64) bool {
	if l.expiry() <= now && m.expiry() <= now {
		return true
	}
	return l.tat == m.tat && l.win == m.win && slices.Equal(l.log.Entries(), m.log.Entries())
}

// Units in µs, for traces and parameters.
const (
	uMS   = int64(1000)
	uSec  = 1000 * uMS
	uMin  = 60 * uSec
	uHour = 60 * uMin
	uDay  = 24 * uHour
	uYear = 36525 * uDay / 100 // 365.25 days
)

// micros converts d to whole microseconds.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
