package algo

import "time"

// decision is the struct of sluice.Decision. This package cannot import
// the root package, which imports it, so Combine and Decider take any type
// of this struct (a conversion between the two costs nothing); a field
// added to sluice.Decision and not here fails to compile.
type decision = struct {
	Allowed    bool
	Degraded   bool
	Blocked    bool
	Offence    bool
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	Lease      string
}

// Decision is the constraint that sluice.Decision satisfies.
type Decision interface{ ~decision }

// Combine merges the decisions of several policies on one request into
// one, as the Store contract's AllowAll describes: Allowed only if every
// decision is; the largest RetryAfter (Never the largest), ResetAfter and
// Delay; Degraded if any is; and the Limit and Remaining of the deciding
// decision (see Decider); Blocked and Offence if any is. No decisions
// combine to the zero decision.
func Combine[D Decision](ds []D) D {
	k := Decider(ds)
	if k < 0 {
		return D{}
	}
	out := decision{Allowed: true, Limit: decision(ds[k]).Limit, Remaining: decision(ds[k]).Remaining}
	for _, d := range ds {
		d := decision(d)
		out.Degraded = out.Degraded || d.Degraded
		out.Blocked = out.Blocked || d.Blocked
		out.Offence = out.Offence || d.Offence
		out.Delay = max(out.Delay, d.Delay)
		out.ResetAfter = max(out.ResetAfter, d.ResetAfter)
		if !d.Allowed {
			out.Allowed = false
			if d.RetryAfter == Never || out.RetryAfter == Never {
				out.RetryAfter = Never
			} else {
				out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
			}
		}
	}
	return D(out)
}

// Decider returns the index of the deciding decision of ds: a denying one
// with the longest wait (Never the longest), else the one with the fewest
// units remaining; ties go to the first. It returns -1 for no decisions.
func Decider[D Decision](ds []D) int {
	k := -1
	for i := range ds {
		if k < 0 || Precedes(ds[i], ds[k]) {
			k = i
		}
	}
	return k
}

// Precedes reports whether d decides before e, the order Decider picks
// by: a refusal before an admission; of two refusals, the longer wait
// (Never the longest); of two admissions, fewer units remaining. Equals do
// not precede each other.
func Precedes[D Decision](d, e D) bool {
	a, b := decision(d), decision(e)
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return b.RetryAfter != Never && (a.RetryAfter == Never || a.RetryAfter > b.RetryAfter)
	default:
		return a.Remaining < b.Remaining
	}
}

// Rank is what Precedes compares of a decision: three fields. A caller
// that holds decisions of a concrete type compares them through it by
// pointer, without copying them. The generic functions here keep their
// own copy of the rule, which TestRankAsPrecedes holds to this one: written
// with Rank they would move their callers' buffers of decisions to the
// heap (TestShouldRateLimitAllocs and TestCheckAllocs catch it).
type Rank struct {
	Allowed    bool
	RetryAfter time.Duration
	Remaining  int64
}

// Precedes reports whether a decision of rank r decides before one of
// rank s: the order of the function Precedes.
func (r Rank) Precedes(s Rank) bool {
	switch {
	case r.Allowed != s.Allowed:
		return !r.Allowed
	case !r.Allowed:
		return s.RetryAfter != Never && (r.RetryAfter == Never || r.RetryAfter > s.RetryAfter)
	default:
		return r.Remaining < s.Remaining
	}
}
