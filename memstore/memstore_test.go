package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// The reference store must itself keep the contract, or comparing with it
// proves nothing.
func TestReferenceConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store { return newReference() }, sluicetest.Penalties())
}

// pruning is a memory store that, before some of the calls, drops every
// entry that is back to initial (with Prune) or shrinks to a tight key cap.
type pruning struct {
	*memstore.Store
	calls int
}

func (p *pruning) tick(now time.Time) {
	p.calls++
	if p.calls%7 == 0 {
		p.Prune(now)
	}
}

func (p *pruning) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	p.tick(now)
	return p.Store.Allow(ctx, now, req)
}

func (p *pruning) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	p.tick(now)
	return p.Store.Peek(ctx, now, req)
}

func (p *pruning) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	p.tick(now)
	return p.Store.AllowAll(ctx, now, reqs, out)
}

// TestDecidesAsReference replays random traces through the memory store,
// with and without frequent Prune calls, and through the reference store,
// which never drops anything: dropping keys that are back to initial must
// change no decision.
func TestDecidesAsReference(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 5
	}
	for _, c := range []struct {
		name string
		new  func() sluice.Store
	}{
		{"default", func() sluice.Store { return memstore.New(memstore.Options{}) }},
		{"one shard", func() sluice.Store { return memstore.New(memstore.Options{Shards: 1}) }},
		{"pruned", func() sluice.Store { return &pruning{Store: memstore.New(memstore.Options{Shards: 2})} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range seeds {
				tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Keys: 8})
				sluicetest.CompareStores(t, newReference(), c.new(), tr)
				// Debits into debt, refunds and checks.
				tr = sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Keys: 8, Usage: true})
				sluicetest.CompareStores(t, newReference(), c.new(), tr)
				// Blocks, their escalation and forgetting.
				tr = sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Keys: 4, Usage: true, Policies: sluicetest.PenaltyPolicies()})
				sluicetest.CompareStores(t, newReference(), c.new(), tr)
			}
		})
	}
}

