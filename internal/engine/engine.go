// Package engine decides one request under several checks. It is the one
// implementation behind Sluice's four front doors (the net/http
// middleware, the gRPC interceptors, the decision API and Envoy's rate
// limit service): each door parses its protocol into Checks, calls Decide
// and renders the Outcome, so that the meaning of shadow limits, of limits
// charged after the response and of costs that can never pass is written
// here once.
//
// The rules, for one request:
//   - The enforced checks are decided together, all or nothing, with one
//     Store.AllowAll call (Store.Allow for one): when one refuses, none is
//     charged.
//   - A request that can never be admitted is refused with RetryAfter
//     sluice.Never and nothing is charged, without asking the store to
//     charge anything: one check whose cost exceeds its policy's capacity,
//     or several checks of the request that charge the same (policy, key)
//     and whose summed cost exceeds it. It is a refusal, never an error.
//   - Deferred checks (charged by the door after the response, such as
//     httplimit's ChargeOn) are only peeked; when one refuses, the request
//     is refused and nothing is charged.
//   - Shadow checks are dry runs, decided after the enforced ones and apart
//     from them: charged when the request was admitted, peeked when it was
//     refused, never refusing it. Shadow checks that share a Group are
//     decided together, all or nothing.
//   - Checks that are not charged report the state without the charge
//     (State).
//   - Enforced checks of concurrency policies hold their units under the
//     lease of Outcome.Decision, which the door releases when the request
//     ends; a shadow or deferred check cannot hold one (Leases).
//   - A check of a budget (Budget) decides even at cost 0: admitted while
//     a unit is left. An enforced check with SettleWithin charges its Cost
//     as an estimate, which the door settles with the actual cost through
//     the same lease (Settle).
//
// The package also holds what Sluice's stores share on top of the root
// package: the translation between a sluice.Policy and internal/algo's
// Params, and between algo's View and a sluice.State (algo.go). The
// combining of several decisions into one (algo.Combine, algo.Decider) is
// in internal/algo, where the root's Limiter can use it too.
package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Mode says how a check takes part in the decision.
type Mode uint8

// The modes.
const (
	// Enforced checks are charged all or nothing and refuse the request.
	Enforced Mode = iota
	// Shadow checks are dry runs: decided and charged apart, they never
	// refuse the request.
	Shadow
	// Deferred checks refuse the request as enforced ones do but are only
	// peeked: the caller charges them later (after the response).
	Deferred
)

// Check is one limit applied to a request: the store request that
// charges it, and how it takes part in the verdict.
type Check struct {
	// Request names the counter (Policy and Key) and what the request
	// charges to it (Cost; MaxDelay bounds a leaky bucket's Delay, and a
	// positive SettleWithin makes Cost an estimate that the door settles
	// through the lease of Outcome.Decision). It is sent to the store as
	// it is. A Cost below 1 charges nothing: the check is reported with
	// State and takes no part in the verdict. Policy must not be nil; it
	// is only read, and points best at a policy that outlives the request
	// (a door's configuration), since the store call makes it escape.
	sluice.Request
	Mode Mode
	// Group, when not zero, decides the shadow checks that share it
	// together, all or nothing (an Envoy descriptor's limits). Shadow
	// checks of group 0 are decided one by one.
	Group int
	// Budget makes a Cost of 0 decide too: a check of a budget whose cost
	// is known only afterwards, admitted while a unit is left and charged
	// nothing (see sluice.Store).
	Budget bool
}

// counted reports whether c takes part in a decision: it charges, or it
// is a check of a budget.
func counted(c *Check) bool { return c.Cost >= 1 || c.Budget }

// CheckResult is one check's part of an Outcome.
type CheckResult struct {
	// Decision is the check's own decision: for a charged check, the
	// store's; for one that was not charged, its state without the charge
	// (see State). A check that can never pass has RetryAfter Never.
	Decision sluice.Decision
	// Err is the store's error for this check, if any.
	Err error
	// Charged reports that the check's cost was counted.
	Charged bool
	// Denied reports that this check refuses the request (for a shadow
	// check: would have refused it).
	Denied bool
}

