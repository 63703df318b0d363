package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/ctxsleep"
)

// Limiter applies one or more policies to keys: a request is admitted only
// when every policy admits it, and when one denies, none is charged (so
// 10/s AND 1000/h can be enforced together).
//
// A Limiter is safe for concurrent use. Its policies can be replaced at run
// time with SetPolicies; a policy that is unchanged keeps its state, and a
// changed one starts afresh for every key (its buckets full, its windows
// empty).
type Limiter struct {
	store    Store
	policies atomic.Pointer[[]Policy]
}

// New returns a Limiter that applies policies, in order, through store.
func New(store Store, policies ...Policy) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("sluice: new limiter: nil store")
	}
	l := &Limiter{store: store}
	if err := l.SetPolicies(policies...); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicies replaces the limiter's policies. It validates all of them and
// changes nothing when one is invalid.
func (l *Limiter) SetPolicies(policies ...Policy) error {
	if len(policies) == 0 {
		return ErrNoPolicy
	}
	ps := make([]Policy, len(policies))
	for i, p := range policies {
		if err := p.Validate(); err != nil {
			return err
		}
		ps[i] = p
	}
	l.policies.Store(&ps)
	return nil
}

// Policies returns a copy of the limiter's policies.
func (l *Limiter) Policies() []Policy {
	return append([]Policy(nil), *l.policies.Load()...)
}

// Allow decides, without blocking, whether key may spend cost units now.
// A cost of 0 charges nothing and asks whether key has a unit left under
// every policy: for a budget whose cost is known only afterwards (see
// AllowEstimate and Debit).
func (l *Limiter) Allow(ctx context.Context, key string, cost int64) (d Decision, err error) {
	err = l.allow(ctx, &d, time.Time{}, key, cost)
	return d, err
}

// AllowAt is Allow at an explicit time, for simulations and tests. Stores
// that keep their own clock (Redis) may ignore now; see their docs.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, key string, cost int64) (d Decision, err error) {
	err = l.allow(ctx, &d, now, key, cost)
	return d, err
}

// allow is AllowAt writing its decision to *d.
func (l *Limiter) allow(ctx context.Context, d *Decision, now time.Time, key string, cost int64) (err error) {
	ps := *l.policies.Load()
	// One policy, the common case, goes straight to the store.
	if len(ps) == 1 && cost >= 1 {
		*d, err = l.store.Allow(ctx, now, Request{Policy: &ps[0], Key: key, Cost: cost})
		return err
	}
	return l.decide(ctx, d, now, ps, key, cost, 0)
}

// Peek returns the decision Allow would make now, without charging
// anything.
func (l *Limiter) Peek(ctx context.Context, key string, cost int64) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("sluice: %w, got %d", ErrInvalidCost, cost)
	}
	ps := *l.policies.Load()
	if len(ps) == 1 {
		return l.store.Peek(ctx, time.Time{}, Request{Policy: &ps[0], Key: key, Cost: cost})
	}
	ds := make([]Decision, len(ps))
	for i := range ps {
		d, err := l.store.Peek(ctx, time.Time{}, Request{Policy: &ps[i], Key: key, Cost: cost})
		if err != nil {
			return d, err
		}
		ds[i] = d
	}
	return algo.Combine(ds), nil
}

// decide decides key under ps, each request with SettleWithin within, and
// writes the decision to *d.
func (l *Limiter) decide(ctx context.Context, d *Decision, now time.Time, ps []Policy, key string, cost int64, within time.Duration) (err error) {
	if cost < 0 {
		return fmt.Errorf("sluice: %w: %d, want at least 0", ErrInvalidCost, cost)
	}
	if len(ps) == 1 {
		*d, err = l.store.Allow(ctx, now, Request{Policy: &ps[0], Key: key, Cost: cost, SettleWithin: within})
		return err
	}
	rp := reqPool.Get().(*[]Request)
	reqs := (*rp)[:0]
	for i := range ps {
		reqs = append(reqs, Request{Policy: &ps[i], Key: key, Cost: cost, SettleWithin: within})
	}
	*d, err = l.store.AllowAll(ctx, now, reqs, nil)
	clear(reqs) // keep no key alive in the pool
	*rp = reqs[:0]
	reqPool.Put(rp)
	return err
}

