//go:build !unix

package flood

import "time"

// processCPU returns 0: this platform has no getrusage, and the cpu-ns/op
// metric is not reported.
func processCPU() time.Duration { return 0 }
