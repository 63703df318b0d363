package algo

// Costs known only after the fact: a debit charges units whether or not
// they fit, so a key may go past its limit (into debt) and is refused until
// the algorithm has repaid it; a refund gives charged units back; a check
// (Check) asks whether a key has a unit left without charging one.
//
// Debt is bounded so that no value overflows: the window algorithms and the
// sliding log count at most MaxCount units, and the token-bucket family
// owes at most MaxCount units beyond an empty bucket and never takes longer
// than MaxBacklogMicros to refill. A debit past a bound charges up to it.

// Bounds of a debt.
const (
	// MaxCount is the most units a window or a sliding log counts, and the
	// most a token bucket, GCRA or leaky bucket owes beyond empty.
	MaxCount = 1<<32 - 1
	// MaxBacklogMicros is the longest a token bucket, GCRA or leaky
	// bucket in debt takes to be full again: 2^61 µs, about 73,000 years,
	// at least twice MaxHorizonMicros.
	MaxBacklogMicros = 1 << 61
)

// Check turns the verdicts of a request of cost 0 (v0) and one of cost 1
// (v1), both decided on the same state without charging, into the verdict
// of a check: admitted iff a unit is left (v1 admitted), charging nothing.
// Remaining and ResetAfter describe the state as it is; a refused check has
// v1's RetryAfter, when a unit will be left.
func Check(v0, v1 Verdict) Verdict {
	if v1.Allowed {
		return Verdict{Allowed: true, Remaining: v0.Remaining, ResetAfter: v0.ResetAfter}
	}
	return Verdict{Remaining: v0.Remaining, RetryAfter: v1.RetryAfter, ResetAfter: v0.ResetAfter}
}

// mostBacklog returns the longest backlog a debit may leave: the horizon
// B·T plus MaxCount·T, or MaxBacklogMicros if that is shorter.
func (pp *Prepared) mostBacklog() (q, r int64) {
	dq, dr, ok := mulDivmod(MaxCount, pp.Period, pp.Limit)
	if !ok || dq >= MaxBacklogMicros-pp.hq {
		return MaxBacklogMicros, 0
	}
	q, r = addFrac(pp.hq, pp.hr, dq, dr, pp.Limit)
	if q > MaxBacklogMicros || (q == MaxBacklogMicros && r > 0) {
		return MaxBacklogMicros, 0
	}
	return q, r
}

// Debit charges cost units (cost ≥ 1) to a token bucket, GCRA or leaky
// bucket whether or not they fit: backlog += cost·T, up to mostBacklog. The
// verdict is Allowed iff the units fitted (the bucket is not in debt after
// them); Remaining, RetryAfter (of a request of cost 1) and ResetAfter
// describe the state after the debit. A debit never waits: Delay is 0.
func (pp *Prepared) Debit(s TAT, now, cost int64) (TAT, Verdict) {
	bq, br := s.backlog(now)
	mq, mr := pp.mostBacklog()
	nq, nr := mq, mr
	// cq < mq ≤ MaxBacklogMicros keeps the sum below 2^62.
	if cq, cr, ok := mulDivmod(min(cost, MaxCount), pp.Period, pp.Limit); ok && cq < mq {
		if q, r := addFrac(bq, br, cq, cr, pp.Limit); q < mq || (q == mq && r < mr) {
			nq, nr = q, r
		}
	}
	ns := TAT{At: now + nq, Frac: nr}
	if ns.At < s.At || (ns.At == s.At && ns.Frac < s.Frac) {
		ns = s // a backlog read short (a clock that stepped back) stays
	}
	return ns, pp.owed(nq, nr)
}

