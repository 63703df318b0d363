//go:build !unix

// This file reads the CPU time the process has used, for the
// benchmarks and flood tests that report cpu-ns per operation (bench,
// bench/redis, test/flood): one helper instead of a copy in each.

package testkit

import "time"

// Process returns 0: this platform has no getrusage, and the cpu-ns
// metrics are not reported.
func Process() time.Duration { return 0 }
