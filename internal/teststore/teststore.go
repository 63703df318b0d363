// Package teststore holds the stores that the tests of several packages
// share: a Redis store on a private redis-server, a memory store that,
// like the Redis store on a cluster, cannot decide some requests together,
// a store whose backend fails, a settable clock for the memory store, two
// memory stores on one such clock for differential tests, and the time
// zones of calendar policies.
package teststore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the zones must load on machines without a tz database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Redis returns a Redis store on a private redis-server that internal/testkit
// starts (skipping t when redis-server is missing, as testkit.StartRedis
// does); both end with t. Its timeout is generous enough for a loaded
// machine: the tests that use it are about decisions, not failures.
func Redis(t testing.TB, opts ...redisstore.Options) *redisstore.Store {
	t.Helper()
	srv := testkit.StartRedis(t)
	var o redisstore.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Addrs = []string{srv.Addr}
	return RedisOn(t, o)
}

// RedisOn returns a Redis store of opts on the servers opts.Addrs names (a
// testkit Redis server, cluster or proxy), closed when t ends; it fails t when
// the options are refused. A zero opts.Timeout is 10s, as in Redis.
func RedisOn(t testing.TB, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Each runs f as two subtests, "memory" on a new memory store and "redis"
// on Redis(t).
func Each(t *testing.T, f func(t *testing.T, store sluice.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) { f(t, Redis(t)) })
}

// Apart is a memory store whose AllowAll refuses requests on different
// keys with an error wrapping sluice.ErrNotAtomic, as the Redis store on a
// cluster refuses keys in different hash slots.
type Apart struct{ *memstore.Store }

// NewApart returns an Apart over a new memory store.
func NewApart() Apart { return Apart{memstore.New(memstore.Options{})} }

// AllowAll refuses reqs on more than one key, and otherwise decides them
// as the memory store does.
func (s Apart) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	for _, r := range reqs[1:] {
		if r.Key != reqs[0].Key {
			return sluice.Decision{}, fmt.Errorf("apart: %w", sluice.ErrNotAtomic)
		}
	}
	return s.Store.AllowAll(ctx, now, reqs, out)
}

// Clock is a settable clock for a memory store (its Options.Now and
// Sleep) and for the handlers under test: it stands still until the test
// sets or advances it, and its Sleep advances it at once. It is safe for
// concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep advances the clock by d, at once, and returns ctx's error.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// Twins returns two memory stores on one Clock at start, for a
// differential test: it sends both the same requests, each through a
// different path, advancing the clock between requests, and compares what
// the two decide.
func Twins(start time.Time) (a, b *memstore.Store, clock *Clock) {
	clock = NewClock(start)
	a = memstore.New(memstore.Options{Now: clock.Now})
	b = memstore.New(memstore.Options{Now: clock.Now})
	return a, b, clock
}

// Zone returns the time zone of the IANA name, from Go's embedded
// database when the machine has none; it fails t when there is no such
// zone.
func Zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// Failing is a store whose backend fails: every call returns Err, or,
// when Degraded is set, decides *Degraded for every request (the decision
// a failure policy makes while the backend is down) and returns Err from
// the calls that return no decision. Tests of the doors use it to check
// how each one renders a failing or degraded store.
type Failing struct {
	Err      error
	Degraded *sluice.Decision
}

var _ sluice.Store = Failing{}

// Allow returns *Degraded, or Err.
func (f Failing) Allow(context.Context, time.Time, sluice.Request) (sluice.Decision, error) {
	if f.Degraded != nil {
		return *f.Degraded, nil
	}
	return sluice.Decision{}, f.Err
}

// AllowAll writes *Degraded to every element of out and returns it, or
// returns Err.
func (f Failing) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if f.Degraded != nil {
		for i := range out {
			out[i] = *f.Degraded
		}
	}
	return f.Allow(ctx, now, sluice.Request{})
}

// Peek is Allow.
func (f Failing) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return f.Allow(ctx, now, req)
}

// Debit is Allow.
func (f Failing) Debit(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return f.Allow(ctx, now, req)
}

// Refund is Allow.
func (f Failing) Refund(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return f.Allow(ctx, now, req)
}

// Release returns Err.
func (f Failing) Release(context.Context, time.Time, string, []int64) (bool, error) {
	return false, f.Err
}

// Renew returns Err.
func (f Failing) Renew(context.Context, time.Time, string) (time.Duration, error) {
	return 0, f.Err
}

// Reset returns Err.
func (f Failing) Reset(context.Context, sluice.Request) error { return f.Err }

// Unblock returns Err.
func (f Failing) Unblock(context.Context, time.Time, sluice.Request) (bool, error) {
	return false, f.Err
}