// owed returns the verdict on a bucket whose backlog is nq + nr/L µs after
// a debit or a refund: Allowed iff it is within the horizon (not in debt),
// and the RetryAfter of a request of cost 1 when it is not.
func (pp *Prepared) owed(nq, nr int64) Verdict {
	v := Verdict{Remaining: pp.remaining(nq, nr), ResetAfter: ceilMillis(ceilFrac(nq, nr))}
	if nq < pp.hq || (nq == pp.hq && nr <= pp.hr) {
		v.Allowed = true
		return v
	}
	// Wait until backlog + T ≤ B·T.
	eq, er := addFrac(nq, nr, pp.tq, pp.tr, pp.Limit)
	eq, er = eq-pp.hq, er-pp.hr
	if er < 0 {
		eq, er = eq-1, er+pp.Limit
	}
	v.RetryAfter = retryMillis(ceilFrac(eq, er))
	return v
}

// Refund gives cost units (cost ≥ 1) back to a token bucket, GCRA or leaky
// bucket: backlog −= cost·T, floored at 0 (a full bucket). The verdict is
// Allowed and describes the state after the refund.
func (pp *Prepared) Refund(s TAT, now, cost int64) (TAT, Verdict) {
	bq, br := s.backlog(now)
	cq, cr, ok := mulDivmod(cost, pp.Period, pp.Limit)
	if !ok || cq > bq || (cq == bq && cr >= br) {
		return TAT{}, Verdict{Allowed: true, Remaining: pp.Burst}
	}
	nq, nr := bq-cq, br-cr
	if nr < 0 {
		nq, nr = nq-1, nr+pp.Limit
	}
	v := pp.owed(nq, nr)
	v.Allowed, v.RetryAfter = true, 0
	return TAT{At: now + nq, Frac: nr}, v
}

// addCount returns count + cost, saturated at MaxCount.
func addCount(count, cost int64) int64 {
	if cost >= MaxCount-count {
		return MaxCount
	}
	return count + cost
}

// FixedWindowDebit charges cost units (cost ≥ 1) to the window holding
// now whether or not they fit; its count may pass the limit, up to
// MaxCount, and the next window starts afresh. Allowed iff the count is
// within the limit after the debit; a refused debit's RetryAfter is the
// window's end, when a request of cost 1 fits again.
func FixedWindowDebit(p Params, s Window, now, cost int64) (Window, Verdict) {
	now, b, _, count := s.roll(now, &p)
	count = addCount(count, cost)
	ns := Window{Start: b.Start, Expire: b.End, Curr: uint32(count)}
	v := Verdict{Allowed: count <= p.Limit, Remaining: max(p.Limit-count, 0), ResetAfter: ceilMillis(b.End - now)}
	if !v.Allowed {
		v.RetryAfter = retryMillis(b.End - now)
	}
	return ns, v
}

// FixedWindowRefund gives cost units (cost ≥ 1) back to the window that
// held the instant at, if that window is still the current one at now:
// its count goes down by cost, floored at 0. A charge whose window has
// ended counts no more, and its refund changes nothing. An at after now
// is read as now. The verdict is Allowed and describes the state after.
func FixedWindowRefund(p Params, s Window, now, at, cost int64) (Window, Verdict) {
	now, b, _, count := s.roll(now, &p)
	if p.bounds(min(at, now)).Start == b.Start {
		count = max(count-cost, 0)
	}
	ns, v := Window{}, Verdict{Allowed: true, Remaining: max(p.Limit-count, 0)}
	if count > 0 {
		ns = Window{Start: b.Start, Expire: b.End, Curr: uint32(count)}
		v.ResetAfter = ceilMillis(b.End - now)
	}
	return ns, v
}

// SlidingWindowDebit charges cost units (cost ≥ 1) to the current window
// whether or not they fit; its count may pass the limit, up to MaxCount,
// and weighs on the next window as usual. Allowed iff the units fitted
// (the estimate is within the limit after them); a refused debit's
// RetryAfter is when a request of cost 1 fits again.
func SlidingWindowDebit(p Params, s Window, now, cost int64) (Window, Verdict) {
	now, b, prev, curr := s.roll(now, &p)
	curr = addCount(curr, cost)
	return slidingAfter(p, b, now, prev, curr)
}

