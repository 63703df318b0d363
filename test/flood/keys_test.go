package flood

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/splitmix"
)

// permute32 is a bijection on uint32 (each step of the lowbias32 mixer is
// invertible), so distinct inputs give distinct, well-spread outputs.
func permute32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// floodKey returns the text form of the i-th client address of a flood:
// an IPv4 address for even i and an IPv6 address for odd i, spread over
// the address space. Keys are distinct for distinct i below 2³³: the IPv4
// addresses are a permutation of the 32-bit space, and each IPv6 address
// is in its own /64 within 2001:db8::/32 (the documentation prefix), with
// an interface identifier that depends on seed.
func floodKey(i, seed uint64) string {
	n := uint32(i >> 1)
	if i&1 == 0 {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], permute32(n))
		return netip.AddrFrom4(a).String()
	}
	var a [16]byte
	binary.BigEndian.PutUint32(a[0:], 0x20010db8)
	binary.BigEndian.PutUint32(a[4:], permute32(n^0x5bd1e995))
	binary.BigEndian.PutUint64(a[8:], splitmix.Mix(uint64(n)^seed))
	return netip.AddrFrom16(a).String()
}

// TestFloodKeysDistinct checks that floodKey gives distinct, valid IPv4 and
// IPv6 addresses.
func TestFloodKeysDistinct(t *testing.T) {
	const n = 200_000
	seen := make(map[string]uint64, n)
	v4, v6 := 0, 0
	for i := range uint64(n) {
		k := floodKey(i, 42)
		a, err := netip.ParseAddr(k)
		if err != nil {
			t.Fatalf("floodKey(%d) = %q: %v", i, k, err)
		}
		if a.Is4() {
			v4++
		} else {
			v6++
		}
		if j, dup := seen[k]; dup {
			t.Fatalf("floodKey(%d) = floodKey(%d) = %q, want distinct keys", i, j, k)
		}
		seen[k] = i
	}
	if v4 != n/2 || v6 != n/2 {
		t.Errorf("%d IPv4 and %d IPv6 keys, want %d of each", v4, v6, n/2)
	}
}
