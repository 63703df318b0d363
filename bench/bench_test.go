package bench

import (
	"context"
	"hash/maphash"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// Every library gets the same limit: a token bucket refilled at one unit per
// minute with a burst of 1e8. A run at the default -benchtime (1s) charges
// far fewer than 1e8 units to one key, so every request is admitted (a
// denial fails the benchmark), and a key takes a minute per request to
// refill, far longer than the time between two requests to it, so no
// library drops a key as idle during a run: every benchmark measures the
// common hot path, a request on an existing key that is admitted and
// charged. (throttled keeps burst×interval in nanoseconds in an int64,
// which rules out a larger burst at this rate.)
const (
	burst    = 100_000_000
	interval = time.Minute
	seedMul  = 0x9e3779b97f4a7c15
)

// allowFunc admits or denies one request of cost 1 for key. Every library
// is called through one, so each pays the same indirect call.
type allowFunc func(key string) bool

// subject is one library under test. newOne builds a limiter for a single
// key (nil when the library is only measured with many keys); newMany
// builds one that keys its state by the key string. Both return a function
// that releases what they started.
type subject struct {
	name    string
	newOne  func(tb testing.TB) (allowFunc, func())
	newMany func(tb testing.TB) (allowFunc, func())
}

// subjects returns the libraries in the order of the tables in
// docs/BENCHMARKS.md.
func subjects() []subject {
	return []subject{
		{name: "sluice", newOne: newSluice, newMany: newSluice},
		{name: "xrate", newOne: newXRate, newMany: newXRateSyncMap},
		{name: "xrate-shards", newMany: newXRateShards},
		{name: "golimiter", newOne: newGoLimiter, newMany: newGoLimiter},
		{name: "throttled", newOne: newThrottled, newMany: newThrottled},
	}
}

// newSluice is Sluice's memory store behind a Limiter; Limiter.Allow reads
// the store's own clock, as rate.Limiter.Allow reads time.Now.
func newSluice(tb testing.TB) (allowFunc, func()) {
	st := memstore.New(memstore.Options{})
	l, err := sluice.New(st, sluice.TokenBucket(1, interval, burst))
	if err != nil {
		tb.Fatalf("sluice.New: %v", err)
	}
	ctx := context.Background()
	return func(key string) bool {
		d, err := l.Allow(ctx, key, 1)
		return err == nil && d.Allowed
	}, func() { st.Close() }
}

// newXRate is one rate.Limiter: for one key, x/time/rate needs no map.
func newXRate(testing.TB) (allowFunc, func()) {
	lim := rate.NewLimiter(rate.Every(interval), burst)
	return func(string) bool { return lim.Allow() }, func() {}
}

// newXRateSyncMap is the usual way to key x/time/rate: one rate.Limiter per
// key in a sync.Map, created on first use.
func newXRateSyncMap(testing.TB) (allowFunc, func()) {
	var m sync.Map
	return func(key string) bool {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Every(interval), burst))
		}
		return v.(*rate.Limiter).Allow()
	}, func() {}
}

// xrateShards is x/time/rate keyed through 64 maps, each behind its own
// RWMutex, picked by a seeded hash of the key: the same sharding Sluice's
// store uses, so neither side wins on lock contention alone.
type xrateShards struct {
	seed   maphash.Seed
	shards [64]struct {
		mu sync.RWMutex
		m  map[string]*rate.Limiter
		_  [32]byte // keep shards on separate cache lines
	}
}

func newXRateShards(testing.TB) (allowFunc, func()) {
	s := &xrateShards{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*rate.Limiter)
	}
	return func(key string) bool {
		sh := &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
		sh.mu.RLock()
		lim := sh.m[key]
		sh.mu.RUnlock()
		if lim == nil {
			sh.mu.Lock()
			if lim = sh.m[key]; lim == nil {
				lim = rate.NewLimiter(rate.Every(interval), burst)
				sh.m[key] = lim
			}
			sh.mu.Unlock()
		}
		return lim.Allow()
	}, func() {}
}