// reqPool holds the request slices of multi-policy decisions, so that a
// Limiter with several policies allocates none per call (a slice passed to
// Store.AllowAll, an interface method, would escape to the heap). Stores
// keep no reqs after returning, as the Store contract says.
var reqPool = sync.Pool{New: func() any {
	s := make([]Request, 0, 4)
	return &s
}}

// Release gives back what lease holds: the Lease of a Decision that Allow
// or Wait admitted under a concurrency policy. It reports whether it freed
// anything; releasing a lease again, or one that expired, frees nothing
// and is not an error (see the Store contract).
func (l *Limiter) Release(ctx context.Context, lease string) (bool, error) {
	return l.store.Release(ctx, time.Time{}, lease, nil)
}

// AllowEstimate is Allow for a request whose cost is known only once it
// has run (the tokens of an LLM call): it charges estimate units now (0:
// admit while key has a unit left) and, when it admits, returns a
// Decision whose Lease Settle takes, with the actual cost, within the
// given time. Unsettled by then, the estimate stays charged.
func (l *Limiter) AllowEstimate(ctx context.Context, key string, estimate int64, within time.Duration) (Decision, error) {
	if within <= 0 {
		return Decision{}, fmt.Errorf("sluice: allow estimate: settle within %v, want a positive time", within)
	}
	var d Decision
	err := l.decide(ctx, &d, time.Time{}, *l.policies.Load(), key, estimate, within)
	return d, err
}

// Settle settles the lease of a decision AllowEstimate admitted with the
// request's actual cost under every policy: the difference from the
// estimate is charged (even past the limit, into debt) or given back. It
// also frees what the lease holds under concurrency policies. A lease is
// settled once: Settle reports false, and changes nothing, for a lease
// settled or released already, or whose time to settle has passed.
func (l *Limiter) Settle(ctx context.Context, lease string, actual int64) (bool, error) {
	if actual < 0 {
		return false, fmt.Errorf("sluice: settle: %w: %d, want at least 0", ErrInvalidCost, actual)
	}
	n := len(*l.policies.Load())
	var buf [4]int64
	usage := buf[:0]
	for range n {
		usage = append(usage, actual)
	}
	return l.store.Release(ctx, time.Time{}, lease, usage)
}

// Debit charges key cost units under every rate policy whether or not
// they fit, for a cost known only afterwards: key may go into debt, and
// is refused until its policies have repaid it. The Decision combines the
// policies' as Allow does; it is Allowed iff the units fitted under every
// policy. Concurrency policies are not charged.
func (l *Limiter) Debit(ctx context.Context, key string, cost int64) (Decision, error) {
	return l.eachRate(ctx, key, cost, l.store.Debit)
}

// Refund gives key cost units back under every rate policy, for a charge
// that turned out too high. A refund never leaves key better off than
// before its first charge.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64) (Decision, error) {
	return l.eachRate(ctx, key, cost, l.store.Refund)
}

func (l *Limiter) eachRate(ctx context.Context, key string, cost int64, f func(context.Context, time.Time, Request) (Decision, error)) (Decision, error) {
	ps := *l.policies.Load()
	var buf [4]Decision
	ds := buf[:0]
	for i := range ps {
		if ps[i].Algorithm == ConcurrencyAlgorithm {
			continue
		}
		d, err := f(ctx, time.Time{}, Request{Policy: &ps[i], Key: key, Cost: cost})
		if err != nil {
			return d, err
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return Decision{}, fmt.Errorf("sluice: %w: the limiter has no rate policy to charge", ErrNotSupported)
	}
	return algo.Combine(ds), nil
}

// Reset puts key back to its initial state under every policy: its
// charges and debt forgotten, what it holds under concurrency policies
// freed.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	ps := *l.policies.Load()
	for i := range ps {
		if err := l.store.Reset(ctx, Request{Policy: &ps[i], Key: key}); err != nil {
			return err
		}
	}
	return nil
}

// Unblock lifts key's block under every policy with a Penalty and forgets
// its offences, leaving what the key has spent as it is. It reports
// whether the key was blocked under any of them.
func (l *Limiter) Unblock(ctx context.Context, key string) (bool, error) {
	ps := *l.policies.Load()
	lifted := false
	for i := range ps {
		if ps[i].Penalty.IsZero() {
			continue
		}
		ok, err := l.store.Unblock(ctx, time.Time{}, Request{Policy: &ps[i], Key: key})
		if err != nil {
			return lifted, err
		}
		lifted = lifted || ok
	}
	return lifted, nil
}

