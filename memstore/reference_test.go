package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// reference is the simplest store that keeps the Store contract: one lock,
// Go maps keyed by the policy and the key itself, and nothing ever dropped
// or evicted. The memory store must decide exactly as it does.
type reference struct {
	mu   sync.Mutex
	hw   int64
	tat  map[refKey]algo.TAT
	win  map[refKey]algo.Window
	logs map[refKey]*algo.Log
	pen  map[refKey]algo.Block
}

type refKey struct {
	policy sluice.Policy
	key    string
}

// keyOf returns the map key of req's state: its policy without the
// penalty (a policy's penalty does not separate its keys' state: changing
// it keeps what the keys have spent) and its key.
func keyOf(req *sluice.Request) refKey {
	p := *req.Policy
	p.Penalty = sluice.Penalty{}
	return refKey{p, req.Key}
}

var _ sluice.Store = (*reference)(nil)

func newReference() *reference {
	return &reference{tat: map[refKey]algo.TAT{}, win: map[refKey]algo.Window{}, logs: map[refKey]*algo.Log{}, pen: map[refKey]algo.Block{}}
}

func check(req *sluice.Request) error {
	if req.Cost < 0 {
		return fmt.Errorf("reference: %w", sluice.ErrInvalidCost)
	}
	if err := req.Policy.Validate(); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	return nil
}

var errCapacity = fmt.Errorf("reference: %w", sluice.ErrCostExceedsCapacity)

// clamp returns now in µs, never before the latest time seen. r.mu must be
// held.
func (r *reference) clamp(now time.Time) int64 {
	r.hw = max(r.hw, now.UnixMicro())
	return r.hw
}

// params returns req's policy in the algorithms' units.
func params(req *sluice.Request) algo.Params {
	p := algo.Params{Limit: req.Policy.Limit, Burst: req.Policy.Capacity(), Period: int64(req.Policy.Period / time.Microsecond)}
	if c := req.Policy.Calendar; c.Unit != sluice.NoCalendar {
		u := algo.Unit(c.Unit)
		p = algo.Params{Limit: req.Policy.Limit, Burst: req.Policy.Limit, Period: u.Longest(), Cal: algo.NewCalendar(u, c.Location(), c.WeekStartsSunday)}
	}
	return p
}

// decide decides req for cost at t and, when commit is set and it is
// admitted, stores the new state; a request of cost 0 is a check of a
// unit after cost. r.mu must be held.
func (r *reference) decide(req *sluice.Request, t, cost int64, maxDelay time.Duration, commit bool) sluice.Decision {
	if req.Cost == 0 {
		v0, v1 := r.verdict(req, t, cost, maxDelay, false), r.verdict(req, t, cost+1, maxDelay, false)
		return decisionOf(req, algo.Check(v0, v1))
	}
	return decisionOf(req, r.verdict(req, t, cost, maxDelay, commit))
}

func decisionOf(req *sluice.Request, res algo.Verdict) sluice.Decision {
	return sluice.Decision{
		Allowed:    res.Allowed,
		Limit:      req.Policy.Limit,
		Remaining:  res.Remaining,
		RetryAfter: res.RetryAfter,
		ResetAfter: res.ResetAfter,
		Delay:      res.Delay,
		Blocked:    res.Blocked,
		Offence:    res.Offence,
	}
}

