package server

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTopKExactBelowK(t *testing.T) {
	tk := newTopK(4)
	for i, n := range []int{5, 3, 1} {
		for range n {
			tk.add("l", fmt.Sprint("k", i), 0)
		}
	}
	got := tk.top(10, 0)
	want := []topEntry{
		{item: topItem{limit: "l", key: "k0"}, count: 5},
		{item: topItem{limit: "l", key: "k1"}, count: 3},
		{item: topItem{limit: "l", key: "k2"}, count: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("top = %v, want %v", got, want)
	}
	if got := tk.top(2, 0); len(got) != 2 {
		t.Errorf("top(2) has %d entries, want 2", len(got))
	}
}

// TestTopKHeavyHitters streams a few heavy keys among many light ones and
// checks Space-Saving's guarantees: every key above total/k is kept, and
// each count overestimates by at most its err.
func TestTopKHeavyHitters(t *testing.T) {
	const k = 16
	tk := newTopK(k)
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]uint64{}
	total := 0
	for range 20000 {
		var key string
		if rng.IntN(3) == 0 {
			key = fmt.Sprint("heavy", rng.IntN(3))
		} else {
			key = fmt.Sprint("light", rng.IntN(5000))
		}
		truth[key]++
		total++
		tk.add("l", key, 0)
	}
	top := tk.top(k, 0)
	if len(top) != k {
		t.Fatalf("top holds %d counters, want %d", len(top), k)
	}
	kept := map[string]topEntry{}
	for _, e := range top {
		kept[e.item.key] = e
		if tr := truth[e.item.key]; e.count < tr || e.count-e.err > tr {
			t.Errorf("%s: count %d err %d, true count %d: want count-err <= true <= count", e.item.key, e.count, e.err, tr)
		}
	}
	for key, n := range truth {
		if n > uint64(total/k) {
			if _, ok := kept[key]; !ok {
				t.Errorf("%s was denied %d times (more than %d/%d) but is not kept", key, n, total, k)
			}
		}
	}
	for i := range 3 {
		if top[i].item.key[:5] != "heavy" {
			t.Errorf("top[%d] = %s, want the heavy keys first", i, top[i].item.key)
		}
	}
}

func TestTopKDecay(t *testing.T) {
	tk := newTopK(4)
	for range 8 {
		tk.add("l", "old", 10)
	}
	tk.add("l", "once", 10)
	got := tk.top(4, 11) // one minute later: halved; "once" drops to 0
	if len(got) != 1 || got[0].item.key != "old" || got[0].count != 4 {
		t.Errorf("after a minute top = %v, want old with 4", got)
	}
	if got := tk.top(4, 14); len(got) != 0 {
		t.Errorf("after four minutes top = %v, want nothing", got)
	}
	// A time before the last decay decays nothing more.
	tk.add("l", "new", 12)
	if got := tk.top(4, 12); len(got) != 1 || got[0].count != 1 {
		t.Errorf("top = %v, want new with 1", got)
	}
}

func TestTopKLongKeys(t *testing.T) {
	tk := newTopK(4)
	long := strings.Repeat("x", 1<<20)
	tk.add("l", long, 0)
	tk.add("l", long+"y", 0) // same first maxSketchKey bytes: one counter
	got := tk.top(4, 0)
	if len(got) != 1 || len(got[0].item.key) != maxSketchKey || !got[0].item.cut || got[0].count != 2 {
		t.Errorf("top = %d entries, first %d bytes cut=%v count %d; want one cut key of %d bytes counted twice",
			len(got), len(got[0].item.key), got[0].item.cut, got[0].count, maxSketchKey)
	}
}
