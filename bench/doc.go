// Package bench compares Sluice's in-memory store with other Go rate
// limiters in one run: golang.org/x/time/rate, sethvargo/go-limiter's
// memorystore and throttled/throttled's memstore with its GCRA limiter.
//
// It is a separate module so that users of Sluice never download the peers.
// The benchmarks are in bench_test.go; run.sh runs them the way
// docs/BENCHMARKS.md reports them, and compare.sh measures the hot path's
// rows at several commits, each built with several function layouts.
package bench
