package decisionlog

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Decision is what a door learns of one decision for the log: where it
// came from and the time the store decided at. Attach one to the
// request's context (With) before deciding through a Store. It is not
// safe for concurrent use: one decision's store calls come one after the
// other.
type Decision struct {
	Door, Rule string
	// At is the time of the decision's first store call: the time the
	// store reported for it (Saw), else the time Store gave it (a store
	// with a clock of its own that tells nothing). It stays zero on a
	// store that reports nothing and was given no time.
	At time.Time
	// Order is the order the store reported for the first call (Saw), or
	// 0: see Record.Order.
	Order uint64
	// times are the times Saw was told, in order.
	times []limitTime
}

type limitTime struct {
	limit, key string
	at         time.Time
	order      uint64
}

// Saw records in the Decision of ctx, if any, that the store decided req
// at at, with order (0 for a store that gives none): the hook of a store
// that reports its times (memstore.Options.OnDecided,
// redisstore.Options.OnDecided). The first call's time and order are the
// decision's (At and Order).
func Saw(ctx context.Context, req sluice.Request, at time.Time, order uint64) {
	if d := From(ctx); d != nil {
		at = at.UTC()
		if len(d.times) == 0 {
			d.At, d.Order = at, order
		}
		d.times = append(d.times, limitTime{req.Policy.Name, req.Key, at, order})
	}
}

// AtOf returns the time the store reported (Saw) for the last decision
// of limit on key, or the zero time when it reported none: for Entry.At.
func (d *Decision) AtOf(limit, key string) time.Time {
	if t := d.last(limit, key); t != nil {
		return t.at
	}
	return time.Time{}
}

// OrderOf returns the order the store reported (Saw) for the last
// decision of limit on key, or 0: for Entry.Order.
func (d *Decision) OrderOf(limit, key string) uint64 {
	if t := d.last(limit, key); t != nil {
		return t.order
	}
	return 0
}

func (d *Decision) last(limit, key string) *limitTime {
	for i := len(d.times) - 1; i >= 0; i-- {
		if t := &d.times[i]; t.limit == limit && t.key == key {
			return t
		}
	}
	return nil
}

type decisionKey struct{}

// With returns ctx carrying d.
func With(ctx context.Context, d *Decision) context.Context {
	return context.WithValue(ctx, decisionKey{}, d)
}

// From returns the Decision of ctx, or nil.
func From(ctx context.Context) *Decision {
	d, _ := ctx.Value(decisionKey{}).(*Decision)
	return d
}

// clock is a store with a clock of its own (memstore).
type clock interface{ Now() time.Time }

// Store decorates next so that the decisions (Allow, AllowAll, Peek and
// Debit) made under a context with a Decision are made at one time,
// recorded in it: the first store call of a decision reads next's clock
// and every call of the same decision is given that time (or the time
// the store reported for the first call, when it reports them to Saw),
// so that the calls of a decision are decided together on the store's
// own clock. The memory store decides a call at a later time when a
// shard has seen one (its time never steps back): with its
// Options.OnDecided set to Saw, the log has the times it decided at.
//
// Store returns next itself when next has no Now method: such a store
// (Redis, which decides at its TIME) reports the time of each decision to
// Saw, which the doors log (see Record.Stamp). Calls under a context
// without a Decision pass through unchanged.
func Store(next sluice.Store) sluice.Store {
	c, ok := next.(clock)
	if !ok {
		return next
	}
	return &store{Store: next, clock: c}
}

type store struct {
	sluice.Store
	clock clock
}

// Unwrap returns the store beneath, for metrics.Underlying.
func (s *store) Unwrap() sluice.Store { return s.Store }

func (s *store) at(ctx context.Context, now time.Time) time.Time {
	if !now.IsZero() {
		return now
	}
	d := From(ctx)
	if d == nil {
		return now
	}
	if d.At.IsZero() {
		d.At = s.clock.Now()
	}
	return d.At
}

func (s *store) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.Store.Allow(ctx, s.at(ctx, now), req)
}

func (s *store) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	return s.Store.AllowAll(ctx, s.at(ctx, now), reqs, out)
}

func (s *store) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.Store.Peek(ctx, s.at(ctx, now), req)
}

func (s *store) Debit(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.Store.Debit(ctx, s.at(ctx, now), req)
}
