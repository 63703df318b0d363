// Package splitmix holds the splitmix64 finalizer, the one 64-bit mixer of
// the module: memstore's policy fingerprints, sluicetest's seeded generator
// and the flood tests' client addresses.
package splitmix

// Mix is the splitmix64 finalizer: a bijection on uint64 whose every
// output bit depends on every input bit.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