// Outcome is the decision on a request.
type Outcome struct {
	// Allowed reports that every enforced and deferred check admitted the
	// request; the enforced ones are then charged. A request with no such
	// check is allowed.
	Allowed bool
	// Decision combines the decisions of the enforced and deferred checks
	// as the Store contract's AllowAll does (algo.Combine); its RetryAfter
	// is sluice.Never for a request that can never be admitted, and
	// Degraded reports that the store's failure policy decided.
	Decision sluice.Decision
	// Decider is the index of the deciding check among the enforced and
	// deferred ones (the one that refused with the longest wait, else the
	// one with the fewest units left), or -1 when there is none.
	Decider int
	// Err is the store's error on the enforced or deferred checks: the
	// request was not decided, Allowed is false and nothing was charged.
	Err error
	// DryRunDenied reports that a shadow check would have refused.
	DryRunDenied bool
}

// Never reports whether the request can never be admitted: a check or the
// sum of its checks on one (policy, key) exceeds that policy's capacity.
func (o *Outcome) Never() bool {
	return o.Err == nil && !o.Allowed && o.Decision.RetryAfter == sluice.Never
}

// NotAtomic reports whether the request was not decided because the store
// can never decide its checks together, all or nothing: their keys live
// apart (an error wrapping sluice.ErrNotAtomic, such as keys in different
// Redis Cluster hash slots). Nothing was charged, and the same checks fail
// the same way every time, so a door answers it as a request to change,
// not as an outage to retry: /v1/check 422, the middleware 500 (never
// failed open), Envoy's RLS FailedPrecondition.
func (o *Outcome) NotAtomic() bool {
	return o.Err != nil && errors.Is(o.Err, sluice.ErrNotAtomic)
}

