package memstore

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// at returns a hash whose home slot is slot in a table of size slots (the
// home is the high 64 bits of h·size), made distinct by a small tag.
func at(slot, size int, tag uint64) uint64 {
	q, _ := bits.Div64(uint64(slot), 0, uint64(size)) // floor(slot·2^64/size)
	h := q + 1 + tag
	if hi, _ := bits.Mul64(h, uint64(size)); hi != uint64(slot) {
		panic(fmt.Sprintf("at(%d, %d, %d): no such hash", slot, size, tag))
	}
	return h
}

// layout returns the slot of each of hs, failing when one is missing.
func layout(t *testing.T, tb *table[int], hs ...uint64) []int {
	t.Helper()
	slots := make([]int, len(hs))
	for i, h := range hs {
		j, ok := tb.find(h)
		if !ok {
			t.Fatalf("find(%#x) = not found, want found", h)
		}
		if tb.slots[j].v != int(h&0xffff) {
			t.Fatalf("find(%#x) = slot %d holding %d, want value %d", h, j, tb.slots[j].v, h&0xffff)
		}
		slots[i] = j
	}
	return slots
}

// checkTable checks the table's invariants: n counts the used slots, and
// every entry is found from its home without crossing an empty slot.
func checkTable(t *testing.T, tb *table[int]) {
	t.Helper()
	used := 0
	for i, s := range tb.slots {
		h := s.h
		if h == 0 {
			continue
		}
		used++
		for j := tb.home(h); j != i; j = tb.next(j) {
			if tb.slots[j].h == 0 {
				t.Fatalf("entry %#x in slot %d is cut off from its home %d by the empty slot %d", h, i, tb.home(h), j)
			}
		}
	}
	if used != tb.n {
		t.Fatalf("n = %d, but %d slots are used", tb.n, used)
	}
	if len(tb.slots) > 0 && tb.n*5 > len(tb.slots)*4 {
		t.Fatalf("%d entries in %d slots: load above 4/5", tb.n, len(tb.slots))
	}
}

func TestTableHomes(t *testing.T) {
	tb := &table[int]{}
	tb.insert(at(0, 8, 1), 1) // sizes the table to 8 slots
	if len(tb.slots) != 8 {
		t.Fatalf("a first insert made %d slots, want 8", len(tb.slots))
	}
	for slot := range 8 {
		if h := at(slot, 8, 7); tb.home(h) != slot {
			t.Errorf("home(at(%d, 8)) = %d", slot, tb.home(h))
		}
	}
}

func TestTableRemove(t *testing.T) {
	const size = 8
	h := func(slot int, v uint64) uint64 { return at(slot, size, v) }
	for _, c := range []struct {
		name   string
		insert []uint64
		remove uint64
		want   []int // slots of the entries left, in insert order
	}{
		{
			name:   "no collision",
			insert: []uint64{h(2, 1), h(5, 2)},
			remove: h(2, 1),
			want:   []int{5},
		},
		{
			name:   "a run of one home shifts back",
			insert: []uint64{h(2, 1), h(2, 2), h(2, 3)},
			remove: h(2, 1),
			want:   []int{2, 3},
		},
		{
			name:   "removing the middle of a run",
			insert: []uint64{h(2, 1), h(2, 2), h(2, 3)},
			remove: h(2, 2),
			want:   []int{2, 3},
		},
		{
			name: "an entry at its home stops the shift",
			// 2:A 3:B 4:D(home 3) 5:E(home 5); removing A moves B to 2 and
			// D to 3, and E stays at its home.
			insert: []uint64{h(2, 1), h(2, 2), h(3, 3), h(5, 4)},
			remove: h(2, 1),
			want:   []int{2, 3, 5},
		},
		{
			name: "an entry that may not move before its home",
			// 2:A 3:B(home 3) 4:C(home 2); removing A: B may not move to
			// 2 (its home is 3) but C may.
			insert: []uint64{h(2, 1), h(3, 2), h(2, 3)},
			remove: h(2, 1),
			want:   []int{3, 2},
		},
		{
			name: "wraparound",
			// 7:X 0:Y(home 7) 1:Z(home 7) 2:W(home 0); removing X moves
			// each back by one, across the end of the table.
			insert: []uint64{h(7, 1), h(7, 2), h(7, 3), h(0, 4)},
			remove: h(7, 1),
			want:   []int{7, 0, 1},
		},
		{
			name:   "wraparound, an entry at its home after the end",
			insert: []uint64{h(7, 1), h(7, 2), h(1, 3)},
			remove: h(7, 1),
			want:   []int{7, 1},
		},
		{
			name: "wraparound, an entry at its home right after the end",
			// 6:X 7:Y(home 6) 0:Z(home 0); removing X moves Y back, and Z,
			// at its home, must not move across the end to 7.
			insert: []uint64{h(6, 1), h(6, 2), h(0, 3)},
			remove: h(6, 1),
			want:   []int{6, 0},
		},
		{
			name:   "removing the last of a wrapped run",
			insert: []uint64{h(6, 1), h(6, 2), h(6, 3), h(6, 4)},
			remove: h(6, 4),
			want:   []int{6, 7, 0},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := &table[int]{}
			for _, k := range c.insert {
				tb.insert(k, int(k&0xffff))
			}
			if len(tb.slots) != size {
				t.Fatalf("table has %d slots, want %d", len(tb.slots), size)
			}
			i, ok := tb.find(c.remove)
			if !ok {
				t.Fatalf("find(%#x) before remove = not found", c.remove)
			}
			tb.remove(i)
			if _, ok := tb.find(c.remove); ok {
				t.Errorf("find(%#x) after remove = found", c.remove)
			}
			var left []uint64
			for _, k := range c.insert {
				if k != c.remove {
					left = append(left, k)
				}
			}
			if got := layout(t, tb, left...); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("slots after remove = %v, want %v", got, c.want)
			}
			checkTable(t, tb)
		})
	}
}

