package redisstore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestBreakersWorst drives the per-master breakers without Redis: the
// store-wide breaker counts until a slot map covers every slot, a dead
// master's breaker opens only for its slots, a master that leaves the map
// stops counting, and OnBreakerChange sees every change of the worst
// state, in order.
func TestBreakersWorst(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	bs := newBreakers(2, time.Hour, func(from, to BreakerState) {
		mu.Lock()
		changes = append(changes, from.String()+"->"+to.String())
		mu.Unlock()
	}, nil)
	trip := func(b *breaker) {
		for range 2 {
			b.failure(false)
		}
	}
	// A key in a low slot, and one in a high slot.
	var low, high string
	for i := 0; low == "" || high == ""; i++ {
		k := fmt.Sprint("k", i)
		if slot(k) < 8192 && low == "" {
			low = k
		} else if slot(k) >= 8192 && high == "" {
			high = k
		}
	}

	trip(bs.all)
	if bs.state() != BreakerOpen || bs.forKey(low) != bs.all {
		t.Fatalf("before a slot map: state %v, want open through the store-wide breaker", bs.state())
	}
	bs.install([]slotRange{{0, 8191, "a:1"}, {8192, numSlots - 1, "b:1"}})
	if bs.state() != BreakerClosed {
		t.Errorf("a complete slot map: state %v, want closed (the store-wide breaker serves no slot)", bs.state())
	}
	a, b := bs.forKey(low), bs.forKey(high)
	if a == bs.all || b == bs.all || a == b {
		t.Fatalf("forKey: low %p, high %p, store-wide %p; want two masters' breakers", a, b, bs.all)
	}
	trip(a)
	if bs.state() != BreakerOpen || BreakerState(b.state.Load()) != BreakerClosed {
		t.Errorf("master a dead: state %v, b %v; want open, b closed", bs.state(), BreakerState(b.state.Load()))
	}
	// a fails over to c: a no longer counts.
	bs.install([]slotRange{{0, 8191, "c:1"}, {8192, numSlots - 1, "b:1"}})
	if bs.state() != BreakerClosed || bs.forKey(high) != b {
		t.Errorf("after the failover: state %v, want closed, b kept", bs.state())
	}
	// A map with a gap: the store-wide breaker, still open, counts again.
	bs.install([]slotRange{{0, 100, "c:1"}})
	if bs.state() != BreakerOpen || bs.forKey(high) != bs.all {
		t.Errorf("a map with a gap: state %v, want open from the store-wide breaker", bs.state())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"closed->open", "open->closed", "closed->open", "open->closed", "closed->open"}
	if !slices.Equal(changes, want) {
		t.Errorf("OnBreakerChange calls = %v, want %v", changes, want)
	}
}

// TestProbeTags checks that Check's probe key of each master falls in one
// of that master's slots, masters sorted by address, even for a master
// that owns a single slot.
func TestProbeTags(t *testing.T) {
	bs := newBreakers(1, time.Second, nil, nil)
	bs.install([]slotRange{{0, 5460, "c:1"}, {5461, 5461, "a:1"}, {5462, numSlots - 1, "b:1"}})
	probes := bs.probeKeys()
	var addrs []string
	for _, p := range probes {
		addrs = append(addrs, p.addr)
		if got, want := bs.forKey("x"+p.tag+"y"), bs.byAddr[p.addr]; got != want {
			t.Errorf("probe tag %s of %s is in slot %d, not one of its master's", p.tag, p.addr, slot(p.tag))
		}
	}
	if want := []string{"a:1", "b:1", "c:1"}; !slices.Equal(addrs, want) {
		t.Errorf("probe masters = %v, want %v", addrs, want)
	}
}

// TestBreakersRecovery checks that OnRecover hears of a run of failures
// once, when the next call succeeds, with the master's address for a
// master's breaker and none for the store-wide one.
func TestBreakersRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []Recovery
		bs := newBreakers(2, time.Hour, nil, func(r Recovery) { got = append(got, r) })
		bs.all.success()
		bs.all.failure(false)
		bs.all.success()
		bs.all.success()
		bs.install([]slotRange{{0, 8191, "a:1"}, {8192, numSlots - 1, "b:1"}})
		a := bs.slots.Load()[0]
		a.failure(false)
		time.Sleep(time.Millisecond) // the bubble's clock: down 1ms from the first failure
		a.failure(false)             // opens it
		a.failure(true)              // a probe that failed
		a.success()
		a.success()
		if len(got) != 2 || got[0].Failures != 1 || got[0].Addr != "" || got[0].Down != 0 || got[1].Failures != 3 || got[1].Addr != "a:1" || got[1].Down != time.Millisecond {
			t.Errorf("OnRecover calls = %+v, want {1 failure, no address, down 0}, {3 failures, a:1, down 1ms}", got)
		}
	})
}
