package memstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/engine"
)

var _ sluice.Inspector = (*Store)(nil)

// Inspect returns the state the store keeps for req's key under its policy
// at now (zero means the store's clock) and the decision Peek would make
// for req at that instant, read together under the key's shard lock. It
// charges nothing and tracks no new key.
func (s *Store) Inspect(_ context.Context, now time.Time, req sluice.Request) (sluice.State, error) {
	c, err := s.check(&req)
	if err != nil {
		return sluice.State{}, err
	}
	sh, h, t, d := s.lockPeek(c, &req, now)
	var v algo.View
	var tracked bool
	switch req.Policy.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		_, st, found := sh.win.lookup(h)
		tracked = found && st.Expire > t
		if req.Policy.Algorithm == sluice.FixedWindowAlgorithm {
			v = algo.ViewFixedWindow(c.pp.Params, st, t)
		} else {
			v = algo.ViewSlidingWindow(c.pp.Params, st, t)
		}
	case sluice.ConcurrencyAlgorithm:
		i, found := sh.conc.find(h)
		if found {
			v = algo.ViewHolds(&sh.conc.slots[i].v.holds, t)
		} else {
			v = algo.ViewHolds(&algo.Holds{}, t)
		}
		tracked = v.Leases > 0
	case sluice.SlidingLogAlgorithm:
		i, found := sh.logs.find(h)
		if found {
			v = algo.ViewLog(c.pp.Params, &sh.logs.slots[i].v.log, t)
		} else {
			v = algo.ViewLog(c.pp.Params, &algo.Log{}, t)
		}
		tracked = v.Entries > 0
	default:
		_, st, found := sh.tat.lookup(h)
		tracked = found && st.Expiry() > t
		v = c.pp.ViewTAT(st, t)
	}
	var b algo.Block
	if i, found := sh.pen.find(h); found && c.penalized {
		b = sh.pen.slots[i].v
	}
	sh.mu.Unlock()
	if d.RetryAfter == sluice.Never {
		return sluice.State{}, capacityError(&req)
	}
	st := engine.ViewState(req.Policy, v, tracked, d)
	engine.ViewBlock(&st, b, t)
	return st, nil
}