func TestTableGrowAndShrink(t *testing.T) {
	tb := &table[int]{}
	var hs []uint64
	sizes := []int{}
	for i := range 1000 {
		h := uint64(i+1) * 0x9e3779b97f4a7c15
		hs = append(hs, h)
		tb.insert(h, int(h&0xffff))
		if n := len(tb.slots); len(sizes) == 0 || sizes[len(sizes)-1] != n {
			sizes = append(sizes, n)
		}
	}
	checkTable(t, tb)
	layout(t, tb, hs...)
	// Growth by half: 8, 12, 18, 27, ...
	for i := 1; i < len(sizes); i++ {
		if want := sizes[i-1] + sizes[i-1]/2; sizes[i] != want {
			t.Errorf("grew from %d to %d slots, want %d", sizes[i-1], sizes[i], want)
		}
	}
	if sizes[0] != minSlots {
		t.Errorf("first size %d, want %d", sizes[0], minSlots)
	}
	// Load stays between 8/15 (just after a growth) and 4/5.
	if load := float64(tb.n) / float64(len(tb.slots)); load < 0.5 || load > 0.8 {
		t.Errorf("load %.2f after 1000 inserts", load)
	}

	// Remove all but 20; shrink gives back three quarters while the table
	// is less than 1/8 full, never below 4·minSlots.
	for _, h := range hs[20:] {
		i, _ := tb.find(h)
		tb.remove(i)
	}
	for range 10 {
		before := len(tb.slots)
		tb.shrink()
		switch {
		case before > 4*minSlots && tb.n*8 < before:
			if len(tb.slots) != max(minSlots, before/4) {
				t.Errorf("shrink from %d slots with %d entries gave %d slots, want %d", before, tb.n, len(tb.slots), before/4)
			}
		case len(tb.slots) != before:
			t.Errorf("shrink from %d slots with %d entries gave %d slots, want no change", before, tb.n, len(tb.slots))
		}
	}
	checkTable(t, tb)
	layout(t, tb, hs[:20]...)
	for _, h := range hs[20:] {
		if _, ok := tb.find(h); ok {
			t.Fatalf("find(%#x) = found after its removal", h)
		}
	}

	empty := &table[int]{}
	if _, ok := empty.find(42); ok {
		t.Error("find on an empty table = found")
	}
	empty.shrink()
	if len(empty.slots) != 0 {
		t.Errorf("shrink of an empty table made %d slots", len(empty.slots))
	}
}

// TestTableRandom runs random inserts, removes and shrinks against a Go map,
// with hashes drawn from a few homes so that runs are long and wrap.
func TestTableRandom(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		tb := &table[int]{}
		model := map[uint64]int{}
		var keys []uint64
		newHash := func() uint64 {
			for {
				var h uint64
				if r.IntN(2) == 0 {
					h = uint64(r.IntN(8))<<61 | uint64(r.IntN(1<<16)) // clustered at a few homes
				} else {
					h = r.Uint64()
				}
				if _, dup := model[h]; h != 0 && !dup {
					return h
				}
			}
		}
		for step := range 5000 {
			switch op := r.IntN(10); {
			case op < 5 || len(keys) == 0:
				h := newHash()
				v := r.Int()
				tb.insert(h, v)
				model[h] = v
				keys = append(keys, h)
			case op < 9:
				k := r.IntN(len(keys))
				h := keys[k]
				i, ok := tb.find(h)
				if !ok {
					t.Fatalf("seed %d step %d: find(%#x) = not found, want found", seed, step, h)
				}
				tb.remove(i)
				delete(model, h)
				keys[k] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			default:
				tb.shrink()
			}
			if tb.n != len(model) {
				t.Fatalf("seed %d step %d: n = %d, want %d", seed, step, tb.n, len(model))
			}
			if step%97 == 0 {
				checkTable(t, tb)
				for h, v := range model {
					i, ok := tb.find(h)
					if !ok || tb.slots[i].v != v {
						t.Fatalf("seed %d step %d: find(%#x) = %d, %v; want %d", seed, step, h, tb.slots[i].v, ok, v)
					}
				}
				for range 20 {
					if h := newHash(); h != 0 {
						if _, ok := tb.find(h); ok {
							t.Fatalf("seed %d step %d: find(%#x) = found, never inserted", seed, step, h)
						}
					}
				}
			}
		}
	}
}
