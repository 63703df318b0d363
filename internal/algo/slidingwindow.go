package algo

import "math"

// SlidingWindow decides a request under the sliding window counter (as
// described by Cloudflare): windows aligned as FixedWindow's, and the
// estimate
//
//	prev·(P − (now − windowStart))/P + curr
//
// computed exactly, without rounding. A request is admitted iff
// estimate + cost ≤ L.
func SlidingWindow(p Params, s Window, now, cost int64) (Window, Result) {
	now, ws, prev, curr := s.roll(now, p.Period)
	P := p.Period
	x := now - ws
	// prevPart is prev·(P−x)/P as a quotient and a remainder in 1/P units.
	prevQ, prevR, _ := mulDivmod(prev, P-x, P)
	remaining := func(curr int64) int64 {
		// floor(L − estimate) = L − curr − ceil(prev·(P−x)/P)
		r := p.Limit - curr - prevQ
		if prevR > 0 {
			r--
		}
		return max(r, 0)
	}
	resetAt := func(prev, curr int64) int64 {
		switch {
		case curr > 0:
			return ws + 2*P
		case prev > 0:
			return ws + P
		}
		return now
	}
	if cost > p.Limit {
		return s, Result{Remaining: remaining(curr), RetryAfter: Never, ResetAfter: ceilMillis(resetAt(prev, curr) - now)}
	}
	// estimate + cost ≤ L  ⇔  prevQ + prevR/P + curr + cost ≤ L
	//                      ⇔  curr + cost + prevQ < L, or = L with prevR = 0
	need := curr + cost + prevQ
	if need < p.Limit || (need == p.Limit && prevR == 0) {
		curr += cost
		expire := resetAt(prev, curr)
		ns := Window{}
		if expire > now {
			ns = Window{Start: ws, Expire: expire, Prev: uint32(prev), Curr: uint32(curr)}
		}
		return ns, Result{Allowed: true, Remaining: remaining(curr), ResetAfter: ceilMillis(expire - now)}
	}
	return s, Result{
		Remaining:  remaining(curr),
		RetryAfter: retryMillis(slidingRetryAt(p, ws, prev, curr, cost) - now),
		ResetAfter: ceilMillis(resetAt(prev, curr) - now),
	}
}

// slidingRetryAt returns the first microsecond at which a request of the
// given cost (≤ L) would be admitted if nothing else happened. The estimate
// never rises while no request comes, so the first such instant is found by
// solving the admission inequality in this window, then in the next one.
func slidingRetryAt(p Params, ws, prev, curr, cost int64) int64 {
	P := p.Period
	// This window: prev·(P−x) ≤ (L−cost−curr)·P  ⇔  x ≥ P − floor(R·P/prev).
	if r := p.Limit - cost - curr; r >= 0 && prev > 0 {
		if q := quotientCapped(r, P, prev); q > 0 {
			return ws + max(P-q, 0)
		}
	}
	// Next window: prev' = curr, curr' = 0: curr·(P−y) ≤ (L−cost)·P.
	if curr == 0 {
		return ws + P
	}
	q := quotientCapped(p.Limit-cost, P, curr)
	return ws + P + max(P-q, 0)
}

// quotientCapped returns floor(a·b/d), or MaxInt64 when that does not fit.
func quotientCapped(a, b, d int64) int64 {
	q, _, ok := mulDivmod(a, b, d)
	if !ok {
		return math.MaxInt64
	}
	return q
}
