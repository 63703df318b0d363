package algo

import "math"

// SlidingWindow decides a request under the sliding window counter (as
// described by Cloudflare): windows as FixedWindow's, and the estimate
//
//	prev·(end − now)/(end − start) + curr
//
// for the window [start, end) that holds now, computed exactly, without
// rounding: the previous window's count weighted by the fraction of the
// current window still to come. For windows of length P that is
// prev·(P − (now − start))/P + curr. A request is admitted iff
// estimate + cost ≤ L. It returns the new state and writes the verdict
// to *r.
func SlidingWindow(p Params, s Window, now, cost int64, r *Verdict) Window {
	now, b, prev, curr := s.roll(now, &p)
	// prevPart is prev·(E−now)/(E−S) as a quotient and a remainder.
	prevQ, prevR, _ := mulDivmod(prev, b.End-now, b.End-b.Start)
	remaining := func(curr int64) int64 {
		// floor(L − estimate) = L − curr − ceil(prev·(E−now)/(E−S))
		n := p.Limit - curr - prevQ
		if prevR > 0 {
			n--
		}
		return max(n, 0)
	}
	resetAt := func(prev, curr int64) int64 {
		switch {
		case curr > 0:
			return b.After
		case prev > 0:
			return b.End
		}
		return now
	}
	if cost > p.Limit {
		*r = Verdict{Remaining: remaining(curr), RetryAfter: Never, ResetAfter: ceilMillis(resetAt(prev, curr) - now)}
		return s
	}
	// estimate + cost ≤ L  ⇔  prevQ + prevR/(E−S) + curr + cost ≤ L
	//                      ⇔  curr + cost + prevQ < L, or = L with prevR = 0
	need := curr + cost + prevQ
	if need < p.Limit || (need == p.Limit && prevR == 0) {
		curr += cost
		expire := resetAt(prev, curr)
		ns := Window{}
		if expire > now {
			ns = Window{Start: b.Start, Expire: expire, Prev: uint32(prev), Curr: uint32(curr)}
		}
		*r = Verdict{Allowed: true, Remaining: remaining(curr), ResetAfter: ceilMillis(expire - now)}
		return ns
	}
	*r = Verdict{
		Remaining:  remaining(curr),
		RetryAfter: retryMillis(slidingRetryAt(p, b, prev, curr, cost) - now),
		ResetAfter: ceilMillis(resetAt(prev, curr) - now),
	}
	return s
}

// slidingRetryAt returns the first microsecond at which a request of the
// given cost (≤ L) would be admitted if nothing else happened. The estimate
// never rises while no request comes, so the first such instant is found by
// solving the admission inequality in this window, then in the next one.
func slidingRetryAt(p Params, b Bounds, prev, curr, cost int64) int64 {
	// This window, of length W = E−S:
	// prev·(E−t) ≤ R·W  ⇔  t ≥ E − floor(R·W/prev).
	w := b.End - b.Start
	if r := p.Limit - cost - curr; r >= 0 && prev > 0 {
		if q := quotientCapped(r, w, prev); q > 0 {
			return b.End - min(q, w)
		}
	}
	// Next window, of length W' = A−E, where prev' = curr and curr' = 0:
	// curr·(A−t) ≤ (L−cost)·W'  ⇔  t ≥ A − floor((L−cost)·W'/curr).
	if curr == 0 {
		return b.End
	}
	next := b.After - b.End
	q := quotientCapped(p.Limit-cost, next, curr)
	return b.After - min(q, next)
}

// quotientCapped returns floor(a·b/d), or MaxInt64 when that does not fit.
func quotientCapped(a, b, d int64) int64 {
	q, _, ok := mulDivmod(a, b, d)
	if !ok {
		return math.MaxInt64
	}
	return q
}
