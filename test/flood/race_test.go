//go:build race

package flood

// raceEnabled reports whether the race detector is on: its shadow memory
// makes the process's RSS say nothing about the store's.
const raceEnabled = true
