//go:build unix

// This file reads the CPU time the process has used, for the
// benchmarks and flood tests that report cpu-ns per operation (bench,
// bench/redis, test/flood): one helper instead of a copy in each.

package testkit

import (
	"syscall"
	"time"
)

// Process returns the CPU time (user and system) this process has used
// so far, or 0 when it cannot be read.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
