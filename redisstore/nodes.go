package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// numSlots is the number of Redis Cluster hash slots.
const numSlots = 16384

// topologyEvery is the least time between two reads of a cluster's slot
// map: one is read when the store first reaches the cluster, and again
// after a failed call.
const topologyEvery = time.Second

// breakers are a store's circuit breakers. A single Redis has one. On
// Redis Cluster each master has its own, found by the hash slot of the
// keys of a call, so that a dead master opens only its own breaker and the
// other masters' keys are still decided by Redis; until the store has read
// the cluster's slot map (CLUSTER SLOTS), and for slots the map does not
// cover, the store-wide breaker serves. The store's BreakerState, and
// Options.OnBreakerChange, report the worst of them: open if any is open,
// else half-open if any is, else closed.
type breakers struct {
	all       *breaker                           // the store-wide breaker
	slots     atomic.Pointer[[numSlots]*breaker] // each slot's master's breaker
	threshold int
	cooldown  time.Duration
	onChange  func(from, to BreakerState)
	onRecover func(Recovery)

	mu       sync.Mutex
	byAddr   map[string]*breaker
	probes   []probeKey   // how Check reaches each master of byAddr
	complete bool         // the slot map covers every slot: all serves none
	reported BreakerState // the overall state last reported to onChange

	reading  atomic.Bool  // a read of the slot map is under way
	lastRead atomic.Int64 // when the slot map was last read (UnixNano)
}

func newBreakers(threshold int, cooldown time.Duration, onChange func(from, to BreakerState), onRecover func(Recovery)) *breakers {
	bs := &breakers{threshold: threshold, cooldown: cooldown, onChange: onChange, onRecover: onRecover, byAddr: make(map[string]*breaker)}
	bs.all = newBreaker(threshold, cooldown, bs.changed)
	bs.all.onRecover = onRecover
	return bs
}

// forKey returns the breaker of the master that holds key.
func (bs *breakers) forKey(key string) *breaker {
	if m := bs.slots.Load(); m != nil {
		if b := m[slot(key)]; b != nil {
			return b
		}
	}
	return bs.all
}

// state returns the worst state of all the breakers.
func (bs *breakers) state() BreakerState {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.stateLocked()
}

func (bs *breakers) stateLocked() BreakerState {
	worst := BreakerClosed
	if !bs.complete {
		// The store-wide breaker still serves some slots, or all.
		worst = BreakerState(bs.all.state.Load())
	}
	for _, b := range bs.byAddr {
		worst = worse(worst, BreakerState(b.state.Load()))
	}
	return worst
}

// worse returns the worse of two states: open, then half-open, then
// closed.
func worse(a, b BreakerState) BreakerState {
	rank := func(s BreakerState) int {
		switch s {
		case BreakerOpen:
			return 2
		case BreakerHalfOpen:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// changed is every breaker's onChange: it reports a change of the worst
// state.
func (bs *breakers) changed(_, _ BreakerState) {
	if bs.onChange == nil {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.reportLocked()
}

func (bs *breakers) reportLocked() {
	if now := bs.stateLocked(); now != bs.reported {
		from := bs.reported
		bs.reported = now
		if bs.onChange != nil {
			bs.onChange(from, now)
		}
	}
}

// probeKeys returns how Check reaches each master of the slot map; nil
// before a slot map was read.
func (bs *breakers) probeKeys() []probeKey {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.probes
}

// readSlots reads the cluster's slot map in the background, unless it was
// read less than topologyEvery ago or a read is under way, or the store is
// closing (u counts the client's users).
func (bs *breakers) readSlots(c rueidis.Client, timeout time.Duration, u *users) {
	if time.Now().UnixNano()-bs.lastRead.Load() < int64(topologyEvery) || !bs.reading.CompareAndSwap(false, true) {
		return
	}
	if !u.enter() {
		bs.reading.Store(false)
		return
	}
	go func() {
		defer u.exit()
		defer bs.reading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := bs.load(ctx, c); err == nil {
			bs.lastRead.Store(time.Now().UnixNano())
		}
	}()
}

// slotRange is one entry of a cluster's slot map: slots start to end
// (inclusive) and the address of their master.
type slotRange struct {
	start, end int64
	addr       string
}

// load reads CLUSTER SLOTS and installs the slot map it gives. It asks
// every node the client knows at once and takes the first answer: a
// command without a key goes to any one node, which may be a dead one
// still listed in Options.Addrs.
func (bs *breakers) load(ctx context.Context, c rueidis.Client) error {
	nodes := c.Nodes()
	if len(nodes) == 0 {
		ranges, err := clusterSlots(ctx, c)
		if err != nil {
			return err
		}
		bs.install(ranges)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		ranges []slotRange
		err    error
	}
	answers := make(chan answer, len(nodes))
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which ends the other requests
	for _, n := range nodes {
		wg.Go(func() {
			r, err := clusterSlots(ctx, n)
			answers <- answer{r, err}
		})
	}
	var first error
	for range nodes {
		a := <-answers
		if a.err == nil {
			bs.install(a.ranges)
			return nil
		}
		if first == nil {
			first = a.err
		}
	}
	return first
}

// clusterSlots sends CLUSTER SLOTS through c and parses the reply.
func clusterSlots(ctx context.Context, c rueidis.Client) ([]slotRange, error) {
	entries, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	malformed := errors.New("redisstore: malformed CLUSTER SLOTS entry")
	ranges := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, malformed
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || start < 0 || end >= numSlots || start > end {
			return nil, malformed
		}
		host, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, malformed
		}
		ranges = append(ranges, slotRange{start, end, net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	return ranges, nil
}

// install maps each slot of ranges to its master's breaker, keeping the
// breakers of the masters it knew; a master no longer in the map no longer
// counts.
func (bs *breakers) install(ranges []slotRange) {
	m := new([numSlots]*breaker)
	masters := make(map[string]*breaker)
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, r := range ranges {
		b := masters[r.addr]
		if b == nil {
			if b = bs.byAddr[r.addr]; b == nil {
				b = newBreaker(bs.threshold, bs.cooldown, bs.changed)
				b.onRecover, b.addr = bs.onRecover, r.addr
			}
			masters[r.addr] = b
		}
		for i := r.start; i <= r.end; i++ {
			m[i] = b
		}
	}
	bs.byAddr = masters
	bs.probes = probeTags(m, masters)
	bs.complete = !slices.Contains(m[:], nil)
	bs.slots.Store(m)
	bs.reportLocked()
}