// scratch holds the buffers of one Decide call of several checks that
// decide, pooled so that a decision allocates nothing of its own (a slice
// handed to Store.AllowAll, an interface method, would escape to the
// heap).
type scratch struct {
	reqs []sluice.Request  // the store requests of the enforced checks
	out  []sluice.Decision // the store's decision on each request
	ds   []sluice.Decision // the decisions combined into the outcome
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reset empties sc for the next call, keeping no key alive; the rest is
// written anew.
func (sc *scratch) reset() {
	clear(sc.reqs)
	sc.reqs, sc.out, sc.ds = sc.reqs[:0], sc.out[:0], sc.ds[:0]
}

// release puts sc back in the pool.
func (sc *scratch) release() {
	sc.reset()
	scratchPool.Put(sc)
}

// Buffers are Decide's buffers for a door that keeps them in its own
// pooled scratch, instead of a round trip through the engine's pool on
// every request of several checks. The zero value is ready to use; a
// Buffers serves one call at a time.
type Buffers struct{ sc scratch }

// Decide is the package's Decide with b's buffers.
func (b *Buffers) Decide(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, o *Outcome) {
	decide(ctx, store, now, checks, res, o, &b.sc)
}

// Decide decides a request under checks through store at now (a zero now
// means the store's clock), writes each check's result to res, which must
// have len(checks), and the outcome to *o. It keeps none of them after it
// returns.
func Decide(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, o *Outcome) {
	decide(ctx, store, now, checks, res, o, nil)
}

// decide is Decide with the buffers sc, or (nil) buffers from the pool
// when the request has several checks that decide.
func decide(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, o *Outcome, sc *scratch) {
	clear(res)
	*o = Outcome{Allowed: true, Decision: sluice.Decision{Allowed: true}, Decider: -1}
	var n counts
	n.scan(checks)
	if n.decided > 1 || n.deferred {
		if sc == nil {
			sc = scratchPool.Get().(*scratch)
			defer sc.release()
		} else {
			defer sc.reset()
		}
	}
	if n.decided > 0 {
		refused, peeked := false, false // refused before the store charged anything
		for i := range checks {
			c := &checks[i]
			// No sum of the checks charged together exceeds their total.
			if decides(c) && n.total > c.Policy.Capacity() && impossible(checks, i) {
				res[i].Decision, res[i].Denied = never(c.Policy), true
				refused = true
			}
		}
		if !refused && n.deferred {
			refused, peeked = peekDeferred(ctx, store, now, checks, res, o), true
		}
		switch {
		case o.Err != nil:
		case refused:
			reportUncharged(ctx, store, now, checks, res, peeked)
			o.settle(checks, res, sc, nil, false)
		default:
			var d sluice.Decision
			charged, err := charge(ctx, store, now, checks, res, n.enforced, sc, &d)
			if err != nil && errors.Is(err, sluice.ErrCostExceedsCapacity) {
				// A store that finds a cost it can never admit (the
				// checks above should have found it) refuses it too.
				d, charged, err = sluice.Decision{RetryAfter: sluice.Never}, &d, nil
				for i := range checks {
					if charges(&checks[i]) {
						res[i] = CheckResult{Decision: d, Denied: true}
					}
				}
			}
			if err != nil {
				o.Allowed, o.Decision, o.Err = false, sluice.Decision{}, err
			} else {
				o.settle(checks, res, sc, charged, n.enforced > 0)
			}
		}
	}
	if o.Err == nil && n.shadows {
		o.DryRunDenied = decideShadows(ctx, store, now, checks, res, o.Allowed)
	}
	if n.free {
		for i := range checks {
			if !counted(&checks[i]) {
				res[i].Decision, res[i].Err = State(ctx, store, now, checks[i])
			}
		}
	}
}

// decides reports whether c takes part in the verdict: an enforced or
// deferred check that charges.
func decides(c *Check) bool { return c.Mode != Shadow && counted(c) }

// charges reports whether c is charged with the verdict: an enforced check
// that charges.
func charges(c *Check) bool { return c.Mode == Enforced && counted(c) }

// Sent reports whether Decide sends c to the store with the enforced
// checks: the requests of the store call, in the order of their checks,
// are those of the checks Sent holds for, which is the order Settle's
// usage and a lease's estimates follow.
func Sent(c *Check) bool { return charges(c) }

// counts is what scan finds in a request's checks.
type counts struct {
	// total is the summed cost of the checks that decide (MaxInt64 if it
	// overflows), a bound on the summed cost of any of them on one
	// (policy, key), which impossible computes.
	total int64
	// decided and enforced count the checks that decide and those that
	// are charged with the verdict.
	decided, enforced int
	// shadows, deferred and free report shadow checks that charge,
	// deferred checks that charge and checks that charge nothing.
	shadows, deferred, free bool
}

// scan counts checks into n, which starts at zero.
func (n *counts) scan(checks []Check) {
	for i := range checks {
		c := &checks[i]
		switch {
		case !counted(c):
			n.free = true
			continue
		case c.Mode == Shadow:
			n.shadows = true
			continue
		case c.Mode == Deferred:
			n.deferred = true
		default:
			n.enforced++
		}
		n.decided++
		if n.total > math.MaxInt64-c.Cost {
			n.total = math.MaxInt64
		} else {
			n.total += c.Cost
		}
	}
}

// impossible reports whether check i can never pass: its cost, summed with
// that of the other checks decided with it (the enforced and deferred
// checks, or its shadow group) on the same policy and key, exceeds the
// policy's capacity.
func impossible(checks []Check, i int) bool {
	c := &checks[i]
	sum := c.Cost
	for j := range checks {
		o := &checks[j]
		if j == i || !counted(o) || o.Key != c.Key || *o.Policy != *c.Policy || !together(c, o) {
			continue
		}
		if sum > math.MaxInt64-o.Cost {
			return true
		}
		sum += o.Cost
	}
	return sum > c.Policy.Capacity()
}

// together reports whether a and b are decided in one all-or-nothing call.
func together(a, b *Check) bool {
	if a.Mode == Shadow || b.Mode == Shadow {
		return a.Mode == b.Mode && a.Group != 0 && a.Group == b.Group
	}
	return true
}

// never is the decision on a check that can never pass.
func never(p *sluice.Policy) sluice.Decision {
	return sluice.Decision{Limit: p.Limit, RetryAfter: sluice.Never}
}

// peekDeferred peeks the deferred checks and reports whether one refuses
// the request; a store error is set in o. A penalized limit's refused
// peek is then asked again as a check of cost 0 (is a unit left?), which
// is its offence when none is: a limit charged after the response is
// charged only for the requests that pass, so its refusal before the
// request is the one that must start a block.
func peekDeferred(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, o *Outcome) bool {
	refused := false
	for i := range checks {
		c := &checks[i]
		if c.Mode != Deferred || !counted(c) {
			continue
		}
		d, err := store.Peek(ctx, now, request(c))
		if err == nil && !d.Allowed && d.RetryAfter != sluice.Never && c.Policy.Penalty != (sluice.Penalty{}) {
			var od sluice.Decision
			od, err = store.Allow(ctx, now, sluice.Request{Policy: c.Policy, Key: c.Key})
			if err == nil && !od.Allowed {
				d = od
			}
		}
		res[i] = CheckResult{Decision: d, Err: err, Denied: err == nil && !d.Allowed}
		if err != nil {
			o.Allowed, o.Decision, o.Err = false, sluice.Decision{}, err
			return true
		}
		refused = refused || !d.Allowed
	}
	return refused
}

// reportUncharged fills the results of the checks that decide and are not
// decided yet, for a request refused before the store charged anything
// (see reportOne). peeked reports that the deferred checks were peeked
// already.
func reportUncharged(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, peeked bool) {
	for i := range checks {
		if decides(&checks[i]) && !(checks[i].Mode == Deferred && peeked) {
			reportOne(ctx, store, now, checks, res, i)
		}
	}
}

// reportOne fills the result of check i, of a request or shadow group
// refused before the store charged anything, unless another refusal
// decided it already: the check reports its state without the charge, and
// one that can never pass is refused with RetryAfter Never.
func reportOne(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, i int) {
	r := &res[i]
	impossible := r.Denied && r.Decision.RetryAfter == sluice.Never
	if r.Denied && !impossible {
		return // decided already
	}
	d, err := State(ctx, store, now, checks[i])
	*r = CheckResult{Decision: d, Err: err, Denied: err == nil && !d.Allowed}
	if impossible {
		r.Decision.Allowed, r.Decision.RetryAfter, r.Denied = false, sluice.Never, true
	}
}

// charge charges the n enforced checks that charge, all or nothing, in
// one store call (Allow for one, AllowAll for several, with sc's
// buffers), writes each one's result, and returns the store's combined
// decision: the one check's own decision, or *buf.
func charge(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, n int, sc *scratch, buf *sluice.Decision) (combined *sluice.Decision, err error) {
	combined = buf
	switch n {
	case 0:
		*combined = sluice.Decision{Allowed: true}
		return combined, nil
	case 1:
		for i := range checks {
			if charges(&checks[i]) {
				err = allowOne(ctx, store, now, &checks[i], &res[i].Decision)
				combined = &res[i].Decision
				break
			}
		}
	default:
		for i := range checks {
			if charges(&checks[i]) {
				sc.reqs = append(sc.reqs, request(&checks[i]))
			}
		}
		if cap(sc.out) < n {
			sc.out = make([]sluice.Decision, n)
		}
		sc.out = sc.out[:n]
		*combined, err = store.AllowAll(ctx, now, sc.reqs, sc.out)
		k := 0
		for i := range checks {
			if charges(&checks[i]) {
				res[i].Decision = sc.out[k]
				k++
			}
		}
	}
	allowed, degraded := combined.Allowed, combined.Degraded
	for i := range checks {
		if !charges(&checks[i]) {
			continue
		}
		r := &res[i]
		switch {
		case err != nil:
			*r = CheckResult{Err: err}
		case degraded:
			// The failure policy decided the whole: its verdict is every
			// check's.
			r.Decision.Allowed, r.Decision.Degraded = allowed, true
		}
		r.Charged = err == nil && allowed
		r.Denied = err == nil && !r.Decision.Allowed
	}
	return combined, err
}

// allowOne charges c alone with the store's Allow and writes the store's
// decision to *d, where it stays: the Decision is not copied again.
func allowOne(ctx context.Context, store sluice.Store, now time.Time, c *Check, d *sluice.Decision) (err error) {
	*d, err = store.Allow(ctx, now, c.Request)
	return err
}

// settle sets o's verdict, deciding check and combined decision from the
// results of the checks that decide. charged is the store's combined
// decision on the enforced checks, when they were sent (sent; else nil):
// it is the outcome's decision when no deferred check took part, and is
// combined with the deferred checks' decisions otherwise. sc is nil only
// for a request of one check that decides.
func (o *Outcome) settle(checks []Check, res []CheckResult, sc *scratch, charged *sluice.Decision, sent bool) {
	allowed, deferred := true, false
	k := -1
	for i := range checks {
		c := &checks[i]
		if !decides(c) {
			continue
		}
		deferred = deferred || c.Mode == Deferred
		allowed = allowed && !res[i].Denied
		if k < 0 || rank(&res[i].Decision).Precedes(rank(&res[k].Decision)) {
			k = i // Decider's choice, without copying the decisions
		}
	}
	o.Decider = k
	switch {
	case sent && !deferred:
		o.Decision = *charged
	case sc == nil:
		o.Decision = algo.Combine([]sluice.Decision{res[k].Decision})
	default:
		ds := sc.ds[:0]
		for i := range checks {
			if c := &checks[i]; decides(c) && (!sent || c.Mode == Deferred) {
				ds = append(ds, res[i].Decision)
			}
		}
		if sent {
			ds = append(ds, *charged)
		}
		sc.ds = ds
		o.Decision = algo.Combine(ds)
		if sent {
			o.Decision.Lease = charged.Lease // what the charged checks hold
		}
	}
	if sent && !charged.Allowed {
		allowed = false
	}
	o.Allowed = allowed
	o.Decision.Allowed = allowed
}

// decideShadows decides the shadow checks: charged when passed (the
// request was admitted), peeked otherwise. It reports whether one would
// have refused.
func decideShadows(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, passed bool) bool {
	denied := false
	var buf [4]int
	for i := range checks {
		c := &checks[i]
		if c.Mode != Shadow || !counted(c) {
			continue
		}
		group := append(buf[:0], i)
		if c.Group != 0 {
			if first(checks, i) != i {
				continue // decided with the first of its group
			}
			for j := i + 1; j < len(checks); j++ {
				if inGroup(&checks[j], c.Group) {
					group = append(group, j)
				}
			}
		}
		decideGroup(ctx, store, now, checks, res, passed, group)
		for _, j := range group {
			denied = denied || res[j].Denied
		}
	}
	return denied
}

// inGroup reports whether c is a shadow check of group g that charges.
func inGroup(c *Check, g int) bool { return c.Mode == Shadow && c.Group == g && counted(c) }

// first returns the index of the first check of check i's shadow group.
func first(checks []Check, i int) int {
	for j := range i {
		if inGroup(&checks[j], checks[i].Group) {
			return j
		}
	}
	return i
}

// decideGroup decides the shadow checks of group all or nothing: charged
// when passed, else (or when one can never pass) reported without the
// charge.
func decideGroup(ctx context.Context, store sluice.Store, now time.Time, checks []Check, res []CheckResult, passed bool, group []int) {
	for _, j := range group {
		if impossible(checks, j) {
			res[j].Decision, res[j].Denied = never(checks[j].Policy), true
			passed = false
		}
	}
	if !passed {
		for _, j := range group {
			reportOne(ctx, store, now, checks, res, j)
		}
		return
	}
	if len(group) == 1 {
		j := group[0]
		d, err := store.Allow(ctx, now, request(&checks[j]))
		res[j] = CheckResult{Decision: d, Err: err, Charged: err == nil && d.Allowed, Denied: err == nil && !d.Allowed}
		return
	}
	reqs := make([]sluice.Request, len(group))
	out := make([]sluice.Decision, len(group))
	for k, j := range group {
		reqs[k] = request(&checks[j])
	}
	d, err := store.AllowAll(ctx, now, reqs, out)
	for k, j := range group {
		res[j] = CheckResult{Decision: out[k], Err: err, Charged: err == nil && d.Allowed, Denied: err == nil && !out[k].Allowed}
	}
}

// State returns the state of check c without charging it: Allowed and
// RetryAfter say whether its cost would fit now, Remaining is what is left
// as the state stands, and ResetAfter is as if the cost had been charged
// (the end of the window, for a fixed window). A check whose cost is below
// 1 is allowed; one whose cost exceeds its policy's capacity is refused
// with RetryAfter Never.
func State(ctx context.Context, store sluice.Store, now time.Time, c Check) (sluice.Decision, error) {
	capacity := c.Policy.Capacity()
	if capacity < 1 {
		// A limit of zero (Envoy's requests_per_unit 0) admits nothing.
		if c.Cost < 1 {
			return sluice.Decision{Allowed: true}, nil
		}
		return never(c.Policy), nil
	}
	ask := PeekCost(*c.Policy, c.Cost)
	d, err := store.Peek(ctx, now, sluice.Request{Policy: c.Policy, Key: c.Key, Cost: ask})
	if err != nil {
		return d, err
	}
	return FromPeek(d, c.Cost, ask), nil
}

// PeekCost is the cost State asks the store about for a check of cost on
// a policy whose capacity is at least 1: at least 1, at most the capacity.
func PeekCost(p sluice.Policy, cost int64) int64 {
	return min(max(cost, 1), p.Capacity())
}

// FromPeek turns d, the store's peek at ask = PeekCost(policy, cost)
// units, into State's decision on cost.
func FromPeek(d sluice.Decision, cost, ask int64) sluice.Decision {
	if d.Allowed {
		d.Remaining += ask // Peek's Remaining is after the units it was asked about
		d.Delay = 0
	}
	switch {
	case cost < 1:
		d.Allowed, d.RetryAfter = true, 0
	case ask != cost:
		d.Allowed, d.RetryAfter = false, sluice.Never
	}
	return d
}

// request returns the store request of check c. A shadow check's
// estimate is not settled: it is a dry run.
func request(c *Check) sluice.Request {
	r := c.Request
	if c.Mode == Shadow {
		r.SettleWithin = 0
	}
	return r
}

// Settle settles the estimates of a request that Decide admitted under
// checks, through the lease of its Outcome.Decision: actual[i] is the
// actual cost of checks[i], or negative (or missing) to keep its estimate.
// It reports whether the lease had anything left to free or settle (see
// sluice.Store's Release).
func Settle(ctx context.Context, store sluice.Store, now time.Time, lease string, checks []Check, actual []int64) (bool, error) {
	var buf [8]int64
	usage := buf[:0]
	for i := range checks {
		if charges(&checks[i]) {
			a := int64(-1)
			if i < len(actual) {
				a = actual[i]
			}
			usage = append(usage, a) // in the order Decide sent the requests
		}
	}
	return store.Release(ctx, now, lease, usage)
}

// rank returns what Decider compares of d.
func rank(d *sluice.Decision) algo.Rank {
	return algo.Rank{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Remaining: d.Remaining}
}

// Decider returns the index of the deciding decision of ds, as the Store
// contract's AllowAll chooses it (see algo.Decider): a denying one with the
// longest wait (Never the longest), else the one with the fewest units
// left; ties go to the first. It returns -1 for no decisions.
func Decider(ds []sluice.Decision) int { return algo.Decider(ds) }

// Precedes reports whether d decides before e in Decider's order (see
// algo.Precedes), for a door that picks among its own results. It reads
// them in place (through algo.Rank), without copying them.
func Precedes(d, e *sluice.Decision) bool { return rank(d).Precedes(rank(e)) }
