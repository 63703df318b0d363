//go:build !unix

package redis

import "time"

// processCPU returns 0: this platform has no getrusage, and the
// cpu-ns/decision metric is not reported.
func processCPU() time.Duration { return 0 }
