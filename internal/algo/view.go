package algo

import (
	"math"
	"math/bits"
)

// Frac is an exact amount of cost units: Whole + Num/Den with
// 0 ≤ Num < Den, not necessarily in lowest terms. Only Tokens of a bucket
// in debt is negative.
type Frac struct {
	Whole, Num, Den int64
}

// View is a state as seen at one instant, for explaining decisions (the
// stores' sluice.Inspector): the numbers the algorithms decide with,
// exactly. Which fields are set depends on the algorithm.
type View struct {
	// Now is the instant viewed, after the clamping the algorithm applies
	// to a clock that steps backwards (windows and logs).
	Now int64

	// Token-bucket family: Tokens + Queued = Burst, and Backlog is the
	// time until the bucket is full, rounded up to the µs. Tokens below
	// zero are a debt.
	Tokens, Queued Frac
	Backlog        int64

	// Windows: the start and end of the window holding Now, the counts of
	// that window and the one before it (sliding window only), and the
	// count a request is checked against.
	WindowStart       int64
	WindowEnd         int64
	Previous, Current int64
	Estimate          Frac

	// Sliding log: the entries that count at Now, their summed cost, and
	// the times of the oldest and newest of them.
	Entries        int
	Counted        int64
	Oldest, Newest int64

	// Concurrency: the units held at Now, by how many leases, and when
	// the last of them expires unless renewed (0 when none is held).
	Held, Leases int64
	Expires      int64
}

// ViewHolds returns a concurrency key's holds h at now.
func ViewHolds(h *Holds, now int64) View {
	v := View{Now: now}
	for _, x := range h.hs {
		if x.Expiry > now {
			v.Held += x.Units
			v.Leases++
			v.Expires = max(v.Expires, x.Expiry)
		}
	}
	return v
}

// ViewTAT returns the token-bucket family's state s at now: a bucket of
// Burst tokens less the backlog's B − (TAT − now)·L/P.
func (pp *Prepared) ViewTAT(s TAT, now int64) View {
	p := &pp.Params
	bq, br := s.backlog(now)
	// Queued = backlog·L/P = (bq·L + br)/P; it is at most B plus a debt
	// of MaxCount, so the quotient fits, except after a clock that stepped
	// far back, where it saturates.
	hi, lo := bits.Mul64(uint64(bq), uint64(p.Limit))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(br), 0)
	hi += carry
	q, r := uint64(math.MaxInt64/2), uint64(0)
	if hi < uint64(p.Period) {
		q, r = bits.Div64(hi, lo, uint64(p.Period))
		q = min(q, math.MaxInt64/2)
	}
	queued := Frac{Whole: int64(q), Num: int64(r), Den: p.Period}
	tokens := Frac{Whole: p.Burst - queued.Whole, Den: p.Period}
	if queued.Num > 0 {
		tokens.Whole--
		tokens.Num = p.Period - queued.Num
	}
	return View{Now: now, Tokens: tokens, Queued: queued, Backlog: ceilFrac(bq, br)}
}

// ViewFixedWindow returns the fixed window's state s at now.
func ViewFixedWindow(p Params, s Window, now int64) View {
	now, b, _, curr := s.roll(now, &p)
	return View{Now: now, WindowStart: b.Start, WindowEnd: b.End, Current: curr, Estimate: Frac{Whole: curr, Den: b.End - b.Start}}
}

// ViewSlidingWindow returns the sliding window's state s at now, with the
// estimate prev·(end − now)/(end − start) + curr.
func ViewSlidingWindow(p Params, s Window, now int64) View {
	now, b, prev, curr := s.roll(now, &p)
	q, r, _ := mulDivmod(prev, b.End-now, b.End-b.Start)
	return View{
		Now: now, WindowStart: b.Start, WindowEnd: b.End, Previous: prev, Current: curr,
		Estimate: Frac{Whole: curr + q, Num: r, Den: b.End - b.Start},
	}
}

// ViewLog returns the sliding log's state l at now, without changing l.
func ViewLog(p Params, l *Log, now int64) View {
	now = l.clamp(now)
	sum, first := l.counted(now, p.Period)
	v := View{Now: now, Entries: l.n - first, Counted: sum}
	if v.Entries > 0 {
		v.Oldest = l.at(first).At
		v.Newest = l.at(l.n - 1).At
	}
	return v
}
