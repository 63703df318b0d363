package memstore

import "math/bits"

// table is an open-addressing hash table from 64-bit key hashes to states,
// with linear probing and backward-shift deletion (no tombstones). Hash 0
// marks an empty slot, so callers never store 0 (see Store.hash).
//
// Each slot holds a hash and its state side by side, so a lookup that finds
// its key at home touches one cache line rather than one in an array of
// hashes and one in an array of states, and the table's header is one slice
// and a count (32 bytes), which lets a shard's lock, clock and token-bucket
// table share one cache line.
//
// It grows by half when more than 4/5 of its slots are used, so its load
// stays between 8/15 and 4/5: with 24-byte slots that is 30 to 45 bytes per
// key, where a doubling table would swing between 30 and 60.
type table[V any] struct {
	slots []slot[V]
	n     int
}

// slot is one entry of a table; h is 0 when the slot is empty.
type slot[V any] struct {
	h uint64
	v V
}

const minSlots = 8

// home returns the slot where a probe for h starts. It uses the high bits of
// h (the low bits pick the shard).
func (t *table[V]) home(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *table[V]) next(i int) int {
	i++
	if i == len(t.slots) {
		return 0
	}
	return i
}

// find returns the slot holding h and true, or false when h is absent.
func (t *table[V]) find(h uint64) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	for i := t.home(h); ; i = t.next(i) {
		switch t.slots[i].h {
		case h:
			return i, true
		case 0:
			return i, false
		}
	}
}

// lookup returns the slot holding h, its state and true, or, when h is
// absent, the zero V (a key's initial state) and false.
func (t *table[V]) lookup(h uint64) (int, V, bool) {
	i, found := t.find(h)
	if !found {
		var zero V
		return i, zero, false
	}
	return i, t.slots[i].v, true
}

// insert adds h, which must be absent, with value v, growing the table when
// needed, and returns its slot.
func (t *table[V]) insert(h uint64, v V) int {
	if (t.n+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	i := t.home(h)
	for t.slots[i].h != 0 {
		i = t.next(i)
	}
	t.slots[i] = slot[V]{h, v}
	t.n++
	return i
}

func (t *table[V]) grow() {
	t.resize(max(minSlots, len(t.slots)+len(t.slots)/2))
}

func (t *table[V]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[V], size)
	for _, s := range old {
		if s.h == 0 {
			continue
		}
		i := t.home(s.h)
		for t.slots[i].h != 0 {
			i = t.next(i)
		}
		t.slots[i] = s
	}
}

// remove deletes the entry in slot i and shifts later entries of its probe
// run back, so that every remaining entry stays reachable from its home.
func (t *table[V]) remove(i int) {
	j := i
	for {
		j = t.next(j)
		h := t.slots[j].h
		if h == 0 {
			break
		}
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		k := t.home(h)
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot[V]{}
	t.n--
}

// shrink rebuilds a table that is less than 1/8 full at a quarter of its
// size, giving back the memory of keys that are gone.
func (t *table[V]) shrink() {
	if len(t.slots) <= 4*minSlots || t.n*8 >= len(t.slots) {
		return
	}
	t.resize(max(minSlots, len(t.slots)/4))
}
