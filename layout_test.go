package sluice

import (
	"testing"
	"unsafe"
)

// TestDecisionLayout checks that a Decision is a whole number of 16-byte
// words, so that a layer returning one copies it in 16-byte moves that do
// not overlap (an overlapping move stalls the next read of the copy; see
// docs/BENCHMARKS.md, "Why the hot path is shaped as it is"). A field added
// to Decision must keep it so: group the flags, or pad.
func TestDecisionLayout(t *testing.T) {
	if size := unsafe.Sizeof(Decision{}); size%16 != 0 {
		t.Errorf("unsafe.Sizeof(Decision{}) = %d, want a multiple of 16", size)
	}
}