// Renew extends what lease holds by each concurrency policy's lease, for
// a request that runs longer than its lease, and returns the time until
// the first of them expires. It fails with an error wrapping
// ErrLeaseExpired when the lease holds nothing any more.
func (l *Limiter) Renew(ctx context.Context, lease string) (time.Duration, error) {
	return l.store.Renew(ctx, time.Time{}, lease)
}

// Wait blocks until key may spend cost units under every policy, then
// spends them; see WaitAll, which it calls. Under a concurrency policy it
// waits for a slot, polling as WaitAll says, and the Decision's Lease
// holds the slot until it is given to Release.
func (l *Limiter) Wait(ctx context.Context, key string, cost int64) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("sluice: %w, got %d", ErrInvalidCost, cost)
	}
	ps := *l.policies.Load()
	reqs := make([]Request, len(ps))
	for i := range ps {
		reqs[i] = Request{Policy: &ps[i], Key: key, Cost: cost}
	}
	return WaitAll(ctx, l.store, reqs)
}

// WaitAll blocks until store admits every request of reqs at once (all or
// nothing, as Store.AllowAll), then returns the decision. When a leaky
// bucket admits with a Delay, WaitAll also sleeps that Delay before it
// returns, so that callers proceed evenly spaced.
//
// WaitAll honours ctx: it returns ctx's error when ctx ends while it
// sleeps, and when ctx has a deadline that the wait would pass, it fails at
// once, without sleeping, with an error that wraps
// context.DeadlineExceeded.
//
// A refusal by a concurrency policy is waited for differently: its
// RetryAfter is when enough leases expire at the latest, while a holder's
// Release usually makes room sooner, and no store tells a waiter when. So
// WaitAll polls: it tries again after 1ms, then after twice as long each
// time, at most every LeasePoll, never later than the RetryAfter and until
// ctx's deadline (then it fails with an error wrapping
// context.DeadlineExceeded). A release is seen within LeasePoll; waiters
// are not served in the order they came. A rate policy refusing the same
// request still sets the earliest try, as it is exact. A request whose cost exceeds its capacity fails
// at once with ErrCostExceedsCapacity. A refusal made by a store's failure
// policy without a retry time is retried after a second. WaitAll sets the
// MaxDelay of reqs to the time left before the deadline.
//
// WaitAll waits on the store's clock when the store has one: a Now method
// that tells the time the store decides by when it is passed a zero now,
// and a Sleep(ctx, d) error method that waits on that clock
// (memstore.Store has both, from its Options): it reads ctx's deadline on
// that clock, the clock of Limiter.AllowAt's zero now, and sleeps with its
// Sleep, so that a test drives it with a fake clock whose Sleep advances
// its Now, and its waits take no real time. For other stores (Redis
// decides by Redis's TIME) it uses the system clock: time.Now and timers.
func WaitAll(ctx context.Context, store Store, reqs []Request) (Decision, error) {
	if len(reqs) == 0 {
		return Decision{}, ErrNoPolicy
	}
	c, ok := store.(clock)
	if !ok {
		c = systemClock{}
	}
	leases := false
	for i := range reqs {
		leases = leases || reqs[i].Policy.Algorithm == ConcurrencyAlgorithm
	}
	poll := time.Duration(0) // the last poll for a concurrency refusal
	for {
		now := c.Now()
		deadline, hasDeadline := ctx.Deadline()
		var maxDelay time.Duration
		if hasDeadline {
			if maxDelay = deadline.Sub(now); maxDelay <= 0 {
				return Decision{}, fmt.Errorf("sluice: wait: %w", context.DeadlineExceeded)
			}
		}
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		d, out, err := tryAll(ctx, store, reqs, maxDelay, leases)
		if err != nil {
			return d, err
		}
		if d.Allowed {
			if d.Delay > 0 {
				if err = c.Sleep(ctx, d.Delay); err != nil && d.Lease != "" {
					// Nobody will release what the lease holds.
					store.Release(context.WithoutCancel(ctx), time.Time{}, d.Lease, nil)
				}
			}
			return d, err
		}
		wait, err := retryIn(d, reqs, out, maxDelay)
		if err != nil {
			return d, err
		}
		if leases {
			if w, exact, ok := pollIn(reqs, out, poll); ok {
				wait, poll = w, w
				if hasDeadline && !exact {
					// A release may come before the deadline: poll up to it.
					wait = max(min(wait, deadline.Sub(c.Now())), time.Microsecond)
				}
			}
		}
		if hasDeadline && c.Now().Add(wait).After(deadline) {
			return d, fmt.Errorf("sluice: wait: retry in %v would pass the deadline: %w", wait, context.DeadlineExceeded)
		}
		if err := c.Sleep(ctx, wait); err != nil {
			return d, err
		}
	}
}