// verdict is decide's algorithm step.
func (r *reference) verdict(req *sluice.Request, t, cost int64, maxDelay time.Duration, commit bool) algo.Verdict {
	p := params(req)
	k := keyOf(req)
	var res algo.Verdict
	switch req.Policy.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		var ns algo.Window
		if req.Policy.Algorithm == sluice.FixedWindowAlgorithm {
			ns = algo.FixedWindow(p, r.win[k], t, cost, &res)
		} else {
			ns = algo.SlidingWindow(p, r.win[k], t, cost, &res)
		}
		if commit && res.Allowed {
			r.win[k] = ns
		}
	case sluice.SlidingLogAlgorithm:
		l := r.logs[k]
		if l == nil {
			l = &algo.Log{}
			r.logs[k] = l
		}
		if commit {
			algo.SlidingLog(p, l, t, cost, &res)
		} else {
			algo.SlidingLogPeek(p, l, t, cost, &res)
		}
	default:
		var ns algo.TAT
		if req.Policy.Algorithm == sluice.LeakyBucketAlgorithm {
			ns, res = algo.LeakyBucket(p, r.tat[k], t, cost, maxDelay)
		} else {
			ns, res = algo.TokenBucket(p, r.tat[k], t, cost)
		}
		if commit && res.Allowed {
			r.tat[k] = ns
		}
	}
	return res
}

func (r *reference) Debit(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return r.debt(now, req, false)
}

func (r *reference) Refund(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return r.debt(now, req, true)
}

