package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/engine"
)

// Penalties (sluice.Penalty) are decided by penalty.lua, AllowAll's
// script with the blocks: a key's block lives beside its state, under the
// state key's name with "#b" appended (block.lua), so that one script
// reads and writes both atomically, on Redis's clock, in one hash slot;
// every store on one Redis sees the same block. A fingerprint never holds
// "#b" (a hashed name is '#' and 32 hex digits), so no state key can be
// mistaken for a block key. Such requests never take the single-request
// scripts, the batches or the local refusals (which know nothing of
// blocks): each is one call of penalty.lua.

// penaltyScript is penalty.lua's script and unblockScript unblock.lua's,
// built once.
var (
	penaltyScript = sync.OnceValues(func() (*rueidis.Lua, error) {
		return luaScript(append([]string{textNow, "muldivmod.lua", "lib.lua"}, append(manyFiles[:len(manyFiles):len(manyFiles)], "block.lua", "penalty.lua")...))
	})
	unblockScript = sync.OnceValues(func() (*rueidis.Lua, error) {
		return luaScript([]string{textNow, "muldivmod.lua", "lib.lua", "block.lua", "unblock.lua"})
	})
	blockViewScript = sync.OnceValues(func() (*rueidis.Lua, error) {
		return luaScript([]string{textNow, "muldivmod.lua", "lib.lua", "block.lua", "block_view.lua"})
	})
)

// inspectBlock adds to st the block of req's key under its penalized
// policy c, and the decision a Peek gives at now: both read after the
// state, in calls of their own.
func (s *Store) inspectBlock(ctx context.Context, now time.Time, c *compiled, req *sluice.Request, st *sluice.State) error {
	nowArg, err := s.timeArg(now)
	if err != nil {
		return err
	}
	script, err := blockViewScript()
	if err != nil {
		return err
	}
	vals, err := s.eval(ctx, script, []string{blockKey(c.key(s.prefix, req.Key))}, []string{nowArg}, nil)
	if err != nil {
		return fmt.Errorf("redisstore: inspect: %w", err)
	}
	if len(vals) != 4 || vals[0] < 0 || vals[1] < 0 || vals[2] < vals[1] || vals[3] < 0 {
		err := s.malformed(vals)
		s.report(err)
		return err
	}
	engine.ViewBlock(st, algo.Block{Until: vals[1], Forget: vals[2], Offences: vals[3]}, vals[0])
	d, err := s.peekPenalized(ctx, now, *req)
	if err != nil {
		return err
	}
	st.Decision = d
	return nil
}

// blockKey returns the key of the block of the state key key.
func blockKey(key string) string { return key + "#b" }

