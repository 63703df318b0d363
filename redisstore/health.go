package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Health is what Check found: whether Redis can decide the store's keys
// now.
type Health struct {
	// Masters is how many Redis masters hold the store's keys: on Redis
	// Cluster, the masters that own hash slots in the cluster's slot map;
	// with a single Redis or Sentinel, 1.
	Masters int
	// Down names the masters whose keys Redis cannot decide now, sorted:
	// host:port on Redis Cluster; with a single Redis or Sentinel, the
	// configured addresses, joined by commas. When the store cannot reach
	// Redis at all it holds every master, or the configured addresses
	// when the masters are not known.
	Down []string
	// Err is the first failure; nil exactly when Down is empty.
	Err error
	// Cluster reports that the store is on Redis Cluster, where an
	// AllowAll over keys in different hash slots fails with ErrCrossSlot;
	// false also while the store could not connect (it does not know yet).
	Cluster bool
}

// Partial reports whether some masters, but not all, are down: on Redis
// Cluster, the keys of the masters that answer are still decided by Redis.
func (h Health) Partial() bool { return len(h.Down) > 0 && len(h.Down) < h.Masters }

// Check tells whether Redis can decide the store's keys now, for readiness
// probes and status pages; it ignores the circuit breakers and decides
// nothing. With a single Redis or Sentinel it sends PING to the master. On
// Redis Cluster it checks each master that owns hash slots in the
// cluster's slot map (the map the per-master breakers use): it reads a key
// of one of the master's slots (EXISTS, under the store's prefix; such a
// key is never written), routed as the store's decisions are, within
// Options.Timeout. When one fails it reads the slot map again and checks
// the masters the map names now, so that a master a failover replaced
// stops counting as soon as the cluster has promoted its replica. Nodes
// that own no slots, replicas and dead masters alike, never count, whether
// or not they are listed in Options.Addrs.
func (s *Store) Check(ctx context.Context) Health {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	c, err := s.conn(cctx)
	cancel()
	if err != nil {
		return Health{Masters: 1, Down: []string{s.seeds()}, Err: fmt.Errorf("redisstore: %w", err)}
	}
	if !s.users.enter() {
		return Health{Masters: 1, Down: []string{s.seeds()}, Err: ErrClosed}
	}
	defer s.users.exit()
	if c.Mode() != rueidis.ClientModeCluster {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		if err := c.Do(cctx, c.B().Ping().Build()).Error(); err != nil {
			return Health{Masters: 1, Down: []string{s.seeds()}, Err: fmt.Errorf("redisstore: ping: %w", err)}
		}
		return Health{Masters: 1}
	}
	if s.breakers.probeKeys() == nil {
		if err := s.loadSlots(ctx, c); err != nil {
			return Health{Masters: 1, Down: []string{s.seeds()}, Err: err, Cluster: true}
		}
	}
	h := s.probe(ctx, c, s.breakers.probeKeys())
	if h.Err != nil && s.loadSlots(ctx, c) == nil {
		// The map may name a master that a failover has replaced.
		h = s.probe(ctx, c, s.breakers.probeKeys())
	}
	h.Cluster = true
	return h
}

// Ping returns Check's error: nil when Redis can decide every key of the
// store now.
func (s *Store) Ping(ctx context.Context) error {
	return s.Check(ctx).Err
}

// seeds returns the configured addresses, for messages.
func (s *Store) seeds() string {
	if len(s.clientOpt.InitAddress) == 0 {
		return "redis"
	}
	return strings.Join(s.clientOpt.InitAddress, ",")
}

// loadSlots reads the cluster's slot map now, within Options.Timeout.
func (s *Store) loadSlots(ctx context.Context, c rueidis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.breakers.load(ctx, c); err != nil {
		return fmt.Errorf("redisstore: read the cluster's slot map: %w", err)
	}
	return nil
}

// probe reads each master's probe key, all at once, each within
// Options.Timeout.
func (s *Store) probe(ctx context.Context, c rueidis.Client, probes []probeKey) Health {
	if len(probes) == 0 {
		return Health{Masters: 1, Down: []string{s.seeds()}, Err: errors.New("redisstore: the cluster's slot map assigns no slot")}
	}
	errs := make([]error, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			// Built as an arbitrary command, which rueidis does not retry
			// as it retries EXISTS: a dead master fails the check at once,
			// as it fails a decision, rather than at the deadline.
			errs[i] = c.Do(pctx, c.B().Arbitrary("EXISTS").Keys(s.prefix+p.tag).Build()).Error()
		})
	}
	wg.Wait()
	h := Health{Masters: len(probes)}
	for i, err := range errs {
		if err == nil {
			continue
		}
		h.Down = append(h.Down, probes[i].addr)
		if h.Err == nil {
			h.Err = fmt.Errorf("redisstore: master %s: %w", probes[i].addr, err)
		}
	}
	return h
}

// probeKey is how Check reaches one master: a hash tag of one of its
// slots, and its address.
type probeKey struct {
	addr, tag string
}

// probeTags returns, for each master of the slot map m, a hash tag
// "{r:N}" that falls in one of its slots, sorted by address. State keys
// are tagged "{k:...}", so a probe key is never one of them.
func probeTags(m *[numSlots]*breaker, addrs map[string]*breaker) []probeKey {
	out := make([]probeKey, 0, len(addrs))
	for addr, b := range addrs {
		// For a master that owns a third of the slots this takes about 3
		// tries, for one that owns a single slot about 16,384; the bound
		// only guards against a map in which ranges overlap.
		for n := range maxProbeTries {
			t := "r:" + strconv.Itoa(n)
			if m[crc16(t)&(numSlots-1)] == b {
				out = append(out, probeKey{addr: addr, tag: "{" + t + "}"})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b probeKey) int { return cmp.Compare(a.addr, b.addr) })
	return out
}

// maxProbeTries bounds the search for a master's probe tag.
const maxProbeTries = 1 << 20
