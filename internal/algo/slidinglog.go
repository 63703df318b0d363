package algo

import "slices"

// LogEntry is one admitted request of a sliding log: its time and its cost.
// Requests admitted in the same microsecond share one entry.
type LogEntry struct {
	At   int64
	Cost int64
}

// Log is the state of the sliding log: the admitted requests that may still
// count, oldest first, in a ring buffer, and the sum of their costs. The
// zero value is an empty log. A Log is not a value type: SlidingLog updates
// it in place, so a caller that must not commit a decision uses
// SlidingLogPeek first.
type Log struct {
	buf   []LogEntry
	head  int // index of the oldest entry
	n     int // number of entries
	total int64
}

// LogOf returns a log holding entries, which must be in order of strictly
// increasing At with positive costs, as a log keeps them: for a store that
// holds a log elsewhere and decides on a copy of it. The log keeps its own
// copy of entries.
func LogOf(entries []LogEntry) *Log {
	l := &Log{buf: slices.Clone(entries), n: len(entries)}
	for _, e := range entries {
		l.total += e.Cost
	}
	return l
}

// Len returns the number of entries held.
func (l *Log) Len() int { return l.n }

// Total returns the summed cost of the entries held.
func (l *Log) Total() int64 { return l.total }

// Newest returns the time of the newest entry; ok is false for an empty log.
func (l *Log) Newest() (at int64, ok bool) {
	if l.n == 0 {
		return 0, false
	}
	return l.at(l.n - 1).At, true
}

// Expiry returns the first microsecond at which the log is back to initial
// (empty) under the given period.
func (l *Log) Expiry(period int64) int64 {
	at, ok := l.Newest()
	if !ok {
		return 0
	}
	return at + period
}

func (l *Log) at(i int) LogEntry { return l.buf[(l.head+i)%len(l.buf)] }

// Entries returns a copy of the entries, oldest first.
func (l *Log) Entries() []LogEntry {
	out := make([]LogEntry, l.n)
	for i := range out {
		out[i] = l.at(i)
	}
	return out
}

// expire drops the entries that no longer count at now: an entry admitted
// at s counts at t iff t − s < P.
func (l *Log) expire(now, period int64) {
	for l.n > 0 {
		e := l.buf[l.head]
		if now-e.At < period {
			return
		}
		l.total -= e.Cost
		l.buf[l.head] = LogEntry{}
		l.head = (l.head + 1) % len(l.buf)
		l.n--
	}
	l.head = 0
}

func (l *Log) push(at, cost int64) {
	if l.n > 0 {
		last := (l.head + l.n - 1) % len(l.buf)
		if l.buf[last].At == at {
			l.buf[last].Cost += cost
			l.total += cost
			return
		}
	}
	if l.n == len(l.buf) {
		nb := make([]LogEntry, max(4, 2*len(l.buf)))
		for i := 0; i < l.n; i++ {
			nb[i] = l.at(i)
		}
		l.buf, l.head = nb, 0
	}
	l.buf[(l.head+l.n)%len(l.buf)] = LogEntry{At: at, Cost: cost}
	l.n++
	l.total += cost
}

// clamp treats a clock that steps back before the newest entry as no time
// passing.
func (l *Log) clamp(now int64) int64 {
	if at, ok := l.Newest(); ok && now < at {
		return at
	}
	return now
}

// counted returns the summed cost of the entries that count at now, without
// changing the log, and the index of the first of them.
func (l *Log) counted(now, period int64) (sum int64, first int) {
	sum = l.total
	for first < l.n {
		e := l.at(first)
		if now-e.At < period {
			break
		}
		sum -= e.Cost
		first++
	}
	return sum, first
}

// SlidingLogPeek decides a request under the sliding log without changing
// the log: a request admitted at s counts at t iff t − s < P, and a request
// is admitted iff the counted cost plus its own is at most L. It writes
// the verdict to *r.
func SlidingLogPeek(p Params, l *Log, now, cost int64, r *Verdict) {
	now = l.clamp(now)
	sum, first := l.counted(now, p.Period)
	resetAfter := func(newest int64, any bool) int64 {
		if !any {
			return 0
		}
		return newest + p.Period - now
	}
	newest, any := l.Newest()
	any = any && first < l.n
	if cost > p.Limit {
		*r = Verdict{Remaining: max(p.Limit-sum, 0), RetryAfter: Never, ResetAfter: ceilMillis(resetAfter(newest, any))}
		return
	}
	if sum+cost <= p.Limit {
		if cost > 0 {
			newest, any = now, true
		}
		*r = Verdict{Allowed: true, Remaining: p.Limit - sum - cost, ResetAfter: ceilMillis(resetAfter(newest, any))}
		return
	}
	// Drop entries oldest first until the rest leaves room for cost; the
	// request passes once the last dropped entry stops counting.
	rest, i := sum, first
	for ; rest+cost > p.Limit; i++ {
		rest -= l.at(i).Cost
	}
	*r = Verdict{
		Remaining:  max(p.Limit-sum, 0),
		RetryAfter: retryMillis(l.at(i-1).At + p.Period - now),
		ResetAfter: ceilMillis(resetAfter(newest, any)),
	}
}

// SlidingLog decides a request like SlidingLogPeek and, when it is
// admitted, records it in l. Entries that no longer count are dropped.
func SlidingLog(p Params, l *Log, now, cost int64, r *Verdict) {
	SlidingLogPeek(p, l, now, cost, r)
	now = l.clamp(now)
	l.expire(now, p.Period)
	if r.Allowed && cost > 0 {
		l.push(now, cost)
	}
}
