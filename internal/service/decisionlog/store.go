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
	// At is the time of the decision's first store call, set by Store on
	// a store with a clock of its own that it can be given (memstore). It
	// stays zero on a store that reports the time it decided at (Redis:
	// see Saw).
	At time.Time
	// times are the times Saw was told, in order.
	times []limitTime
}

type limitTime struct {
	limit, key string
	at         time.Time
}

// Saw records in the Decision of ctx, if any, that the store decided req
// at at: the hook of a store that reports its times
// (redisstore.Options.OnDecided).
func Saw(ctx context.Context, req sluice.Request, at time.Time) {
	if d := From(ctx); d != nil {
		d.times = append(d.times, limitTime{req.Policy.Name, req.Key, at.UTC()})
	}
}

// AtOf returns the time the store reported (Saw) for the last decision
// of limit on key, or the zero time when it reported none: for Entry.At.
func (d *Decision) AtOf(limit, key string) time.Time {
	for i := len(d.times) - 1; i >= 0; i-- {
		if t := &d.times[i]; t.limit == limit && t.key == key {
			return t.at
		}
	}
	return time.Time{}
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
// and every call of the same decision is given that time, so the time is
// exactly the decision's, on the store's own clock.
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