// newGoLimiter is go-limiter's memorystore. It has no separate burst: its
// bucket holds Tokens and refills them every Interval, so burst tokens per
// burst minutes is the same long-run rate and burst as the others, and no
// interval ends within a run.
func newGoLimiter(tb testing.TB) (allowFunc, func()) {
	st, err := memorystore.New(&memorystore.Config{Tokens: burst, Interval: burst * interval})
	if err != nil {
		tb.Fatalf("memorystore.New: %v", err)
	}
	ctx := context.Background()
	return func(key string) bool {
		_, _, _, ok, err := st.Take(ctx, key)
		return err == nil && ok
	}, func() { st.Close(ctx) }
}

// newThrottled is throttled's GCRA limiter on its memstore, without the
// LRU cap (maxKeys 0: a map behind one RWMutex, its fastest form).
func newThrottled(tb testing.TB) (allowFunc, func()) {
	st, err := throttledmem.NewCtx(0)
	if err != nil {
		tb.Fatalf("memstore.NewCtx: %v", err)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerMin(1), MaxBurst: burst - 1})
	if err != nil {
		tb.Fatalf("NewGCRARateLimiterCtx: %v", err)
	}
	// Under contention on one key its compare-and-swap loop gives up with an
	// error after 10 attempts by default; let it retry instead, as a user
	// with a hot key would configure it.
	rl.SetMaxCASAttemptsLimit(1 << 20)
	ctx := context.Background()
	return func(key string) bool {
		limited, _, err := rl.RateLimitCtx(ctx, key, 1)
		return err == nil && !limited
	}, func() {}
}

// keyPrefix starts every key, so keys look like real ones ("user:123").
const keyPrefix = "user:"

// populate makes one admitted request on each of the keys 0..n-1, each a
// freshly allocated string, as a service would have made them.
func populate(tb testing.TB, allow allowFunc, n int) {
	for i := range n {
		k := keyPrefix + strconv.Itoa(i)
		if !allow(k) {
			tb.Fatalf("first request for %q denied", k)
		}
	}
}

// populated is a limiter built and populated on the first call of a
// sub-benchmark's body, which the testing package calls several times as it
// sizes b.N, so that a sub-benchmark filtered out by -bench builds nothing
// (under valgrind, populating every library's million keys takes minutes).
type populated struct {
	allow allowFunc
	done  func()
}

// get returns the limiter, building it and populating keys 0..n-1 the first
// time, outside the timed part of the run.
func (p *populated) get(b *testing.B, newFn func(testing.TB) (allowFunc, func()), n int) allowFunc {
	if p.allow == nil {
		b.StopTimer()
		p.allow, p.done = newFn(b)
		populate(b, p.allow, n)
		runtime.GC()
		b.StartTimer()
	}
	return p.allow
}

// stop releases the limiter, if it was built.
func (p *populated) stop() {
	if p.done != nil {
		p.done()
	}
}

// keyBuf builds the key of each request into one reused buffer, as a
// service builds it from the request it is handling: the key is in cache,
// and it is a different string from the one a library stored when it first
// saw the key, so a library that compares keys must read its stored copy.
// (Keys drawn from a pre-built []string would be cold, costing every
// library the same cache misses, and would be the very strings the
// libraries stored, letting string comparison stop at equal pointers.)
//
// The string aliases the buffer. That is safe here because every key is
// populated before the timed loop and no library keeps the key of a
// request on a key it already tracks (they keep it only on first sight).
type keyBuf []byte

func (kb *keyBuf) key(i uint64) string {
	*kb = strconv.AppendUint(append((*kb)[:0], keyPrefix...), i, 10)
	return unsafe.String(unsafe.SliceData(*kb), len(*kb))
}

// start builds a limiter and collects the garbage of the previous one, so
// that no library pays for another's heap.
func start(b *testing.B, newFn func(testing.TB) (allowFunc, func())) allowFunc {
	allow, stop := newFn(b)
	b.Cleanup(stop)
	runtime.GC()
	return allow
}

func denied(b *testing.B, key string) {
	b.Errorf("request for %q denied, want every request admitted", key)
}

// BenchmarkOneKeySerial is one key, one goroutine.
func BenchmarkOneKeySerial(b *testing.B) {
	oneKey(b, func(b *testing.B, allow func(string) bool) {
		for b.Loop() {
			if !allow("user:1") {
				b.Fatal("request denied, want every request admitted")
			}
		}
	})
}

// BenchmarkOneKeyParallel is one key shared by GOMAXPROCS goroutines.
func BenchmarkOneKeyParallel(b *testing.B) {
	oneKey(b, func(b *testing.B, allow func(string) bool) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !allow("user:1") {
					denied(b, "user:1")
					return
				}
			}
		})
	})
}

