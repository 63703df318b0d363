//go:build unix

package memstore

import (
	"context"
	"strconv"
	"sync"
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
// bench_test.go, under which every request is admitted.

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
	if c := cpuTime(); c > 0 && b.N > 0 {
		b.ReportMetric(float64(c-start)/float64(b.N), "cpu-ns/op")
	}
}

// sink keeps results alive so that the compiler cannot drop the work.
var sink struct {
	i int64
	u uint64
	d sluice.Decision
	r algo.Result
	c *compiled
}

func BenchmarkHotClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			sink.i += time.Now().UnixNano()
		}
		reportCPU(b, cpu)
	})
	b.Run("time.Since", func(b *testing.B) {
		base := time.Now()
		cpu := cpuTime()
		for b.Loop() {
			sink.i += int64(time.Since(base))
		}
		reportCPU(b, cpu)
	})
	b.Run("store", func(b *testing.B) {
		s := New(Options{})
		cpu := cpuTime()
		for b.Loop() {
			sink.i += s.micros(time.Time{})
		}
		reportCPU(b, cpu)
	})
	b.Run("explicit", func(b *testing.B) {
		s := New(Options{})
		now := time.Unix(1_700_000_000, 0)
		cpu := cpuTime()
		for b.Loop() {
			sink.i += s.micros(now)
		}
		reportCPU(b, cpu)
	})
}

func BenchmarkHotCompile(b *testing.B) {
	s := New(Options{})
	p := hotPolicy
	cpu := cpuTime()
	for b.Loop() {
		sink.c = s.compile(&p)
	}
	reportCPU(b, cpu)
}

func BenchmarkHotHash(b *testing.B) {
	s := New(Options{})
	p := hotPolicy
	c := s.compile(&p)
	cpu := cpuTime()
	for b.Loop() {
		sink.u += s.hash(c, "user:1")
	}
	reportCPU(b, cpu)
}

func BenchmarkHotLock(b *testing.B) {
	var mu sync.Mutex
	cpu := cpuTime()
	for b.Loop() {
		mu.Lock()
		sink.i++
		mu.Unlock()
	}
	reportCPU(b, cpu)
}

func BenchmarkHotTokenBucket(b *testing.B) {
	pp := algo.Prepare(algo.Params{Limit: 1, Burst: 1_000_000_000, Period: 1_000_000})
	var st algo.TAT
	t := int64(1_700_000_000_000_000)
	cpu := cpuTime()
	for b.Loop() {
		st = pp.TokenBucketTo(&sink.r, st, t, 1)
	}
	reportCPU(b, cpu)
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

// BenchmarkHotKeys is Store.Allow over n existing keys, in parallel, at
// explicit times, with the keys built per request as a service builds them.
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
			var seed sync.Mutex
			next := uint64(0x9e3779b97f4a7c15)
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				seed.Lock()
				x := next
				next *= 0x2545f4914f6cdd1d
				seed.Unlock()
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

func BenchmarkHotCompileNamed(b *testing.B) {
	s := New(Options{})
	p := hotPolicy.Named("api")
	cpu := cpuTime()
	for b.Loop() {
		sink.c = s.compile(&p)
	}
	reportCPU(b, cpu)
}
