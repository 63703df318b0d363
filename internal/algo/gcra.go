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

// backlog returns max(tat − now, 0) as whole µs plus a remainder in 1/L µs,
// never more than MaxBacklogMicros. A backlog beyond the horizon
// H = hq + hr/L = B·T is a debt (Debit passes H; nothing else does): the
// bucket holds fewer than zero tokens. Every state leaves
// tat ≤ now + MaxBacklogMicros, so a longer backlog is only seen when the
// clock has stepped backwards; it is read as MaxBacklogMicros, as if now
// were tat − MaxBacklogMicros, an instant no later than the latest one the
// state has seen. The comparisons are written so that no value of now can
// overflow them.
func (s TAT) backlog(now int64) (q, r int64) {
	if d := s.At - MaxBacklogMicros; d > now || (d == now && s.Frac > 0) {
		return MaxBacklogMicros, 0
	}
	if s.At > now || (s.At == now && s.Frac > 0) {
		return s.At - now, s.Frac
	}
	return 0, 0
}

// Prepared holds a Params with the token-bucket family's constants worked
// out once: T = P/L and B·T, each as whole µs plus a remainder in 1/L µs.
// Stores that decide many requests under one policy keep a Prepared.
type Prepared struct {
	Params
	tq, tr int64 // T
	hq, hr int64 // B·T
}

// Prepare works out p's constants. p must satisfy Check.
func Prepare(p Params) Prepared {
	hq, hr, _ := mulDivmod(p.Burst, p.Period, p.Limit)
	return Prepared{Params: p, tq: p.Period / p.Limit, tr: p.Period % p.Limit, hq: hq, hr: hr}
}

// tatStep is the transition shared by the token-bucket family. It writes
// the result to r and returns the new state and the backlog before the
// request rounded up to the µs (an admitted leaky-bucket request's delay).
//
// With T = P/L the time one cost unit takes to drain, a request of cost c
// is admitted iff backlog + c·T ≤ B·T, and then backlog += c·T.
func (pp *Prepared) tatStep(s TAT, now, cost int64, r *Verdict) (TAT, time.Duration) {
	p := &pp.Params
	bq, br := s.backlog(now)
	wait := ceilMicros(ceilFrac(bq, br))
	if cost > p.Burst {
		*r = Verdict{Remaining: pp.remaining(bq, br), RetryAfter: Never, ResetAfter: ceilMillis(ceilFrac(bq, br))}
		return s, wait
	}
	cq, cr := pp.cost(cost)
	nq, nr := addFrac(bq, br, cq, cr, p.Limit)
	if nq < pp.hq || (nq == pp.hq && nr <= pp.hr) {
		*r = Verdict{
			Allowed:    true,
			Remaining:  pp.remaining(nq, nr),
			ResetAfter: ceilMillis(ceilFrac(nq, nr)),
		}
		return charged(s, now, bq, br, cq, cr, p.Limit), wait
	}
	// Denied: wait until the backlog has drained by the excess nb - H.
	eq, er := nq-pp.hq, nr-pp.hr
	if er < 0 {
		eq, er = eq-1, er+p.Limit
	}
	*r = Verdict{
		Remaining:  pp.remaining(bq, br),
		RetryAfter: retryMillis(ceilFrac(eq, er)),
		ResetAfter: ceilMillis(ceilFrac(bq, br)),
	}
	return s, wait
}

// Admit is TokenBucket for the request it admits, with the result as
// plain values: when TokenBucket(s, now, cost) admits the request, Admit
// returns the same new state, Remaining and ResetAfter (its RetryAfter and
// Delay are 0) and ok; otherwise (a denial, or a cost above the capacity)
// it returns ok false and nothing else, and the caller decides the request
// with TokenBucketTo. It is the hot path of stores, which mostly admit.
func (pp *Prepared) Admit(s TAT, now, cost int64) (ns TAT, remaining int64, resetAfter time.Duration, ok bool) {
	bq, br := s.backlog(now)
	if cost > pp.Burst {
		return ns, 0, 0, false
	}
	cq, cr := pp.cost(cost)
	nq, nr := addFrac(bq, br, cq, cr, pp.Limit)
	if nq > pp.hq || (nq == pp.hq && nr > pp.hr) {
		return ns, 0, 0, false
	}
	return charged(s, now, bq, br, cq, cr, pp.Limit), pp.remaining(nq, nr), ceilMillis(ceilFrac(nq, nr)), true
}

// cost returns c·T = c·tq + c·tr/L as whole µs plus a remainder in 1/L µs;
// c·tr < B·L ≤ 10^18 fits an int64.
func (pp *Prepared) cost(c int64) (cq, cr int64) {
	cq, cr = c*pp.tq, c*pp.tr
	if cr >= pp.Limit {
		cq, cr = cq+cr/pp.Limit, cr%pp.Limit
	}
	return cq, cr
}

// charged returns the state after an admitted request that costs cq +
// cr/l µs on s at now, whose backlog was bq + br/l µs: max(tat, now) + c·T,
// computed from s rather than from now + backlog. Only a backlog within
// H is ever charged this way.
func charged(s TAT, now, bq, br, cq, cr, l int64) TAT {
	base := TAT{At: now}
	if bq > 0 || br > 0 {
		base = s
	}
	at, frac := addFrac(base.At, base.Frac, cq, cr, l)
	return TAT{At: at, Frac: frac}
}

// remaining returns B − ceil(backlog/T) = B − ceil((q·L + r)/P) for a
// backlog of q µs plus r/L µs, or 0 for a backlog beyond the horizon (a
// debt).
func (pp *Prepared) remaining(q, r int64) int64 {
	if q > pp.hq || (q == pp.hq && r > pp.hr) {
		return 0
	}
	return pp.Burst - mulAddDivCeil(q, pp.Limit, r, pp.Period)
}

// addFrac returns (aq + ar/l) + (bq + br/l) as whole µs plus a remainder in
// 1/l µs, for remainders in [0, l).
func addFrac(aq, ar, bq, br, l int64) (q, r int64) {
	q, r = aq+bq, ar+br
	if r >= l {
		q, r = q+1, r-l
	}
	return q, r
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
func GCRA(p Params, s TAT, now, cost int64) (TAT, Verdict) {
	pp := Prepare(p)
	return pp.TokenBucket(s, now, cost)
}
