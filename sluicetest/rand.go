package sluicetest

import "github.com/sluicehq/sluice/internal/splitmix"

// rand is a splitmix64 generator. The suite and RandomTrace use their own
// generator, not math/rand, so that a seed names the same trace in every Go
// release and a failing seed can be replayed years later.
type rand struct{ state uint64 }

func newRand(seed uint64) *rand { return &rand{state: seed} }

func (r *rand) uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	return splitmix.Mix(r.state)
}

// int63n returns a number in [0, n) for n > 0. The modulo bias, below
// n/2^64, does not matter to a test.
func (r *rand) int63n(n int64) int64 { return int64(r.uint64() % uint64(n)) }

// intn is int63n for ints.
func (r *rand) intn(n int) int { return int(r.int63n(int64(n))) }
