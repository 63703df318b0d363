// This file runs a benchmark's decisions from several goroutines
// in a closed loop (each caller makes its next decision as soon as its
// last one returns) and reports what the callers saw: decisions per
// second and latency percentiles. The Redis benchmarks of bench/redis and
// redisstore use it.

package testkit

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RunCallers makes b.N decisions from callers goroutines, each calling decide
// with the next of the numbers 1 to b.N, and reports decisions/s, p50-µs
// and p99-µs. It resets b's timer before the first decision and stops it
// after the last, so that what the caller measures after RunCallers (CPU time,
// Redis's counters) spans the decisions alone. The first error stops every
// caller and fails the benchmark.
func RunCallers(b *testing.B, callers int, decide func(n int64) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Value
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			own := make([]time.Duration, 0, b.N/callers+1)
			for n := next.Add(1); n <= int64(b.N) && failed.Load() == nil; n = next.Add(1) {
				t := time.Now()
				if err := decide(n); err != nil {
					failed.CompareAndSwap(nil, err)
					break
				}
				own = append(own, time.Since(t))
			}
			lat[c] = own
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}
