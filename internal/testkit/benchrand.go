// This file is the random source of the benchmarks that pick keys
// at random (bench, memstore): a xorshift64* generator, a few nanoseconds
// per number, no locks, one per goroutine, so that choosing a key costs
// the same in every benchmark and for every library.

package testkit

// Rand is a xorshift64* generator. Its state must not be zero; seed it
// with a distinct nonzero value per goroutine (for example a counter times
// 0x9e3779b97f4a7c15).
type Rand uint64

// Next advances r and returns the next number.
func (r *Rand) Next() uint64 {
	x := uint64(*r)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*r = Rand(x)
	return x * 0x2545f4914f6cdd1d
}