// TestDropsInitialKeys checks that a key is dropped once its state is back
// to initial (so Len shrinks), not a microsecond before, and that nothing
// observable changes.
func TestDropsInitialKeys(t *testing.T) {
	ctx := t.Context()
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(10, time.Second, 0),
		sluice.GCRA(10, time.Second, 0),
		sluice.LeakyBucket(10, time.Second, 0),
		sluice.FixedWindow(10, time.Second),
		sluice.SlidingLog(10, time.Second),
		sluice.SlidingWindow(10, time.Second),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			st, ref := memstore.New(memstore.Options{}), newReference()
			req := sluice.Request{Policy: &p, Key: "k", Cost: 3}
			now := t0.Add(250 * time.Millisecond)
			d, err := st.Allow(ctx, now, req)
			if err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v", d, err)
			}
			ref.Allow(ctx, now, req)
			if n := st.Len(); n != 1 {
				t.Fatalf("Len() = %d after one Allow, want 1", n)
			}
			// The state is back to initial exactly at the reset (ResetAfter
			// is rounded up to a whole ms; these rates give whole ms).
			initial := now.Add(d.ResetAfter)
			if n := st.Prune(initial.Add(-time.Microsecond)); n != 0 || st.Len() != 1 {
				t.Errorf("Prune(1µs before the reset) dropped %d, Len() = %d; want 0 and 1", n, st.Len())
			}
			if n := st.Prune(initial); n != 1 || st.Len() != 0 {
				t.Errorf("Prune(at the reset) dropped %d, Len() = %d; want 1 and 0", n, st.Len())
			}
			for i, at := range []time.Duration{0, time.Millisecond, 400 * time.Millisecond, time.Second} {
				got, err1 := st.Allow(ctx, initial.Add(at), req)
				want, err2 := ref.Allow(ctx, initial.Add(at), req)
				if got != want || err1 != nil || err2 != nil {
					t.Errorf("request %d after the drop: Allow = %+v, %v; the store that never drops says %+v, %v", i, got, err1, want, err2)
				}
			}
		})
	}
	t.Run("Peek tracks nothing", func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		for _, p := range []sluice.Policy{sluice.TokenBucket(1, time.Second, 0), sluice.SlidingLog(1, time.Second), sluice.FixedWindow(1, time.Second)} {
			st.Peek(ctx, t0, sluice.Request{Policy: &p, Key: "k", Cost: 1})
		}
		if n := st.Len(); n != 0 {
			t.Errorf("Len() = %d after Peek calls, want 0", n)
		}
	})
	t.Run("inserts sweep", func(t *testing.T) {
		// Without Prune, new keys drop old initial ones a few slots at a
		// time: 10,000 keys used once each, 1 ms apart, under a limit
		// that refills in 100 ms, never leave much more than 100 tracked.
		st := memstore.New(memstore.Options{Shards: 1})
		p := sluice.TokenBucket(10, time.Second, 0)
		most := 0
		for i := range 10_000 {
			st.Allow(ctx, t0.Add(time.Duration(i)*time.Millisecond), sluice.Request{Policy: &p, Key: fmt.Sprint(i), Cost: 1})
			most = max(most, st.Len())
		}
		if most > 200 {
			t.Errorf("up to %d keys tracked, want at most 200 (about 100 are live at any time)", most)
		}
	})
	t.Run("Prune shrinks the tables", func(t *testing.T) {
		base := heapInUse()
		st := memstore.New(memstore.Options{Shards: 1})
		p := sluice.TokenBucket(1, time.Hour, 0)
		for i := range 100_000 {
			st.Allow(ctx, t0, sluice.Request{Policy: &p, Key: fmt.Sprint(i), Cost: 1})
		}
		full := heapInUse() - base
		if full < 100_000*24 {
			t.Fatalf("100,000 keys take %d bytes of heap, less than their 24-byte slots: the measure is wrong", full)
		}
		if n := st.Prune(t0.Add(time.Hour)); n != 100_000 {
			t.Errorf("Prune dropped %d, want 100000", n)
		}
		// Each Prune shrinks an almost empty table to a quarter.
		for range 5 {
			st.Prune(t0.Add(time.Hour))
		}
		if left := heapInUse() - base; left > full/20 {
			t.Errorf("after Prune, the store holds %d bytes of the %d it held, want at most 5%%", left, full)
		}
		runtime.KeepAlive(st)
	})
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// TestPruneIsATimeSeen checks that after Prune(t) a request at an earlier
// time decides as at t, as for a clock stepping backwards, instead of
// finding its key dropped too early.
func TestPruneIsATimeSeen(t *testing.T) {
	ctx := t.Context()
	st, ref := memstore.New(memstore.Options{}), newReference()
	req := sluice.Request{Policy: new(sluice.FixedWindow(5, time.Minute)), Key: "k", Cost: 1}
	for _, s := range []sluice.Store{st, ref} {
		s.Allow(ctx, t0, req)
	}
	st.Prune(t0.Add(time.Hour))
	ref.Peek(ctx, t0.Add(time.Hour), req)
	got, _ := st.Allow(ctx, t0.Add(time.Second), req)
	want, _ := ref.Allow(ctx, t0.Add(time.Second), req)
	if got != want {
		t.Errorf("Allow(t0+1s) after Prune(t0+1h) = %+v, want %+v", got, want)
	}
}

