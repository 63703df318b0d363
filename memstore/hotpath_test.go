//go:build unix

package memstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// The benchmarks in this file take the one-key decision path apart, so that
// each part's share of BenchmarkOneKey can be measured on its own: the
// clock, the compiled-policy cache, the key hash, the shard lock, the
// algorithm, and the layers above them. They use the policy of
// bench_test.go, under which every request is admitted, and report the
// process's CPU time per operation (cpu-ns/op) beside the wall-clock time.
// Results inside b.Loop are kept by the testing package, so no sink is
// needed.

var hotPolicy = sluice.TokenBucket(1, time.Second, 1_000_000_000)

// cpuTime returns the CPU time this process has used so far. On a machine
// shared with other work it is a steadier measure than wall-clock time,
// which includes the time spent waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if c := cpuTime(); c > 0 && start > 0 && b.N > 0 {
		b.ReportMetric(float64(c-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkHotClock compares the clocks: time.Now, time.Since (what the
// store's default clock reads), the store's clock, and an explicit time.
func BenchmarkHotClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			time.Now()
		}
		reportCPU(b, cpu)
	})
	b.Run("time.Since", func(b *testing.B) {
		base := time.Now()
		cpu := cpuTime()
		for b.Loop() {
			time.Since(base)
		}
		reportCPU(b, cpu)
	})
	b.Run("store", func(b *testing.B) {
		s := New(Options{})
		cpu := cpuTime()
		for b.Loop() {
			s.micros(time.Time{})
		}
		reportCPU(b, cpu)
	})
	b.Run("explicit", func(b *testing.B) {
		s := New(Options{})
		now := time.Unix(1_700_000_000, 0)
		cpu := cpuTime()
		for b.Loop() {
			s.micros(now)
		}
		reportCPU(b, cpu)
	})
}

// BenchmarkHotCompile is a hit in the compiled-policy cache.
func BenchmarkHotCompile(b *testing.B) {
	s := New(Options{})
	p := hotPolicy
	cpu := cpuTime()
	for b.Loop() {
		s.compile(&p)
	}
	reportCPU(b, cpu)
}

// BenchmarkHotCompileNamed is a hit in the compiled-policy cache for a
// named policy.
func BenchmarkHotCompileNamed(b *testing.B) {
	s := New(Options{})
	p := hotPolicy.Named("api")
	cpu := cpuTime()
	for b.Loop() {
		s.compile(&p)
	}
	reportCPU(b, cpu)
}

// BenchmarkHotHash is the hash of a short key under a compiled policy.
func BenchmarkHotHash(b *testing.B) {
	s := New(Options{})
	p := hotPolicy
	c := s.compile(&p)
	cpu := cpuTime()
	for b.Loop() {
		s.hash(c, "user:1")
	}
	reportCPU(b, cpu)
}

// BenchmarkHotLock is an uncontended Lock and Unlock around an increment.
func BenchmarkHotLock(b *testing.B) {
	var mu sync.Mutex
	n := 0
	cpu := cpuTime()
	for b.Loop() {
		mu.Lock()
		n++
		mu.Unlock()
	}
	reportCPU(b, cpu)
	if n != b.N {
		b.Fatalf("%d increments, want %d", n, b.N)
	}
}

// BenchmarkHotTokenBucket is the algorithm alone, on an existing key.
func BenchmarkHotTokenBucket(b *testing.B) {
	pp := algo.Prepare(algo.Params{Limit: 1, Burst: 1_000_000_000, Period: 1_000_000})
	var st algo.TAT
	var r algo.Result
	t := int64(1_700_000_000_000_000)
	cpu := cpuTime()
	for b.Loop() {
		st = pp.TokenBucketTo(&r, st, t, 1)
	}
	reportCPU(b, cpu)
	if !r.Allowed {
		b.Fatalf("TokenBucketTo = %+v, want allowed", r)
	}
}

// BenchmarkHotStoreAllow is Store.Allow on one key at an explicit time that
// advances 1 µs per request, and on the store's clock.
func BenchmarkHotStoreAllow(b *testing.B) {
	ctx := context.Background()
	b.Run("explicit", func(b *testing.B) {
		s := New(Options{})
		req := sluice.Request{Policy: hotPolicy, Key: "user:1", Cost: 1}
		now := time.Unix(1_700_000_000, 0)
		cpu := cpuTime()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			d, err := s.Allow(ctx, now, req)
			if err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("clock", func(b *testing.B) {
		s := New(Options{})
		req := sluice.Request{Policy: hotPolicy, Key: "user:1", Cost: 1}
		cpu := cpuTime()
		for b.Loop() {
			d, err := s.Allow(ctx, time.Time{}, req)
			if err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		reportCPU(b, cpu)
	})
}

// BenchmarkHotLimiterAllow is Limiter.Allow on one key, on the store's
// clock, through the Store interface.
func BenchmarkHotLimiterAllow(b *testing.B) {
	ctx := context.Background()
	l, err := sluice.New(New(Options{}), hotPolicy)
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime()
	for b.Loop() {
		d, err := l.Allow(ctx, "user:1", 1)
		if err != nil || !d.Allowed {
			b.Fatalf("Allow = %+v, %v, want allowed", d, err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkHotKeys is Store.Allow over n existing keys, in parallel, at an
// explicit time. Each goroutine builds the key of each request into one
// reused buffer, as a service builds it from the request it handles; the
// string aliases the buffer, which is safe because the store keeps no key.
func BenchmarkHotKeys(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100_000, 1_000_000} {
		s := New(Options{})
		now := time.Unix(1_700_000_000, 0)
		for i := range n {
			if _, err := s.Allow(ctx, now, sluice.Request{Policy: hotPolicy, Key: "user:" + strconv.Itoa(i), Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var seeds atomic.Uint64
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				x := seeds.Add(1) * 0x9e3779b97f4a7c15 // xorshift64* state
				buf := make([]byte, 0, 32)
				req := sluice.Request{Policy: hotPolicy, Cost: 1}
				for pb.Next() {
					x ^= x >> 12
					x ^= x << 25
					x ^= x >> 27
					buf = strconv.AppendUint(append(buf[:0], "user:"...), (x*0x2545f4914f6cdd1d)%uint64(n), 10)
					req.Key = unsafe.String(unsafe.SliceData(buf), len(buf))
					d, err := s.Allow(ctx, now, req)
					if err != nil || !d.Allowed {
						b.Errorf("Allow = %+v, %v, want allowed", d, err)
						return
					}
				}
			})
			reportCPU(b, cpu)
		})
	}
}
