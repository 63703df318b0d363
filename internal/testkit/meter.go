package testkit

import (
	"testing"
	"time"
)

// Meter reports a benchmark's CPU time per operation as cpu-ns/op, beside
// the wall-clock ns/op. On a machine shared with other work, wall-clock
// time includes the time the benchmark waited for a core; CPU time does
// not, so it is the steadier measure when the machine is busy (it still
// feels the caches others evict). In a parallel benchmark it adds up the
// CPU time of every goroutine, so it is about GOMAXPROCS times ns/op when
// no core sits idle, and it leaves out time spent blocked on a lock.
type Meter time.Duration

// StartMeter reads the process's CPU time now.
func StartMeter() Meter { return Meter(Process()) }

// Report adds the CPU time since m per operation of b as cpu-ns/op; it
// adds nothing where the CPU time cannot be read.
func (m Meter) Report(b *testing.B) {
	if c := Process(); m > 0 && c > 0 && b.N > 0 {
		b.ReportMetric(float64(c-time.Duration(m))/float64(b.N), "cpu-ns/op")
	}
}
