//go:build race

package redisstore

// failScale stretches the failure tests' timeouts, margins and cooldowns:
// the race detector makes the process several times slower, too slow for
// a round trip within 50 ms on a loaded machine.
const failScale = 4
