package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// estimate is one request's charge that a lease settles: request index of
// the decision, charged Cost units at the instant at (µs) to the key of
// hash h under c, to be settled before expire.
type estimate struct {
	index  int
	c      *compiled
	h      uint64
	cost   int64
	at     int64
	expire int64
}

// pendingShards is the number of shards of Store.pending.
const pendingShards = 16

// pendingShard holds the estimates of some leases, by lease identifier;
// the one Release or sweep that takes a lease's out ends it.
type pendingShard struct {
	mu sync.Mutex
	m  map[[16]byte][]estimate
}

func (s *Store) pendingOf(id [16]byte) *pendingShard { return &s.pending[id[0]%pendingShards] }

// keep keeps the estimates of lt's lease until it is settled; they are
// the store's from then on.
func (s *Store) keep(lt *leaseTaker) {
	ps := s.pendingOf(lt.id)
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = make(map[[16]byte][]estimate)
	}
	ps.m[lt.id] = lt.settle
	ps.mu.Unlock()
}

// take takes the estimates of the lease id out of the store.
func (s *Store) take(id [16]byte) ([]estimate, bool) {
	ps := s.pendingOf(id)
	ps.mu.Lock()
	es, ok := ps.m[id]
	delete(ps.m, id)
	ps.mu.Unlock()
	return es, ok
}

// estimate records, for lt's lease, the charge of request i (req, whose
// policy is c and key hash h) admitted at t, if it is to be settled.
func (lt *leaseTaker) estimate(i int, c *compiled, req *sluice.Request, h uint64, t int64) {
	if req.SettleWithin <= 0 || req.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
		return
	}
	within := int64(req.SettleWithin / time.Microsecond)
	lt.settle = append(lt.settle, estimate{index: i, c: c, h: h, cost: req.Cost, at: t, expire: t + max(within, 1)})
}

// settle settles the estimates kept under the lease id with usage at t,
// once: it reports whether there were any still to settle.
func (s *Store) settle(id [16]byte, t int64, usage []int64) bool {
	es, ok := s.take(id)
	if !ok {
		return false
	}
	settled := false
	var v algo.Verdict // what a settlement decided, which Release does not report
	for _, e := range es {
		sh := &s.shards[e.h&s.mask]
		sh.mu.Lock()
		tt := sh.advance(t)
		if tt >= e.expire {
			sh.mu.Unlock()
			s.countUnsettled(e.c.fp, 1)
			continue
		}
		settled = true
		if e.index < len(usage) && usage[e.index] >= 0 {
			switch actual := usage[e.index]; {
			case actual > e.cost:
				sh.debt(&v, s, e.c, e.h, tt, actual-e.cost, tt, false)
				s.countUsage(e.c.fp, actual-e.cost, 0)
			case actual < e.cost:
				sh.debt(&v, s, e.c, e.h, tt, e.cost-actual, e.at, true)
				s.countUsage(e.c.fp, 0, e.cost-actual)
			}
		}
		sh.mu.Unlock()
	}
	return settled
}

// sweepSettlements drops the settlements whose every estimate's time has
// passed at t, counting them as unsettled.
func (s *Store) sweepSettlements(t int64) int {
	dropped := 0
	for i := range s.pending {
		ps := &s.pending[i]
		ps.mu.Lock()
		for id, es := range ps.m {
			if slices.ContainsFunc(es, func(e estimate) bool { return e.expire > t }) {
				continue
			}
			delete(ps.m, id)
			for _, e := range es {
				s.countUnsettled(e.c.fp, 1)
			}
			dropped++
		}
		ps.mu.Unlock()
	}
	return dropped
}

// usageCounts are the counters of one policy's costs known afterwards.
type usageCounts struct {
	debited, refunded, unsettled atomic.Int64
}

func (s *Store) usageOf(fp uint64) *usageCounts {
	v, ok := s.usage.Load(fp)
	if !ok {
		v, _ = s.usage.LoadOrStore(fp, new(usageCounts))
	}
	return v.(*usageCounts)
}

func (s *Store) countUsage(fp uint64, debited, refunded int64) {
	u := s.usageOf(fp)
	u.debited.Add(debited)
	u.refunded.Add(refunded)
}

func (s *Store) countUnsettled(fp uint64, n int64) { s.usageOf(fp).unsettled.Add(n) }

// Usage returns, for the rate policy p, the units debited (by Debit and by
// settlements above their estimate) and refunded (by Refund and by
// settlements below it) since the store was made, and the estimates whose
// settlement time passed before a Release settled them.
func (s *Store) Usage(p *sluice.Policy) (debited, refunded, unsettled int64, err error) {
	c := s.compile(p)
	if c.err != nil {
		return 0, 0, 0, c.err
	}
	u := s.usageOf(c.fp)
	return u.debited.Load(), u.refunded.Load(), u.unsettled.Load(), nil
}

