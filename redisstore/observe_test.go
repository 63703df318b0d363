package redisstore

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestObserve checks what Options.Observe is told of each script call:
// its script, its context, and on Redis Cluster the slot and master of
// its key; nothing else is called for a local refusal.
func TestObserve(t *testing.T) {
	type seen struct {
		call Call
		ctx  context.Context
	}
	run := func(t *testing.T, addrs []string, cluster bool) {
		var mu sync.Mutex
		var calls []seen
		st := newTestStore(t, addrs, Options{Failure: FailError, MaxBatch: 1, Observe: func(ctx context.Context, c Call) {
			mu.Lock()
			calls = append(calls, seen{c, ctx})
			mu.Unlock()
		}})
		if cluster {
			// The store reads which master holds which slot after its
			// first call, in the background: wait for it, so that every
			// call below names its master.
			warm := sluice.GCRA(1, time.Hour, 1).Named("warm-up")
			if _, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &warm, Key: "k", Cost: 1}); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the slot map", func() bool { return st.breakers.slots.Load() != nil })
			mu.Lock()
			calls = nil
			mu.Unlock()
		}
		type ctxKey struct{}
		ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
		gcra, window := sluice.GCRA(1, time.Hour, 1).Named("g"), sluice.FixedWindow(1, time.Hour).Named("w")
		allow := func(p *sluice.Policy) func() error {
			return func() error {
				_, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: p, Key: "k", Cost: 1})
				return err
			}
		}
		steps := []struct {
			script string
			do     func() error
		}{
			{"tat_single", allow(&gcra)},
			{"single", allow(&window)},
			{"usage", func() error {
				_, err := st.Debit(ctx, time.Time{}, sluice.Request{Policy: &window, Key: "k", Cost: 3})
				return err
			}},
			// In debt: refused by Redis, then locally, with no call to
			// Redis, so nothing observed.
			{"single", allow(&window)},
			{"", allow(&window)},
		}
		for i, s := range steps {
			mu.Lock()
			n := len(calls)
			mu.Unlock()
			start := time.Now()
			if err := s.do(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			mu.Lock()
			got := slices.Clone(calls[n:])
			mu.Unlock()
			if s.script == "" {
				if len(got) != 0 {
					t.Errorf("step %d, a local refusal: observed %+v, want nothing", i, got)
				}
				continue
			}
			if len(got) != 1 {
				t.Fatalf("step %d: observed %d calls, want 1: %+v", i, len(got), got)
			}
			c := got[0].call
			if c.Script != s.script || c.Err != nil || c.Start.Before(start) || c.Duration <= 0 || got[0].ctx.Value(ctxKey{}) != "caller" {
				t.Errorf("step %d: observed %+v, want script %q, no error, a start after %v, the caller's context", i, c, s.script, start)
			}
			if !cluster && (c.Slot != -1 || c.Master != "") {
				t.Errorf("step %d: slot %d, master %q on a single Redis; want -1 and none", i, c.Slot, c.Master)
			}
			if cluster && (c.Slot < 0 || c.Slot >= 16384 || !slices.Contains(addrs, c.Master)) {
				t.Errorf("step %d: slot %d, master %q; want a slot and one of %v", i, c.Slot, c.Master, addrs)
			}
		}
	}
	t.Run("single", func(t *testing.T) { run(t, []string{testkit.StartRedis(t).Addr}, false) })
	t.Run("cluster", func(t *testing.T) {
		c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
		run(t, c.Addrs, true)
	})
}
