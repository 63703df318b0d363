package redisstore

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// TestInspectDifferential plays random requests through the memory store
// and the Redis store at the same caller times and checks that Inspect
// reports the same State from both, field for field, at random instants.
func TestInspectDifferential(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	policies := []sluice.Policy{
		sluice.TokenBucket(7, time.Second, 3),
		// gcd(L, P) = 6: the script's frac counts halves of 1/L' µs.
		sluice.TokenBucket(12, time.Second+2*time.Microsecond, 5),
		sluice.GCRA(3, 10*time.Second, 5),
		sluice.LeakyBucket(13, 7*time.Second+3*time.Microsecond, 20),
		sluice.FixedWindow(5, time.Second),
		sluice.SlidingWindow(7, time.Second),
		sluice.SlidingLog(4, time.Second),
	}
	base := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	for i, p := range policies {
		t.Run(p.String(), func(t *testing.T) {
			ms := memstore.New(memstore.Options{})
			rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			at := base
			for step := range 400 {
				at = at.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
				key := fmt.Sprint("k", rng.IntN(3))
				req := sluice.Request{Policy: &p, Key: key, Cost: rng.Int64N(min(p.Capacity(), 3)) + 1}
				if rng.IntN(3) == 0 {
					want, werr := ms.Inspect(ctx, at, req)
					got, gerr := rs.Inspect(ctx, at, req)
					if (werr == nil) != (gerr == nil) || got != want {
						t.Fatalf("step %d: Inspect(%v, %s, cost %d):\nredis  %+v, %v\nmemory %+v, %v", step, at, key, req.Cost, got, gerr, want, werr)
					}
					continue
				}
				want, _ := ms.Allow(ctx, at, req)
				got, err := rs.Allow(ctx, at, req)
				if err != nil || got != want {
					t.Fatalf("step %d: Allow = %+v, %v; the memory store says %+v", step, got, err, want)
				}
			}
		})
	}
}

// TestInspectRedisClock inspects keys on Redis's own clock: the state
// reflects the requests made, and nothing is written.
func TestInspectRedisClock(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(10, time.Hour, 0), sluice.LeakyBucket(10, time.Hour, 0),
		sluice.FixedWindow(10, time.Hour), sluice.SlidingWindow(10, time.Hour), sluice.SlidingLog(10, time.Hour),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
			empty, err := st.Inspect(ctx, time.Time{}, req)
			if err != nil || empty.Tracked || empty.Decision.Remaining != 9 {
				t.Fatalf("Inspect of a new key = %+v, %v; want untracked with 9 remaining", empty, err)
			}
			for range 3 {
				if _, err := st.Allow(ctx, time.Time{}, req); err != nil {
					t.Fatal(err)
				}
			}
			before := dirty(t, srv)
			got, err := st.Inspect(ctx, time.Time{}, req)
			if err != nil {
				t.Fatal(err)
			}
			if n := dirty(t, srv) - before; n != 0 {
				t.Errorf("Inspect made %d changes in Redis, want none", n)
			}
			if !got.Tracked || got.Decision.Remaining != 6 || !got.Decision.Allowed {
				t.Errorf("Inspect after 3 requests = %+v, want tracked, allowed with 6 remaining", got)
			}
			if d := time.Since(got.At); d < 0 || d > time.Minute {
				t.Errorf("At = %v, %v from now; want Redis's time", got.At, d)
			}
			switch p.Algorithm {
			case sluice.TokenBucketAlgorithm, sluice.LeakyBucketAlgorithm:
				if got.Queued.Whole != 2 || got.Tokens.Whole != 7 {
					t.Errorf("tokens %v, queued %v; want 7.x and 2.x after 3 requests and a little refill", got.Tokens, got.Queued)
				}
			case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
				if got.Current != 3 {
					t.Errorf("Current = %d, want 3", got.Current)
				}
			case sluice.SlidingLogAlgorithm:
				if got.Counted != 3 || got.Entries < 1 {
					t.Errorf("Counted %d in %d entries, want 3", got.Counted, got.Entries)
				}
			}
		})
	}
}

func TestInspectErrors(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailAllow})
	p := sluice.TokenBucket(5, time.Second, 0)
	if _, err := st.Inspect(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 6}); !errorsIs(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("Inspect(cost 6) error = %v, want ErrCostExceedsCapacity", err)
	}
	srv.Stop()
	// The failure policy decides requests, not inspections.
	if _, err := st.Inspect(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1}); err == nil {
		t.Error("Inspect with Redis gone: no error, want one")
	}
}

// TestInspectUnderLoad runs Inspect while 32 callers flood keys on Redis's
// clock, so that calls queue for batches: Inspect must never be sent as
// one of a batch's calls (batch.lua does not know its script), and the
// others' decisions must stay exact: exactly the limit admitted per key.
func TestInspectUnderLoad(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, LocalRefusals: LocalRefusals{Off: true}})
	p := sluice.FixedWindow(50, time.Hour)
	const keys, callers, calls = 4, 32, 40
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				k := (c + i) % keys
				d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: fmt.Sprint("k", k), Cost: 1})
				if err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	inspected := 0
	for range 200 {
		if _, err := st.Inspect(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k0", Cost: 1}); err != nil {
			t.Errorf("Inspect during the flood: %v", err)
			break
		}
		inspected++
	}
	wg.Wait()
	for k := range keys {
		if got := admitted[k].Load(); got != p.Limit {
			t.Errorf("key k%d: %d admitted, want exactly %d", k, got, p.Limit)
		}
	}
	if st.batch.sent.Load() == 0 {
		t.Errorf("no batch was sent: the test did not load the store")
	}
	t.Logf("%d inspections, %d batches", inspected, st.batch.sent.Load())
}
