package memstore_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// seen is what Options.OnDecided told of one request.
type seen struct {
	req   sluice.Request
	at    time.Time
	order uint64
}

// TestOnDecidedClamped: a call given a time before one its shard has seen
// is decided, and reported, at the later time; each decision has an
// order of its own, an AllowAll's requests one between them, and Peek's
// decisions are reported too.
func TestOnDecidedClamped(t *testing.T) {
	var got []seen
	st := memstore.New(memstore.Options{Shards: 1, OnDecided: func(_ context.Context, req sluice.Request, at time.Time, order uint64) {
		got = append(got, seen{req, at, order})
	}})
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindowAlgorithm, Limit: 2, Period: time.Second}
	ctx := context.Background()
	late := t0.Add(10 * time.Millisecond)
	if _, err := st.Allow(ctx, late, sluice.Request{Policy: &p, Key: "a", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Allow(ctx, t0, sluice.Request{Policy: &p, Key: "b", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AllowAll(ctx, t0, []sluice.Request{{Policy: &p, Key: "a", Cost: 1}, {Policy: &p, Key: "c", Cost: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Peek(ctx, t0, sluice.Request{Policy: &p, Key: "a", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	// A cost that can never pass decides nothing: not reported.
	if _, err := st.Allow(ctx, t0, sluice.Request{Policy: &p, Key: "a", Cost: 3}); err == nil {
		t.Fatal("a cost above the capacity was admitted")
	}
	want := []seen{
		{sluice.Request{Policy: &p, Key: "a", Cost: 1}, late, 1},
		{sluice.Request{Policy: &p, Key: "b", Cost: 1}, late, 2},
		{sluice.Request{Policy: &p, Key: "a", Cost: 1}, late, 3},
		{sluice.Request{Policy: &p, Key: "c", Cost: 1}, late, 3},
		{sluice.Request{Policy: &p, Key: "a", Cost: 1}, late, 4},
	}
	if len(got) != len(want) {
		t.Fatalf("OnDecided was told of %d decisions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if g, w := got[i], want[i]; g.req.Key != w.req.Key || !g.at.Equal(w.at) || g.order != w.order {
			t.Errorf("decision %d: told %s at %v order %d, want %s at %v order %d", i, g.req.Key, g.at, g.order, w.req.Key, w.at, w.order)
		}
	}
}

// call is one decision of TestOnDecidedReplays: its requests (one for
// Allow and Peek), what the store answered, and what OnDecided told.
type call struct {
	op    string // "allow", "all" or "peek"
	reqs  []sluice.Request
	ds    []sluice.Decision
	now   time.Time // the time the caller read
	at    time.Time
	order uint64
}

type callKey struct{}

// TestOnDecidedReplays decides concurrently, each caller reading a shared
// clock before its call as the decision log's store does, so that a call
// often finds its shard at a later time than it read; then it decides
// the same calls one at a time, in the order OnDecided told, at the times
// it told (by time, then order, as a replay of the decision log), on a
// new store: every decision comes out the same. Decided at the times the
// callers read, many would not.
func TestOnDecidedReplays(t *testing.T) {
	pols := []sluice.Policy{
		{Name: "tb", Algorithm: sluice.TokenBucketAlgorithm, Limit: 3, Period: 60 * time.Microsecond},
		{Name: "fw", Algorithm: sluice.FixedWindowAlgorithm, Limit: 2, Period: 40 * time.Microsecond},
		{Name: "sw", Algorithm: sluice.SlidingWindowAlgorithm, Limit: 3, Period: 100 * time.Microsecond},
	}
	// The shared clock, in µs after t0, and the steps each call moves it
	// by: mostly none, so that calls share a µs, sometimes several, so
	// that a call that read the clock first and locked second finds its
	// shard later by as much.
	var clock atomic.Int64
	steps := []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 3, 5, 10, 20}
	st := memstore.New(memstore.Options{Shards: 2, OnDecided: func(ctx context.Context, req sluice.Request, at time.Time, order uint64) {
		c := ctx.Value(callKey{}).(*call)
		c.at, c.order = at, order
	}})
	const workers, each = 8, 300
	calls := make([][]*call, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range each {
				c := &call{}
				for range 1 + rng.IntN(2) {
					p := &pols[rng.IntN(len(pols))]
					c.reqs = append(c.reqs, sluice.Request{Policy: p, Key: fmt.Sprint("k", rng.IntN(3)), Cost: 1})
				}
				c.op = "all"
				if len(c.reqs) == 1 {
					c.op = []string{"allow", "allow", "peek"}[rng.IntN(3)]
				}
				c.ds = make([]sluice.Decision, len(c.reqs))
				ctx := context.WithValue(context.Background(), callKey{}, c)
				now := t0.Add(time.Duration(clock.Add(steps[rng.IntN(len(steps))])) * time.Microsecond)
				c.now = now
				if rng.IntN(4) == 0 {
					// A caller descheduled between its clock read and
					// its call: others read later times and decide
					// first, on its shard too.
					runtime.Gosched()
				}
				var err error
				switch c.op {
				case "allow":
					c.ds[0], err = st.Allow(ctx, now, c.reqs[0])
				case "peek":
					c.ds[0], err = st.Peek(ctx, now, c.reqs[0])
				default:
					_, err = st.AllowAll(ctx, now, c.reqs, c.ds)
				}
				if err != nil {
					t.Error(err)
					return
				}
				calls[w] = append(calls[w], c)
			}
		})
	}
	wg.Wait()
	all := slices.Concat(calls...)
	slices.SortFunc(all, func(a, b *call) int { return cmp.Compare(a.order, b.order) })
	for i, c := range all {
		if c.order != uint64(i+1) {
			t.Fatalf("the orders told are not 1 to %d: %d at %d", len(all), c.order, i)
		}
	}
	// later counts the calls decided after the time their caller read
	// (their shard had seen a later one); apart, those told a time before
	// the previous order's (on another shard).
	later, apart := 0, 0
	for i, c := range all {
		if c.at.Before(c.now) {
			t.Fatalf("order %d was told %v, before the time it was given, %v", c.order, c.at, c.now)
		}
		if c.at.After(c.now) {
			later++
		}
		if i > 0 && c.at.Before(all[i-1].at) {
			apart++
		}
	}
	if later == 0 {
		// Then the times told are the times given, and the test shows
		// nothing the callers' times would not.
		t.Fatalf("no call of %d found its shard at a later time than it read", len(all))
	}
	// As a replay of the decision log does: by time, then order.
	slices.SortFunc(all, func(a, b *call) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.order, b.order)) })
	changed := 0
	re := memstore.New(memstore.Options{})
	ctx := context.Background()
	for _, c := range all {
		ds := make([]sluice.Decision, len(c.reqs))
		var err error
		switch c.op {
		case "allow":
			ds[0], err = re.Allow(ctx, c.at, c.reqs[0])
		case "peek":
			ds[0], err = re.Peek(ctx, c.at, c.reqs[0])
		default:
			_, err = re.AllowAll(ctx, c.at, c.reqs, ds)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range ds {
			if ds[i] != c.ds[i] {
				changed++
				if changed <= 5 {
					t.Errorf("order %d (%s %s at %v) replays as %+v, was %+v", c.order, c.op, c.reqs[i].Key, c.at, ds[i], c.ds[i])
				}
			}
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d decisions replay differently in the order and at the times told", changed, len(all))
	}
	t.Logf("%d decisions; %d decided after the time read; %d told a time before the previous order's (other shard)", len(all), later, apart)
}
