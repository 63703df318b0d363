package engine

import (
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// The stores decide with internal/algo; these two functions are the one
// translation between its units and sluice's types.

// Params returns the algorithms' parameters of a valid policy.
func Params(p *sluice.Policy) algo.Params {
	if c := p.Calendar; c.Unit != sluice.NoCalendar {
		u := algo.Unit(c.Unit)
		return algo.Params{Limit: p.Limit, Burst: p.Limit, Period: u.Longest(), Cal: algo.NewCalendar(u, c.Location(), c.WeekStartsSunday)}
	}
	return algo.Params{Limit: p.Limit, Burst: p.Capacity(), Period: int64(p.Period / time.Microsecond)}
}

// ViewState returns the sluice.State of a view of a key under policy p:
// tracked tells whether the store holds state for the key, d is the
// decision a request would get.
func ViewState(p *sluice.Policy, v algo.View, tracked bool, d sluice.Decision) sluice.State {
	st := sluice.State{At: time.UnixMicro(v.Now).UTC(), Tracked: tracked, Decision: d}
	amount := func(f algo.Frac) sluice.Amount { return sluice.Amount{Whole: f.Whole, Num: f.Num, Den: f.Den} }
	switch p.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		loc := p.Calendar.Location()
		st.WindowStart, st.WindowEnd = time.UnixMicro(v.WindowStart).In(loc), time.UnixMicro(v.WindowEnd).In(loc)
		st.Current, st.Estimate = v.Current, amount(v.Estimate)
		if p.Algorithm == sluice.SlidingWindowAlgorithm {
			st.Previous = v.Previous
		}
	case sluice.ConcurrencyAlgorithm:
		st.Held, st.Leases = v.Held, v.Leases
		if v.Expires > 0 {
			st.Expires = time.UnixMicro(v.Expires).UTC()
		}
	case sluice.SlidingLogAlgorithm:
		st.Entries, st.Counted = v.Entries, v.Counted
		if v.Entries > 0 {
			st.Oldest, st.Newest = time.UnixMicro(v.Oldest).UTC(), time.UnixMicro(v.Newest).UTC()
		}
	default:
		st.Tokens, st.Queued = amount(v.Tokens), amount(v.Queued)
		st.Backlog = time.Duration(min(v.Backlog, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
	}
	return st
}

// PenaltyParams returns p's penalty in the algorithms' units, its defaults
// filled in (Factor 0 is 1, MaxBlock 0 is sluice.MaxPeriod), and whether p
// has one. p must be valid.
func PenaltyParams(p *sluice.Policy) (algo.Penalty, bool) {
	q := p.Penalty
	if q.IsZero() {
		return algo.Penalty{}, false
	}
	if q.MaxBlock == 0 {
		q.MaxBlock = sluice.MaxPeriod
	}
	return algo.Penalty{
		BlockFor:    int64(q.BlockFor / time.Microsecond),
		Factor:      max(q.Factor, 1),
		MaxBlock:    int64(q.MaxBlock / time.Microsecond),
		ForgetAfter: int64(q.ForgetAfter / time.Microsecond),
	}, true
}

// ViewBlock adds to st the penalty state b of its key at t (µs): the end
// of its block when blocked, its offences while remembered.
func ViewBlock(st *sluice.State, b algo.Block, t int64) {
	if b.Blocks(t) {
		st.BlockedUntil = time.UnixMicro(b.Until).UTC()
		st.Tracked = true
	}
	if t < b.Forget {
		st.Offences, st.Forgotten = b.Offences, time.UnixMicro(b.Forget).UTC()
		st.Tracked = true
	}
}