// TestMaxKeys checks that MaxKeys bounds the keys tracked, that the keys
// evicted first are those back to (or closest to) initial, and that busy
// keys keep deciding exactly as in a store without a cap.
func TestMaxKeys(t *testing.T) {
	ctx := t.Context()
	t.Run("bound", func(t *testing.T) {
		for _, c := range []struct{ maxKeys, shards int }{{1000, 0}, {10, 0}, {1, 0}, {100, 3}, {64, 64}} {
			st := memstore.New(memstore.Options{MaxKeys: c.maxKeys, Shards: c.shards})
			p := sluice.TokenBucket(1, time.Hour, 0)
			for i := range 5_000 {
				st.Allow(ctx, t0, sluice.Request{Policy: &p, Key: fmt.Sprint(i), Cost: 1})
			}
			if n := st.Len(); n > c.maxKeys || n < c.maxKeys*3/4 {
				t.Errorf("MaxKeys %d, Shards %d: Len() = %d after 5,000 keys, want at most %d and near it", c.maxKeys, c.shards, n, c.maxKeys)
			}
		}
	})
	t.Run("idle keys go first", func(t *testing.T) {
		st, ref := memstore.New(memstore.Options{MaxKeys: 64, Shards: 1}), newReference()
		idle := sluice.TokenBucket(10, time.Second, 0)    // back to initial 100 ms after one unit
		busy := sluice.TokenBucket(10, 10*time.Second, 0) // 10 s after ten units
		both := []sluice.Store{st, ref}
		for i := range 32 {
			for _, s := range both {
				s.Allow(ctx, t0, sluice.Request{Policy: &idle, Key: fmt.Sprint("idle", i), Cost: 1})
				s.Allow(ctx, t0, sluice.Request{Policy: &busy, Key: fmt.Sprint("busy", i), Cost: 9})
			}
		}
		// 200 ms later the idle keys are initial; 32 new keys need room.
		for i := range 32 {
			st.Allow(ctx, t0.Add(200*time.Millisecond), sluice.Request{Policy: &idle, Key: fmt.Sprint("new", i), Cost: 1})
		}
		if n := st.Len(); n > 64 {
			t.Errorf("Len() = %d, want at most 64", n)
		}
		for i := range 32 {
			req := sluice.Request{Policy: &busy, Key: fmt.Sprint("busy", i), Cost: 1}
			for range 2 {
				got, _ := st.Allow(ctx, t0.Add(time.Second), req)
				want, _ := ref.Allow(ctx, t0.Add(time.Second), req)
				if got != want {
					t.Fatalf("busy key %d: Allow = %+v, want %+v: it was evicted before idle keys", i, got, want)
				}
			}
		}
	})
	t.Run("steady keys under a flood", func(t *testing.T) {
		// 200 keys in steady use and a flood of 40,000 keys used once,
		// in a store capped at 1,000 keys: the steady keys decide as in
		// a store without a cap, and memory stays bounded.
		st, ref := memstore.New(memstore.Options{MaxKeys: 1000}), newReference()
		p := sluice.TokenBucket(10, time.Second, 0)
		now := t0
		flood := 0
		for step := range 2000 {
			now = now.Add(time.Millisecond)
			req := sluice.Request{Policy: &p, Key: fmt.Sprint("steady", step%200), Cost: 3}
			got, _ := st.Allow(ctx, now, req)
			want, _ := ref.Allow(ctx, now, req)
			if got != want {
				t.Fatalf("step %d: steady Allow = %+v, want %+v", step, got, want)
			}
			for range 20 {
				flood++
				st.Allow(ctx, now, sluice.Request{Policy: &p, Key: fmt.Sprint("flood", flood), Cost: 1})
			}
			if n := st.Len(); n > 1000 {
				t.Fatalf("step %d: Len() = %d, want at most 1000", step, n)
			}
		}
	})
}

// TestZeroAllocs checks that a decision on an existing key allocates
// nothing, for each algorithm whose state is a fixed-size value, with a
// penalty or not, and for Peek and AllowAll.
func TestZeroAllocs(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	penalized := sluice.FixedWindow(1, time.Hour).Named("penalized")
	penalized.Penalty = sluice.Penalty{BlockFor: time.Minute, Factor: 2, ForgetAfter: time.Hour}
	withPenalty := sluice.TokenBucket(1_000_000, time.Second, 0).Named("with-penalty")
	withPenalty.Penalty = penalized.Penalty
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(1_000_000, time.Second, 0).Named("api"),
		sluice.GCRA(1_000_000, time.Second, 0),
		sluice.LeakyBucket(1_000_000, time.Second, 0),
		sluice.FixedWindow(1_000_000_000, time.Hour),
		sluice.SlidingWindow(1_000_000_000, time.Hour),
		withPenalty, // admitted
		penalized,   // blocked, after its first offence
	} {
		req := sluice.Request{Policy: &p, Key: "user-1234", Cost: 1}
		now := t0
		st.Allow(ctx, now, req)
		for name, f := range map[string]func(){
			"Allow": func() { now = now.Add(time.Microsecond); st.Allow(ctx, now, req) },
			"Peek":  func() { st.Peek(ctx, now, req) },
		} {
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Errorf("%s under %v: %v allocations per decision, want 0", name, p, n)
			}
		}
	}
	reqs := []sluice.Request{
		{Policy: new(sluice.TokenBucket(10, time.Second, 0)), Key: "user-1234", Cost: 1},
		{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "user-1234", Cost: 1},
	}
	out := make([]sluice.Decision, 2)
	st.AllowAll(ctx, t0, reqs, out)
	if n := testing.AllocsPerRun(1000, func() { st.AllowAll(ctx, t0, reqs, out) }); n != 0 {
		t.Errorf("AllowAll: %v allocations per decision, want 0", n)
	}
	// A Limiter with several policies reaches AllowAll without allocating.
	l, err := sluice.New(st, *reqs[0].Policy, *reqs[1].Policy)
	if err != nil {
		t.Fatal(err)
	}
	l.AllowAt(ctx, t0, "user-1234", 1)
	if n := testing.AllocsPerRun(1000, func() { l.AllowAt(ctx, t0, "user-1234", 1) }); n != 0 {
		t.Errorf("Limiter.AllowAt with two policies: %v allocations per decision, want 0", n)
	}
}