// debt debits or refunds req.Cost, straight through the algorithms.
func (r *reference) debt(now time.Time, req sluice.Request, refund bool) (sluice.Decision, error) {
	if req.Cost < 1 {
		return sluice.Decision{}, fmt.Errorf("reference: %w", sluice.ErrInvalidCost)
	}
	if err := req.Policy.Validate(); err != nil {
		return sluice.Decision{}, fmt.Errorf("reference: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.clamp(now)
	p := params(&req)
	pp := algo.Prepare(p)
	k := keyOf(&req)
	var res algo.Verdict
	switch a := req.Policy.Algorithm; {
	case a == sluice.FixedWindowAlgorithm && refund:
		r.win[k], res = algo.FixedWindowRefund(p, r.win[k], t, t, req.Cost)
	case a == sluice.FixedWindowAlgorithm:
		r.win[k], res = algo.FixedWindowDebit(p, r.win[k], t, req.Cost)
	case a == sluice.SlidingWindowAlgorithm && refund:
		r.win[k], res = algo.SlidingWindowRefund(p, r.win[k], t, t, req.Cost)
	case a == sluice.SlidingWindowAlgorithm:
		r.win[k], res = algo.SlidingWindowDebit(p, r.win[k], t, req.Cost)
	case a == sluice.SlidingLogAlgorithm:
		l := r.logs[k]
		if l == nil {
			l = &algo.Log{}
			r.logs[k] = l
		}
		if refund {
			res = algo.SlidingLogRefund(p, l, t, t, req.Cost)
		} else {
			res = algo.SlidingLogDebit(p, l, t, req.Cost)
		}
	case refund:
		r.tat[k], res = pp.Refund(r.tat[k], t, req.Cost)
	default:
		r.tat[k], res = pp.Debit(r.tat[k], t, req.Cost)
	}
	return decisionOf(&req, res), nil
}

func (r *reference) Reset(_ context.Context, req sluice.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyOf(&req)
	delete(r.tat, k)
	delete(r.win, k)
	delete(r.logs, k)
	delete(r.pen, k)
	return nil
}

func (r *reference) Unblock(_ context.Context, now time.Time, req sluice.Request) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keyOf(&req)
	lifted := r.pen[k].Blocks(r.clamp(now))
	delete(r.pen, k)
	return lifted, nil
}

// penalty returns req's penalty in the algorithms' units, and whether it
// has one.
func penalty(req *sluice.Request) (algo.Penalty, bool) {
	q := req.Policy.Penalty
	if q.IsZero() {
		return algo.Penalty{}, false
	}
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	p := algo.Penalty{BlockFor: us(q.BlockFor), Factor: max(q.Factor, 1), MaxBlock: us(q.MaxBlock), ForgetAfter: us(q.ForgetAfter)}
	if q.MaxBlock == 0 {
		p.MaxBlock = us(sluice.MaxPeriod)
	}
	return p, true
}

// penalize decides req for cost at t under its penalty: a blocked key is
// refused, uncharged; otherwise the policy decides, and when commit is
// set its refusal is an offence. r.mu must be held.
func (r *reference) penalize(req *sluice.Request, t, cost int64, maxDelay time.Duration, commit bool) sluice.Decision {
	pen, ok := penalty(req)
	if !ok {
		return r.decide(req, t, cost, maxDelay, commit)
	}
	k := keyOf(req)
	b := r.pen[k]
	if b.Blocks(t) {
		own := verdictOf(r.decide(req, t, cost, maxDelay, false))
		if own.Allowed {
			own.ResetAfter = r.verdict(req, t, 0, 0, false).ResetAfter
		}
		return decisionOf(req, b.During(t, own))
	}
	d := r.decide(req, t, cost, maxDelay, commit)
	if commit && algo.Offends(verdictOf(d)) {
		b = pen.Offend(b, t)
		r.pen[k] = b
		d = decisionOf(req, b.During(t, verdictOf(d)))
		d.Offence = true
	}
	return d
}

func verdictOf(d sluice.Decision) algo.Verdict {
	return algo.Verdict{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay}
}

func (r *reference) Allow(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return r.one(now, req, true)
}

func (r *reference) Peek(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return r.one(now, req, false)
}

// Release and Renew: the reference decides the rate algorithms only, and
// makes no lease.
func (r *reference) Release(context.Context, time.Time, string, []int64) (bool, error) {
	return false, sluice.ErrInvalidLease
}

func (r *reference) Renew(context.Context, time.Time, string) (time.Duration, error) {
	return 0, sluice.ErrInvalidLease
}

func (r *reference) one(now time.Time, req sluice.Request, commit bool) (sluice.Decision, error) {
	if err := check(&req); err != nil {
		return sluice.Decision{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.penalize(&req, r.clamp(now), req.Cost, req.MaxDelay, commit)
	if d.RetryAfter == sluice.Never {
		return d, errCapacity
	}
	return d, nil
}

// AllowAll decides the requests without charging, each repeated (policy,
// key) with the cost of the requests before it; then charges them all, or
// reports the uncharged state of those that would have passed.
func (r *reference) AllowAll(_ context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if len(reqs) == 0 {
		return sluice.Decision{}, errors.New("reference: no requests")
	}
	if out != nil && len(out) != len(reqs) {
		return sluice.Decision{}, errors.New("reference: out has the wrong length")
	}
	for i := range reqs {
		if err := check(&reqs[i]); err != nil {
			return sluice.Decision{}, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.clamp(now)
	ds := make([]sluice.Decision, len(reqs))
	allowed, blocked := true, false
	for i := range reqs {
		cost := reqs[i].Cost
		for j := range i {
			if keyOf(&reqs[j]) == keyOf(&reqs[i]) {
				cost += reqs[j].Cost
			}
		}
		ds[i] = r.penalize(&reqs[i], t, cost, reqs[i].MaxDelay, false)
		if ds[i].RetryAfter == sluice.Never {
			return ds[i], errCapacity
		}
		allowed = allowed && ds[i].Allowed
		blocked = blocked || r.pen[keyOf(&reqs[i])].Blocks(t)
	}
	if !allowed && !blocked {
		// Each penalized policy that refused offends, once per key.
		for i := range reqs {
			pen, ok := penalty(&reqs[i])
			k := keyOf(&reqs[i])
			if !ok || ds[i].Allowed {
				continue
			}
			b := r.pen[k]
			offence := !b.Blocks(t)
			if offence {
				b = pen.Offend(b, t)
				r.pen[k] = b
			}
			ds[i] = decisionOf(&reqs[i], b.During(t, verdictOf(ds[i])))
			ds[i].Offence = offence
		}
	}
	for i := range reqs {
		switch {
		case allowed:
			// MaxDelay was checked against the summed cost above.
			r.decide(&reqs[i], t, reqs[i].Cost, 0, true)
		case ds[i].Allowed:
			ds[i] = r.decide(&reqs[i], t, 0, 0, false)
			ds[i].Delay = 0
		}
	}
	copy(out, ds)
	return algo.Combine(ds), nil
}
