package memstore

import (
	"testing"
	"unsafe"
)

// TestShardLayout checks that shards fill whole cache lines and that a
// token-bucket decision's fields (the lock, the clock and the token-bucket
// table's header) lie in the first one. A field added to shard must keep
// both true, with padding if need be.
func TestShardLayout(t *testing.T) {
	const line = 64
	var sh shard
	if size := unsafe.Sizeof(sh); size%line != 0 {
		t.Errorf("unsafe.Sizeof(shard{}) = %d, want a multiple of %d", size, line)
	}
	if end := unsafe.Offsetof(sh.tat) + unsafe.Sizeof(sh.tat); end > line {
		t.Errorf("shard.tat ends at byte %d, want within the first %d", end, line)
	}
}
