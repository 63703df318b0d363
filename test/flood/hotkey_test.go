package flood

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// hotPolicy is the hot key's limit in TestHotKeyProgress: small enough that
// the hot key is denied almost always, as a key under attack is.
var hotPolicy = sluice.TokenBucket(1000, time.Second, 100)

// hotRun is what one run of hammer measured.
type hotRun struct {
	goroutines int
	elapsed    time.Duration
	counts     []int64         // calls made by each goroutine
	slowest    []time.Duration // each goroutine's longest call
	admitted   int64
}

func (r hotRun) total() int64 {
	var n int64
	for _, c := range r.counts {
		n += c
	}
	return n
}

func (r hotRun) perSecond() float64 { return float64(r.total()) / r.elapsed.Seconds() }

// hammer calls Allow for req on a new store from the given number of
// goroutines, all started together, for about d, on the store's own clock,
// timing every call.
func hammer(t *testing.T, req sluice.Request, goroutines int, d time.Duration) hotRun {
	t.Helper()
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	r := hotRun{goroutines: goroutines, counts: make([]int64, goroutines), slowest: make([]time.Duration, goroutines)}
	admitted := make([]int64, goroutines)
	var stop atomic.Bool
	var ready, done sync.WaitGroup
	begin := make(chan struct{})
	for g := range goroutines {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-begin
			// Bounded: stop is set after d, and no goroutine makes a
			// billion calls in that time.
			for n := 0; n < 1e9 && !stop.Load(); n++ {
				t0 := time.Now()
				dec, err := st.Allow(ctx, time.Time{}, req)
				r.slowest[g] = max(r.slowest[g], time.Since(t0))
				if err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				r.counts[g]++
				if dec.Allowed {
					admitted[g]++
				}
			}
		}()
	}
	ready.Wait()
	start := time.Now()
	close(begin)
	time.Sleep(d) // the run: its throughput, on the real clock, is what is measured
	stop.Store(true)
	done.Wait()
	r.elapsed = time.Since(start)
	for _, a := range admitted {
		r.admitted += a
	}
	return r
}

// TestHotKeyContention hits one key from one goroutine per core and from
// eight per core, on the store's own clock, and checks:
//   - exactness under contention: the key admits no more than B + L·t/P
//     over the run, and at least its burst;
//   - no lock convoy: oversubscribing the cores eightfold keeps at least a
//     tenth of the throughput (a convoy, where each unlock hands the lock
//     to a goroutine that must first be scheduled, cuts it to a small
//     fraction; without one it stays about the same). The runs alternate,
//     three times each, and the best of each counts, so that a burst of
//     load from elsewhere on the machine does not decide.
//
// It logs how the calls were shared out and the slowest call. Per-caller
// fairness is not checked, because the store does not promise it: under
// nonstop calls from more goroutines than cores, Go's sync.Mutex lets the
// running goroutines take the lock again and again while a parked one
// waits, and single calls of hundreds of milliseconds are seen
// (docs/reliability.md has the numbers).
func TestHotKeyContention(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	req := sluice.Request{Policy: &hotPolicy, Key: "hot", Cost: 1}
	var best [2]hotRun
	for range 3 {
		for i, g := range []int{procs, 8 * procs} {
			r := hammer(t, req, g, 150*time.Millisecond)
			t.Logf("%d goroutines on %d cores, %v: %.0f calls/s; per goroutine %d to %d calls; slowest call %v; %d admitted",
				r.goroutines, procs, r.elapsed.Round(time.Millisecond), r.perSecond(), slices.Min(r.counts), slices.Max(r.counts), slices.Max(r.slowest).Round(time.Microsecond), r.admitted)
			// The store's clock ran for at most elapsed (plus a
			// microsecond of truncation) from the first call to the
			// last.
			limit := hotPolicy.Capacity() + hotPolicy.Limit*int64(r.elapsed+time.Microsecond)/int64(hotPolicy.Period) + 1
			if r.admitted > limit || r.admitted < hotPolicy.Capacity() {
				t.Errorf("%d goroutines: %d requests admitted in %v, want between the burst %d and %d (burst + %d per %v)",
					g, r.admitted, r.elapsed, hotPolicy.Capacity(), limit, hotPolicy.Limit, hotPolicy.Period)
			}
			if best[i].goroutines == 0 || r.perSecond() > best[i].perSecond() {
				best[i] = r
			}
		}
	}
	if one, many := best[0].perSecond(), best[1].perSecond(); many*10 < one {
		t.Errorf("one key: %.0f calls/s from %d goroutines but %.0f from %d: a lock convoy", one, best[0].goroutines, many, best[1].goroutines)
	}
}

// BenchmarkHotKey measures one key hit from every core, next to the same
// load spread over 100,000 keys, through Limiter.Allow on the store's own
// clock: throughput (ops/s over all goroutines), the CPU time the process
// spent per call (cpu-ns/op, all cores together: less disturbed than ns/op
// when other work shares the machine), and the 99th percentile of the
// latency of one call (p99-ns, timed on one call in 64). "admit" uses a
// limit that is never reached (every call charges and writes the state);
// "deny" a limit that is always exhausted, as for a key under attack.
// goroutines=2 is one per core; goroutines=16 oversubscribes the cores
// eightfold, where a lock convoy would show.
//
//	go test -run '^$' -bench HotKey -benchtime 2s -cpu 2 ./test/flood
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()
	admit := sluice.TokenBucket(1, time.Second, 1_000_000_000)
	deny := sluice.TokenBucket(1, time.Hour, 1)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name   string
		policy sluice.Policy
		keys   []string
	}{
		{"1-key/admit", admit, keys[:1]},
		{"1-key/deny", deny, keys[:1]},
		{"100000-keys/admit", admit, keys},
		{"100000-keys/deny", deny, keys},
	} {
		for _, par := range []int{1, 8} {
			name := c.name + "/goroutines=" + strconv.Itoa(par*runtime.GOMAXPROCS(0))
			b.Run(name, func(b *testing.B) {
				l, err := sluice.New(memstore.New(memstore.Options{}), c.policy)
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range c.keys {
					l.Allow(ctx, k, 1)
				}
				var mu sync.Mutex
				var lat []time.Duration
				var seeds atomic.Uint64
				b.SetParallelism(par)
				b.ReportAllocs()
				b.ResetTimer()
				start, cpu := time.Now(), testkit.Process()
				b.RunParallel(func(pb *testing.PB) {
					x := seeds.Add(1) * 0x9e3779b97f4a7c15
					local := make([]time.Duration, 0, 4096)
					n := uint64(len(c.keys))
					for i := 0; pb.Next(); i++ {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
						k := c.keys[x%n]
						if i%64 != 0 {
							l.Allow(ctx, k, 1)
							continue
						}
						t := time.Now()
						l.Allow(ctx, k, 1)
						local = append(local, time.Since(t))
					}
					mu.Lock()
					lat = append(lat, local...)
					mu.Unlock()
				})
				elapsed, cpu := time.Since(start), testkit.Process()-cpu
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
				if cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
				if len(lat) > 0 {
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				}
			})
		}
	}
}
