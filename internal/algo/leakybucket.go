package algo

import "time"

// LeakyBucket decides a request under a leaky bucket used as a queue: one
// cost unit leaves every T = P/L. With V the instant at which everything
// already accepted has left (never earlier than now), a request of cost c is
// accepted iff (V − now) + c·T ≤ B·T; it must then wait Delay = V − now
// before it proceeds, and V grows by c·T. Admission equals TokenBucket's; the
// output is smooth: each admitted request starts at least c_prev·T after the
// previous one.
//
// maxDelay, when positive, additionally refuses a request whose delay would
// exceed it (a caller that cannot wait that long): the state is left
// unchanged, Delay reports the wait the request would have had, and
// RetryAfter says when the queue will be short enough for maxDelay. A
// request refused for want of room has Delay 0 as usual, and its RetryAfter
// is the later of the instants at which there is room and at which the
// queue is short enough.
func LeakyBucket(p Params, s TAT, now, cost int64, maxDelay time.Duration) (TAT, Verdict) {
	pp := Prepare(p)
	return pp.LeakyBucket(s, now, cost, maxDelay)
}

// LeakyBucket is LeakyBucket with pp's constants.
func (pp *Prepared) LeakyBucket(s TAT, now, cost int64, maxDelay time.Duration) (TAT, Verdict) {
	var r Verdict
	s = pp.LeakyBucketTo(s, now, cost, maxDelay, &r)
	return s, r
}

// LeakyBucketTo is LeakyBucket writing its verdict to r, as
// TokenBucketTo is TokenBucket.
func (pp *Prepared) LeakyBucketTo(s TAT, now, cost int64, maxDelay time.Duration, r *Verdict) TAT {
	ns, delay := pp.tatStep(s, now, cost, r)
	if maxDelay > 0 && delay > maxDelay && r.RetryAfter != Never {
		// The queue is longer than the caller can wait. The request passes
		// once the queue has shrunk to maxDelay (and, when it is also over
		// capacity, once there is room: whichever comes later).
		short := retryMillis(int64((delay - maxDelay + time.Microsecond - 1) / time.Microsecond))
		if !r.Allowed {
			r.RetryAfter = max(r.RetryAfter, short)
			return s
		}
		var peek Verdict
		pp.tatStep(s, now, 0, &peek)
		*r = Verdict{
			Remaining:  peek.Remaining,
			RetryAfter: short,
			ResetAfter: peek.ResetAfter,
			Delay:      delay,
		}
		return s
	}
	if r.Allowed {
		r.Delay = delay
	}
	return ns
}
