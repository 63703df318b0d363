package algo

import "time"

// TAT is the state of the token-bucket family (token_bucket, gcra and
// leaky_bucket): the theoretical arrival time of GCRA, the instant at which
// the bucket will be full again (equivalently, at which a leaky bucket's
// queue will be empty). It is the exact rational At + Frac/Limit
// microseconds, with 0 ≤ Frac < Limit. The zero value is a full bucket.
type TAT struct {
	At   int64 // whole microseconds since the Unix epoch
	Frac int64 // remainder in units of 1/Limit µs
}

// Expiry returns the first microsecond at which s is back to initial.
func (s TAT) Expiry() int64 {
	if s.Frac > 0 {
		return s.At + 1
	}
	return s.At
}

// backlog returns max(tat - now, 0) as whole µs plus a remainder in 1/L µs.
func (s TAT) backlog(now int64) (q, r int64) {
	if s.At > now || (s.At == now && s.Frac > 0) {
		return s.At - now, s.Frac
	}
	return 0, 0
}

// tatStep is the transition shared by the token-bucket family. It returns
// the new state, the result and the backlog before the request (the leaky
// bucket's delay).
//
// With T = P/L the time one cost unit takes to drain, a request of cost c
// is admitted iff backlog + c·T ≤ B·T, and then backlog += c·T.
func tatStep(p Params, s TAT, now, cost int64) (TAT, Result, time.Duration) {
	bq, br := s.backlog(now)
	remaining := func(q, r int64) int64 {
		// B - ceil(backlog/T) = B - ceil((q·L + r) / P)
		return p.Burst - mulAddDivCeil(q, p.Limit, r, p.Period)
	}
	if cost > p.Burst {
		return s, Result{Remaining: remaining(bq, br), RetryAfter: Never, ResetAfter: ceilMillis(ceilFrac(bq, br))}, 0
	}
	cq, cr, _ := mulDivmod(cost, p.Period, p.Limit) // c·T
	hq, hr, _ := mulDivmod(p.Burst, p.Period, p.Limit)
	nq, nr := bq+cq, br+cr
	if nr >= p.Limit {
		nq, nr = nq+1, nr-p.Limit
	}
	if nq < hq || (nq == hq && nr <= hr) {
		return TAT{At: now + nq, Frac: nr}, Result{
			Allowed:    true,
			Remaining:  remaining(nq, nr),
			ResetAfter: ceilMillis(ceilFrac(nq, nr)),
		}, time.Duration(ceilFrac(bq, br)) * time.Microsecond
	}
	// Denied: wait until the backlog has drained by the excess nb - H.
	eq, er := nq-hq, nr-hr
	if er < 0 {
		eq, er = eq-1, er+p.Limit
	}
	return s, Result{
		Remaining:  remaining(bq, br),
		RetryAfter: retryMillis(ceilFrac(eq, er)),
		ResetAfter: ceilMillis(ceilFrac(bq, br)),
	}, 0
}

// ceilFrac rounds q + r/L (0 ≤ r < L) up to whole microseconds.
func ceilFrac(q, r int64) int64 {
	if r > 0 {
		return q + 1
	}
	return q
}

// GCRA decides a request of the given cost under the generic cell rate
// algorithm: one timestamp per key, the theoretical arrival time. Its
// decisions are identical to TokenBucket's with the same Params.
func GCRA(p Params, s TAT, now, cost int64) (TAT, Result) {
	s, r, _ := tatStep(p, s, now, cost)
	return s, r
}