// oneKey runs loop as a sub-benchmark lib=<name> for every library with a
// one-key limiter, with allocations and cpu-ns/op reported.
func oneKey(b *testing.B, loop func(b *testing.B, allow func(string) bool)) {
	for _, s := range subjects() {
		if s.newOne == nil {
			continue
		}
		b.Run("lib="+s.name, func(b *testing.B) {
			allow := start(b, s.newOne)
			b.ReportAllocs()
			cpu := testkit.StartMeter()
			loop(b, allow)
			cpu.Report(b)
		})
	}
}

// BenchmarkKeysParallel is 100,000 and 1,000,000 keys, every one already
// tracked, requested at random by GOMAXPROCS goroutines. Each library's
// limiter is built and populated once, outside the timed sub-benchmark,
// whose body the testing package calls several times as it sizes b.N.
func BenchmarkKeysParallel(b *testing.B) {
	manyKeys(b, func(n int) func(b *testing.B, allow func(string) bool) {
		return func(b *testing.B, allow func(string) bool) {
			var seeds atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				r := testkit.Rand(seeds.Add(1) * seedMul)
				kb := make(keyBuf, 0, 32)
				for pb.Next() {
					if k := kb.key(r.Next() % uint64(n)); !allow(k) {
						denied(b, k)
						return
					}
				}
			})
		}
	})
}

// BenchmarkKeysPrepared is BenchmarkKeysParallel with the keys prepared
// beforehand: the way an application calls a limiter with a key it already
// holds (a user ID, an API key read once per connection). Every key string is
// built once before the timed loop, into a slice of its own, and each
// goroutine passes them at random to every library alike. They are copies,
// not the strings populate gave the libraries, so a library that compares
// keys still reads its stored copy and cannot stop at equal pointers; unlike
// BenchmarkKeysParallel, the key itself is usually cold in cache too, a miss
// every library pays alike.
func BenchmarkKeysPrepared(b *testing.B) {
	manyKeys(b, func(n int) func(b *testing.B, allow func(string) bool) {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = keyPrefix + strconv.Itoa(i)
		}
		return func(b *testing.B, allow func(string) bool) {
			var seeds atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				r := testkit.Rand(seeds.Add(1) * seedMul)
				for pb.Next() {
					if k := keys[r.Next()%uint64(n)]; !allow(k) {
						denied(b, k)
						return
					}
				}
			})
		}
	})
}

// manyKeys runs, at 100,000 and 1,000,000 keys, a sub-benchmark
// keys=<n>/lib=<name> for every library, over its limiter populated with
// the n keys (built once per library and size, outside the timed
// sub-benchmark, whose body the testing package calls several times as it
// sizes b.N), with allocations and cpu-ns/op reported. prepare is called
// once per size, before the libraries, and returns the timed loop.
func manyKeys(b *testing.B, prepare func(n int) func(b *testing.B, allow func(string) bool)) {
	for _, n := range []int{100_000, 1_000_000} {
		loop := prepare(n)
		for _, s := range subjects() {
			var pop populated
			b.Run("keys="+strconv.Itoa(n)+"/lib="+s.name, func(b *testing.B) {
				allow := pop.get(b, s.newMany, n)
				b.ReportAllocs()
				cpu := testkit.StartMeter()
				loop(b, allow)
				cpu.Report(b)
			})
			pop.stop()
		}
	}
}

// BenchmarkBytesPerKey measures the live heap each library holds per
// tracked key at 1,000,000 keys: the heap after a full GC, before and after
// one admitted request on each of 1e6 distinct keys, divided by 1e6. Every
// key is a fresh 10- or 11-byte string ("user:123456"), so a library that
// keeps the key pays for it (16 bytes of string each) and one that does not
// keep it pays nothing. The measurement runs once; the timed loop is empty
// and its ns/op means nothing: the result is the B/key metric.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	for _, s := range subjects() {
		b.Run("lib="+s.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			allow, stop := s.newMany(b)
			populate(b, allow, n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(allow)
			stop()
			for b.Loop() {
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/key")
		})
	}
}

