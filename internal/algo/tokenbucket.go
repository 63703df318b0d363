package algo

// TokenBucket decides a request of the given cost under a token bucket of
// capacity B, full at first, refilled continuously at L/P tokens per unit of
// time up to B. A request is admitted iff the bucket holds at least cost
// tokens; it then takes them. A denied request takes nothing.
//
// The bucket is stored as GCRA stores it, as the instant it will be full
// again: tokens(now) = B − (TAT − now)·L/P. That is the same number as a
// (tokens, last update) pair, in one field, without any rounding.
func TokenBucket(p Params, s TAT, now, cost int64) (TAT, Verdict) {
	pp := Prepare(p)
	return pp.TokenBucket(s, now, cost)
}

// TokenBucket is TokenBucket (and GCRA) with pp's constants.
func (pp *Prepared) TokenBucket(s TAT, now, cost int64) (TAT, Verdict) {
	var r Verdict
	s = pp.TokenBucketTo(s, now, cost, &r)
	return s, r
}

// TokenBucketTo is TokenBucket writing its verdict to r.
func (pp *Prepared) TokenBucketTo(s TAT, now, cost int64, r *Verdict) TAT {
	s, _ = pp.tatStep(s, now, cost, r)
	return s
}