// TestSweeper checks that SweepInterval's goroutine drops initial keys on
// the store's clock and stops on Close: synctest.Test fails if it is still
// running when the bubble ends.
func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{SweepInterval: time.Second})
		p := sluice.TokenBucket(10, time.Second, 0)
		for i := range 100 {
			st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: fmt.Sprint(i), Cost: 5})
		}
		if n := st.Len(); n != 100 {
			t.Fatalf("Len() = %d, want 100", n)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := st.Len(); n != 100 {
			t.Errorf("Len() = %d before the first sweep, want 100", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := st.Len(); n != 0 {
			t.Errorf("Len() = %d after a sweep 500 ms past every reset, want 0", n)
		}
		if err := st.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("second Close() = %v", err)
		}
		// The store stays usable after Close.
		if d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1}); err != nil || !d.Allowed {
			t.Errorf("Allow after Close = %+v, %v", d, err)
		}
	})
}

// TestSweeperGoroutines checks that Close, called twice and concurrently,
// ends the sweeper goroutine of each of many stores.
func TestSweeperGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Count the sweepers themselves, beside any that other tests left,
		// once they all wait for their ticker.
		before := sweepers()
		stores := make([]*memstore.Store, 50)
		for i := range stores {
			stores[i] = memstore.New(memstore.Options{SweepInterval: time.Millisecond})
		}
		time.Sleep(10 * time.Millisecond) // fake time: a few sweeps each
		synctest.Wait()
		if n := sweepers() - before; n != 50 {
			t.Fatalf("%d sweeper goroutines with 50 sweeping stores, want 50", n)
		}
		var wg sync.WaitGroup
		for _, st := range stores {
			wg.Go(func() { st.Close() })
			wg.Go(func() { st.Close() }) // Close twice, concurrently
		}
		wg.Wait()
		synctest.Wait()
		if n := sweepers() - before; n != 0 {
			t.Errorf("%d sweeper goroutines after Close, want none", n)
		}
	})
}

// sweepers returns how many goroutines run a memory store's sweeper.
func sweepers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "memstore.(*Store).sweeper(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestConcurrentUse drives every method at once from many goroutines, on
// few and many keys, with a key cap and a sweeper, for the race detector;
// and checks that the cap holds.
func TestConcurrentUse(t *testing.T) {
	st := memstore.New(memstore.Options{MaxKeys: 500, Shards: 4, SweepInterval: time.Millisecond})
	defer st.Close()
	policies := sluicetest.TracePolicies()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ctx := context.Background()
			out := make([]sluice.Decision, 2)
			for i := range 3000 {
				p := policies[(g+i)%len(policies)]
				key := fmt.Sprint(i % (10 + 100*g))
				req := sluice.Request{Policy: &p, Key: key, Cost: 1}
				switch i % 5 {
				case 0:
					st.Peek(ctx, time.Time{}, req)
				case 1:
					st.AllowAll(ctx, time.Time{}, []sluice.Request{req, {Policy: &policies[i%len(policies)], Key: key, Cost: 2}}, out)
				case 2:
					if g == 0 {
						st.Prune(time.Time{})
					}
					st.Len()
				default:
					st.Allow(ctx, time.Time{}, req)
				}
			}
		})
	}
	wg.Wait()
	if n := st.Len(); n > 500 {
		t.Errorf("Len() = %d, want at most 500", n)
	}
}

