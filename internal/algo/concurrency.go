package algo

// Hold is what one lease holds of a concurrency key: Units, until Expiry
// (µs since the Unix epoch, exclusive: the hold counts at t iff
// t < Expiry). ID names the lease; Lease is its length in µs, which a
// renewal adds again from the time of the renewal.
type Hold struct {
	ID     [16]byte
	Units  int64
	Expiry int64
	Lease  int64
}

// Holds is the state of a concurrency key: the holds that may still count.
// The zero value holds nothing. Holds is updated in place.
type Holds struct {
	hs []Hold
}

// Len returns the number of holds kept, expired or not.
func (h *Holds) Len() int { return len(h.hs) }

// All returns the holds kept, expired or not. The slice is h's own.
func (h *Holds) All() []Hold { return h.hs }

// Expire drops the holds that no longer count at t and returns how many
// it dropped.
func (h *Holds) Expire(t int64) int {
	k := 0
	for _, x := range h.hs {
		if x.Expiry > t {
			h.hs[k] = x
			k++
		}
	}
	n := len(h.hs) - k
	clear(h.hs[k:])
	h.hs = h.hs[:k]
	return n
}

// Held returns the units held at t.
func (h *Holds) Held(t int64) int64 {
	var n int64
	for _, x := range h.hs {
		if x.Expiry > t {
			n += x.Units
		}
	}
	return n
}

// Expiry returns the first microsecond at which nothing is held, if no hold
// is renewed: the latest expiry, or 0 for no holds.
func (h *Holds) Expiry() int64 {
	var e int64
	for _, x := range h.hs {
		e = max(e, x.Expiry)
	}
	return e
}

// Concurrency decides a request of cost units at t on a key whose holds
// are h, under at most limit units held at once: admitted iff the units
// held at t plus cost are at most limit. When commit is set and the
// request is admitted, a hold of cost units named id, expiring lease µs
// after t, is added to h. Cost 0 asks for the state.
//
// Remaining is limit minus the units held after the decision. RetryAfter,
// for a refused request, is when enough holds will have expired for it to
// fit if none is released or renewed (a release can only make it sooner);
// Never when cost exceeds limit. ResetAfter is when every hold will have
// expired, after the decision.
func Concurrency(limit int64, h *Holds, t, cost int64, id [16]byte, lease int64, commit bool) Verdict {
	h.Expire(t)
	held := h.Held(t)
	if cost > limit {
		return Verdict{Remaining: max(limit-held, 0), RetryAfter: Never, ResetAfter: ceilMillis(max(h.Expiry()-t, 0))}
	}
	if held+cost <= limit {
		expiry := h.Expiry()
		if cost > 0 {
			expiry = max(expiry, t+lease)
			if commit {
				h.take(Hold{ID: id, Units: cost, Expiry: t + lease, Lease: lease})
			}
		}
		return Verdict{Allowed: true, Remaining: limit - held - cost, ResetAfter: ceilMillis(max(expiry-t, 0))}
	}
	return Verdict{
		Remaining:  max(limit-held, 0),
		RetryAfter: retryMillis(fitsAt(h.hs, held+cost-limit) - t),
		ResetAfter: ceilMillis(h.Expiry() - t),
	}
}

// take adds x to h, or its units to the hold of the same lease taken at
// the same time (a lease that names one key twice holds it once).
func (h *Holds) take(x Hold) {
	for i := range h.hs {
		if y := &h.hs[i]; y.ID == x.ID && y.Expiry == x.Expiry {
			y.Units += x.Units
			return
		}
	}
	h.hs = append(h.hs, x)
}

// fitsAt returns the first time at which holds of at least need units will
// have expired: the expiry of the hold, in order of expiry, whose units
// bring the expired total to need. hs must hold at least need units.
func fitsAt(hs []Hold, need int64) int64 {
	var freed int64
	at := int64(0)
	for freed < need {
		// The earliest expiry after at; holds expiring together free
		// their units together.
		next := int64(-1)
		for _, x := range hs {
			if x.Expiry > at && (next < 0 || x.Expiry < next) {
				next = x.Expiry
			}
		}
		if next < 0 {
			return at
		}
		for _, x := range hs {
			if x.Expiry == next {
				freed += x.Units
			}
		}
		at = next
	}
	return at
}

// Release drops the holds named id that still count at t and returns the
// units they held; holds of id that expired already are dropped too but
// free nothing.
func (h *Holds) Release(id [16]byte, t int64) int64 {
	var freed int64
	k := 0
	for _, x := range h.hs {
		if x.ID == id {
			if x.Expiry > t {
				freed += x.Units
			}
			continue
		}
		h.hs[k] = x
		k++
	}
	clear(h.hs[k:])
	h.hs = h.hs[:k]
	return freed
}

// Renew extends the holds named id that still count at t to expire their
// lease after t, and returns the earliest new expiry; ok is false when no
// hold of id counts at t (it expired, was released, or never was).
func (h *Holds) Renew(id [16]byte, t int64) (expiry int64, ok bool) {
	for i := range h.hs {
		x := &h.hs[i]
		if x.ID != id || x.Expiry <= t {
			continue
		}
		x.Expiry = t + x.Lease
		if !ok || x.Expiry < expiry {
			expiry = x.Expiry
		}
		ok = true
	}
	return expiry, ok
}
