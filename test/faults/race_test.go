//go:build race

package faults

// raceEnabled reports whether the race detector is on: it makes the test
// process several times slower, so the load tests send less.
const raceEnabled = true