// TestAllowMatchesAllowAll checks that Allow, with its token-bucket and
// GCRA shortcut, decides every request exactly as the store's general path
// does (AllowAll of one request, which runs every algorithm through the
// same code): two stores on the same clock see the same requests, one
// through each method, and must return the same decisions and errors, for
// every algorithm, costs from invalid to over capacity, a few keys, at the
// store's clock and at the same time given explicitly, and with a
// MaxDelay.
func TestAllowMatchesAllowAll(t *testing.T) {
	ctx := context.Background()
	viaAllow, viaPolicy, clock := teststore.Twins(t0)
	policies := []sluice.Policy{
		sluice.TokenBucket(5, time.Second, 8),
		sluice.GCRA(3, time.Second, 4).Named("gcra"),
		sluice.LeakyBucket(4, time.Second, 6),
		sluice.FixedWindow(7, time.Second),
		sluice.SlidingWindow(6, time.Second),
		sluice.SlidingLog(5, time.Second),
		sluice.FixedCalendarWindow(9, sluice.Calendar{Unit: sluice.CalendarDay}),
		{Algorithm: sluice.TokenBucketAlgorithm, Limit: 0, Period: time.Second}, // invalid
	}
	rnd := testkit.Rand(1)
	next := func(n uint64) uint64 { return rnd.Next() % n }
	for i := range 5000 {
		clock.Advance(time.Duration(next(200)) * time.Millisecond)
		p := policies[next(uint64(len(policies)))]
		key := "k" + strconv.Itoa(int(next(4)))
		cost := int64(next(11)) - 1 // -1..9: invalid, in range and over capacity
		var at time.Time            // the store's clock, or the same time given explicitly
		if next(2) == 0 {
			at = clock.Now()
		}
		var delay time.Duration // a MaxDelay takes Allow's other path
		if next(4) == 0 {
			delay = time.Duration(next(3000)) * time.Millisecond
		}
		want, wantErr := viaAllow.AllowAll(ctx, at, []sluice.Request{{Policy: &p, Key: key, Cost: cost, MaxDelay: delay}}, nil)
		got, gotErr := viaPolicy.Allow(ctx, at, sluice.Request{Policy: &p, Key: key, Cost: cost, MaxDelay: delay})
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("request %d (%v, %q, cost %d, at %v, max delay %v): Allow = %+v, %v; AllowAll = %+v, %v", i, p, key, cost, at, delay, got, gotErr, want, wantErr)
		}
	}
}

// TestNowCarriesMonotonicReading checks that Store.Now on the system's
// clock keeps a monotonic reading (time.Time's String shows it as "m="),
// so that sluice.WaitAll's deadline arithmetic on it ignores steps of the
// wall clock; and that it agrees with the time the store decides at.
func TestNowCarriesMonotonicReading(t *testing.T) {
	st := memstore.New(memstore.Options{})
	before := time.Now()
	now := st.Now()
	after := time.Now()
	if !strings.Contains(now.String(), " m=") {
		t.Errorf("Now() = %v, want a time with a monotonic reading", now)
	}
	if now.Before(before.Add(-time.Microsecond)) || now.After(after.Add(time.Microsecond)) {
		t.Errorf("Now() = %v, want between %v and %v", now, before, after)
	}
	fixed := time.Unix(1_700_000_000, 123_456_789)
	st = memstore.New(memstore.Options{Now: func() time.Time { return fixed }})
	if got, want := st.Now(), fixed.Truncate(time.Microsecond); !got.Equal(want) {
		t.Errorf("Now() with Options.Now = %v, want %v", got, want)
	}
}

// TestLongKeysKeepNoString checks what configuration.md says of long
// keys: the memory store keeps a hash of each key, not the key, so 2,000
// keys of 32 KiB (64 MiB of keys) take about what 2,000 short keys take.
func TestLongKeysKeepNoString(t *testing.T) {
	ctx := t.Context()
	for _, p := range []sluice.Policy{sluice.TokenBucket(1, time.Hour, 0), sluice.SlidingWindow(1, time.Hour)} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			base := heapInUse()
			st := memstore.New(memstore.Options{Shards: 1})
			long := make([]byte, 32<<10)
			for i := range 2000 {
				copy(long, fmt.Sprintf("%08d", i))
				st.Allow(ctx, t0, sluice.Request{Policy: &p, Key: string(long), Cost: 1})
			}
			if n := st.Len(); n != 2000 {
				t.Fatalf("Len() = %d, want 2000", n)
			}
			if used := heapInUse() - base; used > 1<<20 {
				t.Errorf("2,000 keys of 32 KiB take %d bytes of heap, want under 1 MiB (no key kept)", used)
			}
			runtime.KeepAlive(st)
		})
	}
}