// peekPenalized is Peek for a request under a policy with a penalty.
func (s *Store) peekPenalized(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	c, err := s.check(&req)
	if err != nil {
		return sluice.Decision{}, err
	}
	us, err := s.micros(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	req.SettleWithin = 0
	reqs := [1]sluice.Request{req}
	cs := [1]*compiled{c}
	return s.allowPenalized(ctx, now, us, cs[:], reqs[:], nil, opPeek)
}

// allowPenalized decides reqs, whose compiled policies are cs and of
// which some have a penalty, in one call of penalty.lua at us (the
// caller's time in µs, or -1 for Redis's clock): op is opAllow for Allow
// and AllowAll, opPeek for a Peek.
func (s *Store) allowPenalized(ctx context.Context, now time.Time, us int64, cs []*compiled, reqs []sluice.Request, out []sluice.Decision, op string) (sluice.Decision, error) {
	keys := s.keysOf(cs, reqs)
	for i := range reqs {
		keys = append(keys, blockKey(keys[i]))
	}
	if len(reqs) > 1 && !oneKey(reqs) && s.cluster() {
		if err := checkSlots(keys); err != nil {
			return sluice.Decision{}, err
		}
	}
	var nowArg string
	if us >= 0 {
		nowArg = strconv.FormatInt(us, 10)
	}
	var id, lease string
	conc := false
	for _, c := range cs {
		conc = conc || c.conc()
	}
	if conc && op == opAllow {
		lid := newLeaseID()
		id = lid.text()
		var err error
		if lease, err = leaseOf(lid, cs, keys[:len(reqs)], reqs); err != nil {
			return sluice.Decision{}, err
		}
	}
	args, err := s.manyArgs(cs, reqs, nowArg, now, id)
	if err != nil {
		return sluice.Decision{}, err
	}
	args = append(args, op)
	for _, c := range cs {
		if c.penalized {
			args = append(args, c.pen[:]...)
		} else {
			args = append(args, "0", "0", "0", "0")
		}
	}
	script, err := penaltyScript()
	if err != nil {
		return sluice.Decision{}, err
	}
	rf := s.refusals
	local := rf != nil && us < 0 && len(reqs) == 1
	var sent int64
	if local {
		if d, at, ok := s.refuseBlocked(cs[0], &reqs[0]); ok {
			if s.onDecided != nil {
				s.decided(ctx, reqs, at, localOrder)
			}
			return d, nil
		}
		rf.remote.add()
		sent = rf.mono()
	}
	vals, order, err := s.evalOrder(ctx, script, keys, args, nil)
	if err == nil && len(vals) < 1+2*len(reqs) {
		err = s.malformed(vals)
	}
	if err == nil {
		redisNow := vals[0]
		flags := vals[1 : 1+2*len(reqs)]
		var d sluice.Decision
		var done bool
		if out == nil && len(reqs) <= 8 {
			var buf [8]sluice.Decision
			out = buf[:len(reqs)]
		} else if out == nil {
			out = make([]sluice.Decision, len(reqs))
		}
		d, done, err = s.parseMany(vals[1+2*len(reqs):], cs, reqs, out)
		if done && us < 0 {
			s.sawMany(ctx, reqs, vals[1+2*len(reqs):], order)
		}
		if done && err == nil {
			for i := range reqs {
				switch flags[2*i] {
				case 0:
				case 1, 2:
					out[i].Blocked, out[i].Offence = true, flags[2*i] == 2
					d.Blocked, d.Offence = true, d.Offence || out[i].Offence
				default:
					err = s.malformed(vals)
				}
			}
		}
		if done {
			if err == nil && d.Allowed {
				d.Lease = lease
			}
			if rf != nil {
				// A state the key had before its block is never kept: its
				// refusals would be no offences.
				for i := range reqs {
					rf.drop(keys[i])
				}
				if local && err == nil && d.Blocked && op == opAllow {
					// The refusal's retry and reset, in µs as the script
					// gave them (see many.lua's reply).
					v := vals[1+2*len(reqs)+replyHeader:]
					s.learnBlock(cs[0], keys[0], &reqs[0], redisNow, flags[1], v[2], v[3], sent)
				}
			}
			return d, err
		}
		s.report(err)
	}
	if ctx.Err() != nil || errors.Is(err, ErrCrossSlot) {
		return sluice.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	mode := opMany
	if op == opPeek {
		mode = opPeek
	}
	return s.degrade(ctx, now, reqs, out, mode, err)
}

// Unblock lifts req.Key's block under req.Policy and forgets its
// offences, at Redis's TIME (at now, under Options.CallerTime); see the
// sluice.Store contract. When Redis cannot answer it returns the error
// (under FailLocal after lifting the block in Options.Local too).
func (s *Store) Unblock(ctx context.Context, now time.Time, req sluice.Request) (bool, error) {
	if req.Policy == nil {
		return false, fmt.Errorf("redisstore: unblock: no policy")
	}
	c := s.policies.get(req.Policy)
	if c.err != nil {
		return false, c.err
	}
	nowArg, err := s.timeArg(now)
	if err != nil {
		return false, err
	}
	script, err := unblockScript()
	if err != nil {
		return false, err
	}
	key := c.key(s.prefix, req.Key)
	vals, err := s.eval(ctx, script, []string{blockKey(key)}, []string{nowArg, refundChannel(s.prefix), key}, nil)
	if err == nil && (len(vals) != 1 || vals[0] < 0 || vals[0] > 1) {
		err = s.malformed(vals)
		s.report(err)
	}
	if err == nil {
		if s.refusals != nil {
			s.refusals.drop(key)
		}
		return vals[0] == 1, nil
	}
	if s.failure == FailLocal && ctx.Err() == nil {
		if _, lerr := s.local.Unblock(ctx, now, req); lerr != nil {
			return false, fmt.Errorf("redisstore: unblock: %w (and of Options.Local: %v)", err, lerr)
		}
	}
	return false, fmt.Errorf("redisstore: unblock: %w", err)
}

// refuseBlocked refuses req locally when the store holds its key's block
// (learnBlock) and, on the upper bound of Redis's clock that the local
// refusals keep (entry.redisClock), the block has not ended: with the
// RetryAfter and ResetAfter that Redis's refusal gave, counted down. The
// block is dropped when another instance lifts it or resets the key (the
// refund channel), and refuses for at most LocalRefusals.MaxAge after
// Redis answered, as every local refusal. It returns the time the refusal
// is dated at (refusals.decidedAt).
func (s *Store) refuseBlocked(c *compiled, req *sluice.Request) (sluice.Decision, int64, bool) {
	rf := s.refusals
	e := rf.hotGet(c, req.Key)
	if e == nil {
		e = rf.getFor(c, s.prefix, req.Key)
	}
	if e == nil || e.blockEnd == 0 || e.cost != req.Cost {
		return sluice.Decision{}, 0, false
	}
	t, ok := e.redisClock(rf.mono(), rf.maxAge)
	if !ok || t >= e.blockEnd {
		return sluice.Decision{}, 0, false
	}
	e.count.add()
	return sluice.Decision{
		Limit:      req.Policy.Limit,
		RetryAfter: retryMillis(e.retryAt - t),
		ResetAfter: ceilMillis(max(e.resetAt-t, 0)),
		Blocked:    true,
	}, rf.decidedAt(e.redisAt, t), true
}

// learnBlock keeps the block that refused req at Redis's time redisNow,
// the block ending at until, the refusal's retry and reset in µs, sent to
// Redis at local monotonic time sent, for refuseBlocked.
func (s *Store) learnBlock(c *compiled, key string, req *sluice.Request, redisNow, until, retry, reset, sent int64) {
	if until <= redisNow || retry <= 0 || reset < 0 {
		return
	}
	e := &entry{
		policy: c.policy, c: c, pp: c.pp, redisAt: redisNow, sentAt: sent, until: sent + reset,
		blockEnd: until, retryAt: redisNow + retry, resetAt: redisNow + reset, cost: req.Cost,
	}
	s.refusals.put(key, req.Key, false, e, sent)
}
