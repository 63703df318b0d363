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
		// Debts past 2^53 µs (big.lua).
		sluice.TokenBucket(3, 10*24*time.Hour, 2),
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
				switch op := rng.IntN(8); op {
				case 0, 1:
					// Debits past the capacity and refunds, at every size
					// (short of internal/algo's overflow: cost·T < 2^62).
					name, mem, red, bits := "Debit", ms.Debit, rs.Debit, 22
					if op == 1 {
						name, mem, red, bits = "Refund", ms.Refund, rs.Refund, 40
					}
					req.Cost = 1 + rng.Int64N(1<<rng.IntN(bits))
					want, _ := mem(ctx, at, req)
					got, err := red(ctx, at, req)
					if err != nil || got != want {
						t.Fatalf("step %d: %s(%d) = %+v, %v; the memory store says %+v", step, name, req.Cost, got, err, want)
					}
					continue
				case 2:
					req.Cost = 0 // a check
				}
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

// TestInspectConcurrency replays holds taken, renewed, released and
// expired at the caller's times on the memory store and on Redis, and
// checks that Inspect reports the same State from both, and the holds
// that count, after each step.
func TestInspectConcurrency(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	p := sluice.Concurrency(5, 10*time.Second)
	ms := memstore.New(memstore.Options{})
	rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	t0 := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	type leases struct{ mem, redis string }
	held := map[string]leases{}
	steps := []struct {
		at     time.Duration
		op     string // "allow", "renew" or "release" lease name, or "inspect"
		lease  string
		cost   int64
		held   int64 // after the step, at its time
		count  int64 // leases that hold units
		expiry time.Duration
	}{
		{0, "inspect", "", 1, 0, 0, 0},
		{0, "allow", "a", 2, 2, 1, 10 * time.Second},
		{time.Second, "allow", "b", 1, 3, 2, 11 * time.Second},
		{2 * time.Second, "allow", "c", 1, 4, 3, 12 * time.Second},
		{3 * time.Second, "release", "b", 0, 3, 2, 12 * time.Second},
		{4 * time.Second, "renew", "c", 0, 3, 2, 14 * time.Second},
		{5 * time.Second, "allow", "d", 1, 4, 3, 15 * time.Second},
		{6 * time.Second, "inspect", "", 2, 4, 3, 15 * time.Second},
		// a expires at 10s: c and d hold 2 units.
		{10 * time.Second, "inspect", "", 1, 2, 2, 15 * time.Second},
		{10*time.Second + 500*time.Millisecond, "inspect", "", 4, 2, 2, 15 * time.Second},
		{14 * time.Second, "inspect", "", 5, 1, 1, 15 * time.Second},
		{15 * time.Second, "inspect", "", 1, 0, 0, 0},
	}
	req := sluice.Request{Policy: &p, Key: "k"}
	for i, s := range steps {
		at := t0.Add(s.at)
		req.Cost = max(s.cost, 1)
		switch s.op {
		case "allow":
			dm, errm := ms.Allow(ctx, at, req)
			dr, errr := rs.Allow(ctx, at, req)
			if errm != nil || errr != nil || !dm.Allowed || !dr.Allowed {
				t.Fatalf("step %d: Allow(%v, cost %d) = %+v, %v from Redis; %+v, %v from memory; want allowed", i, s.at, s.cost, dr, errr, dm, errm)
			}
			held[s.lease] = leases{dm.Lease, dr.Lease}
		case "release":
			okm, errm := ms.Release(ctx, at, held[s.lease].mem, nil)
			okr, errr := rs.Release(ctx, at, held[s.lease].redis, nil)
			if errm != nil || errr != nil || !okm || !okr {
				t.Fatalf("step %d: Release(%s) = %v, %v from Redis; %v, %v from memory; want true", i, s.lease, okr, errr, okm, errm)
			}
		case "renew":
			_, errm := ms.Renew(ctx, at, held[s.lease].mem)
			_, errr := rs.Renew(ctx, at, held[s.lease].redis)
			if errm != nil || errr != nil {
				t.Fatalf("step %d: Renew(%s): %v from Redis, %v from memory", i, s.lease, errr, errm)
			}
		}
		want, werr := ms.Inspect(ctx, at, req)
		got, gerr := rs.Inspect(ctx, at, req)
		if werr != nil || gerr != nil || got != want {
			t.Fatalf("step %d: Inspect(%v, cost %d):\nredis  %+v, %v\nmemory %+v, %v", i, s.at, req.Cost, got, gerr, want, werr)
		}
		var expires time.Time
		if s.count > 0 {
			expires = t0.Add(s.expiry)
		}
		if got.Held != s.held || got.Leases != s.count || !got.Expires.Equal(expires) || got.Tracked != (s.count > 0) || !got.At.Equal(at) {
			t.Errorf("step %d: Inspect at %v = held %d by %d leases until %v (tracked %v, at %v); want %d by %d until %v",
				i, s.at, got.Held, got.Leases, got.Expires, got.Tracked, got.At, s.held, s.count, expires)
		}
		fits := s.held+req.Cost <= p.Limit
		if got.Decision.Allowed != fits || fits && got.Decision.Remaining != p.Limit-s.held-req.Cost {
			t.Errorf("step %d: Inspect(cost %d) decision %+v with %d held", i, req.Cost, got.Decision, s.held)
		}
	}
	if _, err := rs.Inspect(ctx, t0.Add(time.Minute), sluice.Request{Policy: &p, Key: "k", Cost: 6}); !errorsIs(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("Inspect(cost 6) error = %v, want ErrCostExceedsCapacity", err)
	}

	// One lease that holds a key twice (an AllowAll that repeats it) is
	// one lease, with one hold of the summed units on Redis.
	at := t0.Add(2 * time.Minute)
	reqs := []sluice.Request{{Policy: &p, Key: "r", Cost: 1}, {Policy: &p, Key: "r", Cost: 2}}
	if d, err := rs.AllowAll(ctx, at, reqs, nil); err != nil || !d.Allowed {
		t.Fatalf("AllowAll(r twice) = %+v, %v; want allowed", d, err)
	}
	st, err := rs.Inspect(ctx, at, reqs[0])
	if err != nil || st.Held != 3 || st.Leases != 1 || !st.Expires.Equal(at.Add(p.Period)) {
		t.Errorf("Inspect after AllowAll(r twice) = held %d by %d leases until %v, %v; want 3 by 1 until %v", st.Held, st.Leases, st.Expires, err, at.Add(p.Period))
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
		sluice.Concurrency(10, time.Hour),
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
			if p.Algorithm == sluice.ConcurrencyAlgorithm {
				// A hold that expired long ago: Inspect ignores it and,
				// unlike a decision, leaves it in place.
				if _, err := srv.Do("HSET", st.policies.get(&p).key(st.prefix, "k"), "AAAAAAAAAAAAAAAAAAAAAA", "4 1000000 3600000000"); err != nil {
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
			case sluice.ConcurrencyAlgorithm:
				if d := got.Expires.Sub(got.At); got.Held != 3 || got.Leases != 3 || d <= 59*time.Minute || d > time.Hour {
					t.Errorf("%d held by %d leases until %v after At; want 3 by 3, about an hour", got.Held, got.Leases, d)
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
