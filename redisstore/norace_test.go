//go:build !race

package redisstore

// failScale stretches the failure tests' timeouts, margins and cooldowns
// (4 under the race detector; see race_test.go).
const failScale = 1