// BenchmarkClock measures what reading the clock costs on this machine, a
// floor under every limiter here: time.Now (read by x/time/rate's Allow and
// throttled; go-limiter reads the same runtime clock) and the monotonic
// clock alone (time.Since, read by Sluice's memory store).
func BenchmarkClock(b *testing.B) {
	var sink int64
	b.Run("time.Now", func(b *testing.B) {
		cpu := testkit.StartMeter()
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
		cpu.Report(b)
	})
	base := time.Now()
	b.Run("time.Since", func(b *testing.B) {
		cpu := testkit.StartMeter()
		for b.Loop() {
			sink += int64(time.Since(base))
		}
		cpu.Report(b)
	})
	runtime.KeepAlive(sink)
}

// BenchmarkSluiceLayers splits Sluice's one-key serial cost by layer, to
// show where the time goes: the Limiter, the Store on its own clock, the
// Store at explicit times (no clock read), and a floor of what any sharded
// store must do (read the monotonic clock, hash the key, lock and unlock a
// mutex).
func BenchmarkSluiceLayers(b *testing.B) {
	ctx := context.Background()
	policy := sluice.TokenBucket(1, interval, burst)
	b.Run("Limiter.Allow", func(b *testing.B) {
		allow := start(b, newSluice)
		cpu := testkit.StartMeter()
		for b.Loop() {
			if !allow("user:1") {
				b.Fatal("request denied, want every request admitted")
			}
		}
		cpu.Report(b)
	})
	b.Run("Store.Allow/store-clock", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		req := sluice.Request{Policy: &policy, Key: "user:1", Cost: 1}
		cpu := testkit.StartMeter()
		for b.Loop() {
			if d, err := st.Allow(ctx, time.Time{}, req); err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("Store.Allow/explicit-time", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		req := sluice.Request{Policy: &policy, Key: "user:1", Cost: 1}
		now := time.Unix(1_700_000_000, 0)
		cpu := testkit.StartMeter()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			if d, err := st.Allow(ctx, now, req); err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("floor/clock+hash+lock", func(b *testing.B) {
		var mu sync.Mutex
		var sink uint64
		seed := maphash.MakeSeed()
		base := time.Now()
		cpu := testkit.StartMeter()
		for b.Loop() {
			t := uint64(time.Since(base))
			h := maphash.String(seed, "user:1")
			mu.Lock()
			sink += h ^ t
			mu.Unlock()
		}
		cpu.Report(b)
		runtime.KeepAlive(sink)
	})
}

// BenchmarkConcurrencySlot takes and gives back one slot of a concurrency
// limit in process: a lease of sluice.Concurrency on the memory store
// (Store.Allow, then Store.Release) against golang.org/x/sync/semaphore's
// Acquire and Release, serial and parallel. The limit is never reached,
// so neither ever waits: this is the cost of the bookkeeping alone. The
// semaphore bounds one process and keeps no key; the store keeps a slot
// count per key, a lease a crashed holder's slot expires by, and the same
// decision as its rate policies.
func BenchmarkConcurrencySlot(b *testing.B) {
	ctx := context.Background()
	policy := sluice.Concurrency(sluice.MaxLimit, time.Minute)
	store := func(b *testing.B) func() bool {
		st := memstore.New(memstore.Options{})
		req := sluice.Request{Policy: &policy, Key: "user:1", Cost: 1}
		return func() bool {
			d, err := st.Allow(ctx, time.Time{}, req)
			if err != nil || !d.Allowed {
				b.Errorf("Allow = %+v, %v, want allowed", d, err)
				return false
			}
			if ok, err := st.Release(ctx, time.Time{}, d.Lease, nil); !ok || err != nil {
				b.Errorf("Release = %v, %v, want true", ok, err)
				return false
			}
			return true
		}
	}
	sema := func(b *testing.B) func() bool {
		s := semaphore.NewWeighted(sluice.MaxLimit)
		return func() bool {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Errorf("Acquire = %v", err)
				return false
			}
			s.Release(1)
			return true
		}
	}
	for _, sub := range []struct {
		name string
		op   func(*testing.B) func() bool
	}{{"sluice-memstore", store}, {"x-sync-semaphore", sema}} {
		b.Run(sub.name+"/serial", func(b *testing.B) {
			op := sub.op(b)
			b.ReportAllocs()
			for b.Loop() {
				if !op() {
					return
				}
			}
		})
		b.Run(sub.name+"/parallel", func(b *testing.B) {
			op := sub.op(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !op() {
						return
					}
				}
			})
		})
	}
}