// slidingAfter returns the sliding window's state of counts prev and curr
// at now, in the windows b, with the verdict of a debit that left them:
// Allowed iff the estimate is at most the limit.
func slidingAfter(p Params, b Bounds, now, prev, curr int64) (Window, Verdict) {
	prevQ, prevR, _ := mulDivmod(prev, b.End-now, b.End-b.Start)
	est := curr + prevQ
	v := Verdict{Allowed: est < p.Limit || (est == p.Limit && prevR == 0)}
	v.Remaining = max(p.Limit-est, 0)
	if prevR > 0 && v.Remaining > 0 {
		v.Remaining--
	}
	var expire int64
	switch {
	case curr > 0:
		expire = b.After
	case prev > 0:
		expire = b.End
	default:
		return Window{}, v
	}
	v.ResetAfter = ceilMillis(expire - now)
	if !v.Allowed {
		v.RetryAfter = retryMillis(slidingRetryAt(p, b, prev, curr, 1) - now)
	}
	return Window{Start: b.Start, Expire: expire, Prev: uint32(prev), Curr: uint32(curr)}, v
}

// SlidingWindowRefund gives cost units (cost ≥ 1) back to the window that
// held the instant at, if it still counts at now: the current window's
// count, or the previous one's (which still weighs on the estimate),
// floored at 0. A refund of an older charge changes nothing. An at after
// now is read as now. The verdict is Allowed and describes the state after.
func SlidingWindowRefund(p Params, s Window, now, at, cost int64) (Window, Verdict) {
	now, b, prev, curr := s.roll(now, &p)
	switch p.bounds(min(at, now)).Start {
	case b.Start:
		curr = max(curr-cost, 0)
	case b.Prev:
		prev = max(prev-cost, 0)
	}
	ns, v := slidingAfter(p, b, now, prev, curr)
	v.Allowed, v.RetryAfter = true, 0
	return ns, v
}

// SlidingLogDebit charges cost units (cost ≥ 1) at now whether or not they
// fit: the entry is kept, and the counted units may pass the limit, up to
// MaxCount. Allowed iff the units fitted; a refused debit's RetryAfter is
// when enough entries have aged out for a request of cost 1.
func SlidingLogDebit(p Params, l *Log, now, cost int64) Verdict {
	now = l.clamp(now)
	l.expire(now, p.Period)
	sum := l.total
	fitted := cost <= p.Limit-sum // sum+cost may overflow
	if c := addCount(sum, cost) - sum; c > 0 {
		l.push(now, c)
	}
	var v0, v1 Verdict
	SlidingLogPeek(p, l, now, 0, &v0)
	SlidingLogPeek(p, l, now, 1, &v1)
	v := Check(v0, v1)
	v.Allowed = fitted
	if fitted {
		v.RetryAfter = 0
	}
	return v
}

// SlidingLogRefund gives cost units (cost ≥ 1) back to the entries made at
// or before the instant at that still count at now, the newest first, each
// floored at 0 (an emptied entry is dropped). An at after now is read as
// now. The verdict is Allowed and describes the state after.
func SlidingLogRefund(p Params, l *Log, now, at, cost int64) Verdict {
	now = l.clamp(now)
	l.expire(now, p.Period)
	at = min(at, now)
	for i := l.n - 1; i >= 0 && cost > 0; i-- {
		e := &l.buf[(l.head+i)%len(l.buf)]
		if e.At > at {
			continue
		}
		take := min(e.Cost, cost)
		e.Cost -= take
		l.total -= take
		cost -= take
	}
	// Drop the emptied entries, keeping the order of the rest.
	k := 0
	for i := 0; i < l.n; i++ {
		e := l.at(i)
		if e.Cost > 0 {
			l.buf[(l.head+k)%len(l.buf)] = e
			k++
		}
	}
	for i := k; i < l.n; i++ {
		l.buf[(l.head+i)%len(l.buf)] = LogEntry{}
	}
	l.n = k
	if k == 0 {
		l.head = 0
	}
	var v Verdict
	SlidingLogPeek(p, l, now, 0, &v)
	v.Allowed, v.RetryAfter = true, 0
	return v
}
