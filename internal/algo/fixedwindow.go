package algo

// Window is the state of the window algorithms. Start is the start of the
// window that Curr counts (windows are [k·P, (k+1)·P) since the Unix epoch,
// or calendar windows); Prev counts the window before it (sliding_window
// only). Expire is the first microsecond at which the state is back to
// initial. The zero value is initial.
type Window struct {
	Start  int64
	Expire int64
	Prev   uint32
	Curr   uint32
}

// roll clamps now so that it is never before the stored window (a clock
// that steps backwards is treated as no time passing) and returns it with
// the windows around it and the counts of the window holding it and the
// one before it.
func (s Window) roll(now int64, p *Params) (at int64, b Bounds, prev, curr int64) {
	if now < s.Start {
		now = s.Start
	}
	b = p.bounds(now)
	switch {
	case s.Expire <= now:
		return now, b, 0, 0
	case s.Start == b.Start:
		return now, b, int64(s.Prev), int64(s.Curr)
	case s.Start == b.Prev:
		return now, b, int64(s.Curr), 0
	}
	return now, b, 0, 0
}

// FixedWindow decides a request under fixed windows: of length P aligned
// to multiples of P since the Unix epoch, or p.Cal's calendar windows.
// A request is admitted iff the window's count plus cost is at most L.
// It returns the new state and writes the verdict to *r.
func FixedWindow(p Params, s Window, now, cost int64, r *Verdict) Window {
	now, b, _, count := s.roll(now, &p)
	end := b.End
	resetAfter := func(count int64) int64 {
		if count == 0 {
			return 0
		}
		return end - now
	}
	if cost > p.Limit {
		*r = Verdict{Remaining: max(p.Limit-count, 0), RetryAfter: Never, ResetAfter: ceilMillis(resetAfter(count))}
		return s
	}
	if count+cost <= p.Limit {
		count += cost
		ns := Window{}
		if count > 0 {
			ns = Window{Start: b.Start, Expire: end, Curr: uint32(count)}
		}
		*r = Verdict{Allowed: true, Remaining: p.Limit - count, ResetAfter: ceilMillis(resetAfter(count))}
		return ns
	}
	*r = Verdict{
		Remaining:  max(p.Limit-count, 0),
		RetryAfter: retryMillis(end - now),
		ResetAfter: ceilMillis(resetAfter(count)),
	}
	return s
}
