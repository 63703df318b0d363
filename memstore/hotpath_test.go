//go:build unix

package memstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testkit"
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

// BenchmarkHotClock compares the clocks: time.Now, time.Since (what the
// store's default clock reads), the store's clock, and an explicit time.
func BenchmarkHotClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		cpu := testkit.StartMeter()
		for b.Loop() {
			time.Now()
		}
		cpu.Report(b)
	})
	b.Run("time.Since", func(b *testing.B) {
		base := time.Now()
		cpu := testkit.StartMeter()
		for b.Loop() {
			time.Since(base)
		}
		cpu.Report(b)
	})
	b.Run("store", func(b *testing.B) {
		s := New(Options{})
		cpu := testkit.StartMeter()
		for b.Loop() {
			s.micros(time.Time{})
		}
		cpu.Report(b)
	})
	b.Run("explicit", func(b *testing.B) {
		s := New(Options{})
		now := time.Unix(1_700_000_000, 0)
		cpu := testkit.StartMeter()
		for b.Loop() {
			s.micros(now)
		}
		cpu.Report(b)
	})
}

// BenchmarkHotCompile is a hit in the compiled-policy cache, for an
// unnamed and for a named policy.
func BenchmarkHotCompile(b *testing.B) {
	for _, bc := range []struct {
		name   string
		policy sluice.Policy
	}{{"unnamed", hotPolicy}, {"named", hotPolicy.Named("api")}} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(Options{})
			p := bc.policy
			cpu := testkit.StartMeter()
			for b.Loop() {
				s.compile(&p)
			}
			cpu.Report(b)
		})
	}
}

// BenchmarkHotHash is the hash of a short key under a compiled policy.
func BenchmarkHotHash(b *testing.B) {
	s := New(Options{})
	p := hotPolicy
	c := s.compile(&p)
	cpu := testkit.StartMeter()
	for b.Loop() {
		s.hash(c, "user:1")
	}
	cpu.Report(b)
}

// BenchmarkHotLock is an uncontended Lock and Unlock around an increment.
func BenchmarkHotLock(b *testing.B) {
	var mu sync.Mutex
	n := 0
	cpu := testkit.StartMeter()
	for b.Loop() {
		mu.Lock()
		n++
		mu.Unlock()
	}
	cpu.Report(b)
	if n != b.N {
		b.Fatalf("%d increments, want %d", n, b.N)
	}
}

// BenchmarkHotTokenBucket is the algorithm alone, on an existing key.
func BenchmarkHotTokenBucket(b *testing.B) {
	pp := algo.Prepare(algo.Params{Limit: 1, Burst: 1_000_000_000, Period: 1_000_000})
	var st algo.TAT
	var r algo.Verdict
	t := int64(1_700_000_000_000_000)
	cpu := testkit.StartMeter()
	for b.Loop() {
		st = pp.TokenBucketTo(st, t, 1, &r)
	}
	cpu.Report(b)
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
		req := sluice.Request{Policy: &hotPolicy, Key: "user:1", Cost: 1}
		now := time.Unix(1_700_000_000, 0)
		cpu := testkit.StartMeter()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			d, err := s.Allow(ctx, now, req)
			if err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		cpu.Report(b)
	})
	b.Run("clock", func(b *testing.B) {
		s := New(Options{})
		req := sluice.Request{Policy: &hotPolicy, Key: "user:1", Cost: 1}
		cpu := testkit.StartMeter()
		for b.Loop() {
			d, err := s.Allow(ctx, time.Time{}, req)
			if err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v, want allowed", d, err)
			}
		}
		cpu.Report(b)
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
	cpu := testkit.StartMeter()
	for b.Loop() {
		d, err := l.Allow(ctx, "user:1", 1)
		if err != nil || !d.Allowed {
			b.Fatalf("Allow = %+v, %v, want allowed", d, err)
		}
	}
	cpu.Report(b)
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
			if _, err := s.Allow(ctx, now, sluice.Request{Policy: &hotPolicy, Key: "user:" + strconv.Itoa(i), Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var seeds atomic.Uint64
			cpu := testkit.StartMeter()
			b.RunParallel(func(pb *testing.PB) {
				r := testkit.Rand(seeds.Add(1) * 0x9e3779b97f4a7c15)
				buf := make([]byte, 0, 32)
				req := sluice.Request{Policy: &hotPolicy, Cost: 1}
				for pb.Next() {
					buf = strconv.AppendUint(append(buf[:0], "user:"...), r.Next()%uint64(n), 10)
					req.Key = unsafe.String(unsafe.SliceData(buf), len(buf))
					d, err := s.Allow(ctx, now, req)
					if err != nil || !d.Allowed {
						b.Errorf("Allow = %+v, %v, want allowed", d, err)
						return
					}
				}
			})
			cpu.Report(b)
		})
	}
}
