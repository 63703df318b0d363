// Package faults holds Sluice's fault and hostile-input tests: real
// redis-server processes and Redis Clusters (internal/testkit), the sluice
// binary built once and run as separate processes, and a TCP proxy that
// slows or cuts Redis's replies. Every test drives load from many
// goroutines on loopback, for a bounded time, and checks what callers saw:
// how long each call took, what was decided, and whether Redis decides
// again once it is back. docs/reliability.md records the results of the
// long runs and docs/guarantees.md names the test behind each promise.
//
// `go test ./test/faults` runs the short variant (a few seconds per
// case, CI's); `make faults` sets SLUICE_FAULTS_LONG=1 for the long one
// (200 callers for 10 s, Redis killed at 3 s and restarted at 6 s). The
// tests need redis-server and redis-cli; without them they skip, unless
// SLUICE_REQUIRE_REDIS=1 makes that a failure. The package has no code of
// its own.
package faults