// clock is a store's clock, as WaitAll uses it.
type clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// systemClock is time.Now and timers.
type systemClock struct{}

func (systemClock) Now() time.Time                                   { return time.Now() }
func (systemClock) Sleep(ctx context.Context, d time.Duration) error { return ctxsleep.Sleep(ctx, d) }

// tryAll asks store to admit reqs now, on its own clock, all or nothing,
// each with maxDelay, and returns the decision and, when there is a
// maxDelay (a deadline) or a concurrency policy among reqs (leases), each
// request's own.
func tryAll(ctx context.Context, store Store, reqs []Request, maxDelay time.Duration, leases bool) (Decision, []Decision, error) {
	for i := range reqs {
		reqs[i].MaxDelay = maxDelay
	}
	if len(reqs) == 1 {
		d, err := store.Allow(ctx, time.Time{}, reqs[0])
		return d, []Decision{d}, err
	}
	var out []Decision
	if maxDelay > 0 || leases {
		out = make([]Decision, len(reqs))
	}
	d, err := store.AllowAll(ctx, time.Time{}, reqs, out)
	return d, out, err
}

// retryIn returns how long to wait before reqs, refused with d (and out,
// each one's decision when maxDelay is set), are tried again, or an error
// when waiting cannot get them under maxDelay.
func retryIn(d Decision, reqs []Request, out []Decision, maxDelay time.Duration) (time.Duration, error) {
	if maxDelay > 0 && d.Delay > 0 {
		// A leaky bucket's queue would make the request start after
		// the deadline; waiting does not change when it would start.
		return 0, fmt.Errorf("sluice: wait: the queue would delay the request %v, past the deadline: %w", d.Delay, context.DeadlineExceeded)
	}
	if maxDelay > 0 {
		// A leaky bucket's request starts when the queue ahead of it
		// has left, however long it waits for room: more than its
		// ResetAfter minus the millisecond it was rounded up by.
		for i, r := range reqs {
			if ahead := out[i].ResetAfter - time.Millisecond; r.Policy.Algorithm == LeakyBucketAlgorithm && ahead >= maxDelay {
				return 0, fmt.Errorf("sluice: wait: the queue of %s would delay the request past the deadline: %w", r.Policy, context.DeadlineExceeded)
			}
		}
	}
	if d.RetryAfter <= 0 {
		return time.Second, nil // a failure policy's refusal has no retry time
	}
	return d.RetryAfter, nil
}

// LeasePoll is the longest WaitAll waits between two tries of a request
// that a concurrency policy refused: a release is seen at most this late.
const LeasePoll = 25 * time.Millisecond

// pollIn returns how long WaitAll waits before it tries reqs again, when
// a concurrency policy refused them (out holds each request's decision):
// twice the last poll (1ms at first), at most LeasePoll and at most that
// policy's RetryAfter, and no sooner than a rate policy that refused
// them too admits them. It returns false when no concurrency policy
// refused them.
func pollIn(reqs []Request, out []Decision, last time.Duration) (wait time.Duration, exact, ok bool) {
	var rate, conc time.Duration
	refused := false
	for i := range reqs {
		if out[i].Allowed {
			continue
		}
		if reqs[i].Policy.Algorithm == ConcurrencyAlgorithm {
			refused = true
			conc = max(conc, out[i].RetryAfter)
		} else {
			rate = max(rate, out[i].RetryAfter)
		}
	}
	if !refused {
		return 0, false, false
	}
	step := min(max(2*last, time.Millisecond), LeasePoll)
	if conc > 0 {
		step = min(step, conc)
	}
	if rate >= step {
		// A rate refuses until then, exactly: no release helps sooner.
		return rate, true, true
	}
	return step, false, true
}
