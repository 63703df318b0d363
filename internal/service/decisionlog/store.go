package decisionlog

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Decision is what a door learns of one decision for the log: where it
// came from and the time the store decided at. Attach one to the
// request's context (With) before deciding through a Store.
type Decision struct {
	Door, Rule string
	// At is the time of the decision's first store call, set by Store.
	At time.Time
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

// Store decorates next so that the decisions made under a context with a
// Decision record their time in it: the first store call of a decision
// reads the time and every call of the same decision uses it.
//
// With a store that decides at the caller's time (memstore: next has a
// Now method), that time is passed to next, so it is exactly the time of
// the decision, on the store's own clock. A store that keeps its own time
// (Redis, which decides at its TIME) gets a zero time as before; At is
// then the service's clock read just before the call, earlier than
// Redis's by the call's latency (see docs/operations.md, "Decision log").
// Calls under a context without a Decision pass through unchanged.
func Store(next sluice.Store) sluice.Store {
	s := &store{Store: next}
	if c, ok := next.(clock); ok {
		s.clock = c
	}
	return s
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
		if s.clock != nil {
			d.At = s.clock.Now()
		} else {
			d.At = time.Now()
		}
	}
	if s.clock != nil {
		return d.At
	}
	return now
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