// usageRequest validates a Debit or Refund request and returns its
// compiled policy.
func (s *Store) usageRequest(op string, req *sluice.Request) (*compiled, error) {
	if req.Cost < 1 {
		return nil, fmt.Errorf("memstore: %s: %w: %d units, want at least 1", op, sluice.ErrInvalidCost, req.Cost)
	}
	c := s.compile(req.Policy)
	if c.err != nil {
		return nil, c.err
	}
	if req.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
		return nil, fmt.Errorf("memstore: %s: %w: a concurrency policy holds units, it is not charged", op, sluice.ErrNotSupported)
	}
	return c, nil
}

// Debit charges req.Cost units to req.Key whether or not they fit; see the
// sluice.Store contract.
func (s *Store) Debit(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.debitOrRefund(now, &req, false)
}

// Refund gives req.Cost units back to req.Key; see the sluice.Store
// contract.
func (s *Store) Refund(_ context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.debitOrRefund(now, &req, true)
}

func (s *Store) debitOrRefund(now time.Time, req *sluice.Request, refund bool) (d sluice.Decision, err error) {
	op := "debit"
	if refund {
		op = "refund"
	}
	c, err := s.usageRequest(op, req)
	if err != nil {
		return sluice.Decision{}, err
	}
	sh, h, t := s.lockKey(c, req.Key, now)
	var r algo.Verdict
	sh.debt(&r, s, c, h, t, req.Cost, t, refund)
	sh.mu.Unlock()
	if refund {
		s.countUsage(c.fp, 0, req.Cost)
	} else {
		s.countUsage(c.fp, req.Cost, 0)
	}
	put(&d, &r, req.Policy.Limit)
	return d, nil
}

// debt debits cost units to the key of hash h under the rate policy c at
// t, or refunds them to its charge made at the instant at, stores the new
// state and writes the verdict to *r. sh.mu must be held.
func (sh *shard) debt(r *algo.Verdict, s *Store, c *compiled, h uint64, t, cost, at int64, refund bool) {
	p := c.pp.Params
	switch c.policy.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		i, st, found := sh.win.lookup(h)
		var ns algo.Window
		switch {
		case c.policy.Algorithm == sluice.FixedWindowAlgorithm && refund:
			ns, *r = algo.FixedWindowRefund(p, st, t, at, cost)
		case c.policy.Algorithm == sluice.FixedWindowAlgorithm:
			ns, *r = algo.FixedWindowDebit(p, st, t, cost)
		case refund:
			ns, *r = algo.SlidingWindowRefund(p, st, t, at, cost)
		default:
			ns, *r = algo.SlidingWindowDebit(p, st, t, cost)
		}
		sh.storeWin(s, i, found, h, t, ns)
	case sluice.SlidingLogAlgorithm:
		i, found := sh.logs.find(h)
		if !found {
			if refund {
				*r = algo.SlidingLogRefund(p, &algo.Log{}, t, at, cost)
				return
			}
			ls := &logState{}
			*r = algo.SlidingLogDebit(p, &ls.log, t, cost)
			sh.addLog(s, h, t, p.Period, ls)
			return
		}
		ls := sh.logs.slots[i].v
		if refund {
			*r = algo.SlidingLogRefund(p, &ls.log, t, at, cost)
		} else {
			*r = algo.SlidingLogDebit(p, &ls.log, t, cost)
		}
		ls.expire = ls.log.Expiry(p.Period)
		if ls.log.Len() == 0 {
			sh.logs.remove(i)
		}
	default:
		i, st, found := sh.tat.lookup(h)
		var ns algo.TAT
		if refund {
			ns, *r = c.pp.Refund(st, t, cost)
		} else {
			ns, *r = c.pp.Debit(st, t, cost)
		}
		sh.storeTAT(s, i, found, h, t, ns)
	}
}

// Reset puts req.Key back to its initial state under req.Policy: every
// charge and debt forgotten, or, under a concurrency policy, every hold
// freed.
func (s *Store) Reset(_ context.Context, req sluice.Request) error {
	c := s.compile(req.Policy)
	if c.err != nil {
		return c.err
	}
	h := s.hash(c, req.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch req.Policy.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		if i, found := sh.win.find(h); found {
			sh.win.remove(i)
		}
	case sluice.SlidingLogAlgorithm:
		if i, found := sh.logs.find(h); found {
			sh.logs.remove(i)
		}
	case sluice.ConcurrencyAlgorithm:
		if i, found := sh.conc.find(h); found {
			sh.conc.remove(i)
		}
	default:
		if i, found := sh.tat.find(h); found {
			sh.tat.remove(i)
		}
	}
	if i, found := sh.pen.find(h); found {
		sh.pen.remove(i)
	}
	return nil
}

// Unblock lifts req.Key's block under req.Policy and forgets its
// offences; see the sluice.Store contract.
func (s *Store) Unblock(_ context.Context, now time.Time, req sluice.Request) (bool, error) {
	c := s.compile(req.Policy)
	if c.err != nil {
		return false, c.err
	}
	sh, h, t := s.lockKey(c, req.Key, now)
	defer sh.mu.Unlock()
	i, found := sh.pen.find(h)
	if !found {
		return false, nil
	}
	lifted := sh.pen.slots[i].v.Blocks(t)
	sh.pen.remove(i)
	return lifted, nil
}
