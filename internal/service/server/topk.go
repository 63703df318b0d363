package server

import (
	"cmp"
	"slices"
	"strings"
	"sync"
)

// maxSketchKey is the longest key the denied-keys sketch keeps; a longer
// key is kept cut to this many bytes (and shown as cut), so that a flood of
// long keys cannot make the sketch large.
const maxSketchKey = 200

// topK estimates the (limit, key) pairs denied most often recently, in
// bounded memory: the Space-Saving algorithm (Metwally, Agrawal and El
// Abbadi, 2005) over at most k counters, with every count halved once a
// minute so that old denials fade.
//
// Space-Saving guarantees that every pair denied more than total/k times
// (total: the decayed number of denials counted) holds a counter, and that
// a counter overestimates its pair's count by at most its err. A topK is
// safe for concurrent use.
type topK struct {
	mu      sync.Mutex
	k       int
	entries []topEntry      // at most k
	index   map[topItem]int // item -> position in entries
	minute  int64           // the minute of the last decay
	total   uint64          // decayed denials counted
}

// topItem is what the sketch counts: a key under a limit.
type topItem struct {
	limit, key string
	cut        bool // key was longer than maxSketchKey
}

type topEntry struct {
	item       topItem
	count, err uint64
}

func newTopK(k int) *topK {
	return &topK{k: k, index: make(map[topItem]int, k)}
}

// add counts one denial of key under limit during the given minute (Unix
// time / 60).
func (t *topK) add(limit, key string, minute int64) {
	it := topItem{limit: limit, key: key}
	if len(key) > maxSketchKey {
		it.key, it.cut = key[:maxSketchKey], true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay(minute)
	t.total++
	if i, ok := t.index[it]; ok {
		t.entries[i].count++
		return
	}
	// A new item: copy its strings, so that the sketch does not keep the
	// request they came from.
	it.limit, it.key = strings.Clone(it.limit), strings.Clone(it.key)
	if len(t.entries) < t.k {
		t.index[it] = len(t.entries)
		t.entries = append(t.entries, topEntry{item: it, count: 1})
		return
	}
	// Replace the smallest counter; the newcomer inherits its count as
	// its possible overestimate.
	m := 0
	for i := 1; i < len(t.entries); i++ {
		if t.entries[i].count < t.entries[m].count {
			m = i
		}
	}
	old := t.entries[m]
	delete(t.index, old.item)
	t.entries[m] = topEntry{item: it, count: old.count + 1, err: old.count}
	t.index[it] = m
}

// decay halves every count once per minute passed since the last decay,
// and drops the counters that reach zero. t.mu must be held.
func (t *topK) decay(minute int64) {
	if minute <= t.minute {
		return
	}
	shift := min(minute-t.minute, 63)
	t.minute = minute
	t.total >>= shift
	kept := t.entries[:0]
	for _, e := range t.entries {
		e.count >>= shift
		e.err >>= shift
		if e.count > 0 {
			kept = append(kept, e)
		}
	}
	clear(t.entries[len(kept):])
	t.entries = kept
	clear(t.index)
	for i, e := range t.entries {
		t.index[e.item] = i
	}
}

// top returns up to n entries, the highest counts first (ties by limit and
// key), after decaying to the given minute.
func (t *topK) top(n int, minute int64) []topEntry {
	t.mu.Lock()
	t.decay(minute)
	out := slices.Clone(t.entries)
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b topEntry) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.item.limit, b.item.limit), cmp.Compare(a.item.key, b.item.key))
	})
	return out[:min(n, len(out))]
}
