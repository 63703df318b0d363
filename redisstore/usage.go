package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Costs known afterwards (docs/redis.md, "Debits, refunds and
// settlements"): Debit and Refund run usage.lua, an estimate is kept by
// AllowAll's script (allow_settle.lua) under its lease's settlement key,
// and Release settles it (settle.lua), each atomically on Redis's clock.

// rateFiles are the Lua files of every rate algorithm, in order, after
// muldivmod.lua and lib.lua.
var rateFiles = []string{
	"big.lua", "tat.lua", "token_bucket.lua", "gcra.lua", "leaky_bucket.lua", "window.lua", "fixed_window.lua", "sliding_window.lua", "sliding_log.lua",
}

// usageScript is the script of Debit, Refund and Reset (lua/usage.lua),
// and settleScript Release's for a lease with estimates (lua/settle.lua);
// built once.
var (
	usageScript = sync.OnceValues(func() (*rueidis.Lua, error) {
		return luaScript(slices.Concat([]string{textNow, "muldivmod.lua", "lib.lua"}, rateFiles, []string{"debit.lua", "usage.lua"}))
	})
	settleScript = sync.OnceValues(func() (*rueidis.Lua, error) {
		return luaScript(slices.Concat([]string{textNow, "muldivmod.lua", "lib.lua"}, rateFiles, []string{"concurrency.lua", "debit.lua", "settle.lua"}))
	})
)

func luaScript(parts []string) (*rueidis.Lua, error) {
	src, err := scriptSource(false, nil, parts...)
	if err != nil {
		return nil, err
	}
	return named(rueidis.NewLuaScript(src), strings.TrimSuffix(parts[len(parts)-1], ".lua")), nil
}

// Operations of usage.lua.
const (
	opDebit  = "d"
	opRefund = "r"
	opReset  = "x"
)

// maxUsageCost bounds the costs sent to the scripts (2^52, exact in Lua):
// a larger debit, refund or actual cost decides as 2^52 does, since every
// bound it meets (the 2^32−1 units a window counts, the capacities) is far
// below.
const maxUsageCost = 1 << 52

// usageCounts are a policy's counts of costs known afterwards.
type usageCounts struct {
	debited, refunded, unsettled atomic.Int64
}

func (s *Store) usageOf(fp string) *usageCounts {
	v, ok := s.usage.Load(fp)
	if !ok {
		v, _ = s.usage.LoadOrStore(fp, new(usageCounts))
	}
	return v.(*usageCounts)
}

// Usage returns, for the rate policy p, the units this store debited (by
// Debit and by settlements above their estimate) and refunded (by Refund
// and by settlements below it) since it was made, and the estimates it
// found unsettled when their time had passed (a Release that came too
// late; an estimate whose lease is never released is not counted: its
// settlement leaves Redis unread). The counts of all the stores on one
// Redis add up to the units each kind of call charged and gave back.
func (s *Store) Usage(p *sluice.Policy) (debited, refunded, unsettled int64, err error) {
	c := s.policies.get(p)
	if c.err != nil {
		return 0, 0, 0, c.err
	}
	u := s.usageOf(c.fp)
	return u.debited.Load(), u.refunded.Load(), u.unsettled.Load(), nil
}

// usageRequest checks a Debit or Refund request and returns its compiled
// policy.
func (s *Store) usageRequest(op string, req *sluice.Request) (*compiled, error) {
	if req.Policy == nil {
		return nil, fmt.Errorf("redisstore: %s: no policy", op)
	}
	if req.Cost < 1 {
		return nil, fmt.Errorf("redisstore: %s: %w: %d units, want at least 1", op, sluice.ErrInvalidCost, req.Cost)
	}
	c := s.policies.get(req.Policy)
	if c.err != nil {
		return nil, c.err
	}
	if c.conc() {
		return nil, fmt.Errorf("redisstore: %s: %w: a concurrency policy holds units, it is not charged", op, sluice.ErrNotSupported)
	}
	return c, nil
}

// Debit charges req.Cost units to req.Key whether or not they fit, at
// Redis's TIME (at now, under Options.CallerTime); see the sluice.Store
// contract. When Redis cannot answer, the failure policy decides as for
// Allow: FailLocal debits Options.Local, FailAllow reports the units as
// fitted and FailDeny as not (nothing is charged), FailError returns the
// error.
func (s *Store) Debit(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.debt(ctx, now, &req, opDebit)
}

// Refund gives req.Cost units back to req.Key, at Redis's TIME (at now,
// under Options.CallerTime); see the sluice.Store contract. The store's
// local refusals of the key are dropped (after a Debit too), and none
// learnt from a call sent before the refund is kept. When Redis cannot answer, the failure policy
// decides: FailLocal refunds Options.Local, FailAllow and FailDeny report
// the refund (Allowed, Degraded) though nothing was given back, FailError
// returns the error.
func (s *Store) Refund(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.debt(ctx, now, &req, opRefund)
}

func (s *Store) debt(ctx context.Context, now time.Time, req *sluice.Request, op string) (sluice.Decision, error) {
	name := map[string]string{opDebit: "debit", opRefund: "refund"}[op]
	c, err := s.usageRequest(name, req)
	if err != nil {
		return sluice.Decision{}, err
	}
	nowArg, err := s.timeArg(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	p, err := c.periodArg(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	script, err := usageScript()
	if err != nil {
		return sluice.Decision{}, err
	}
	key := c.key(s.prefix, req.Key)
	cost := min(req.Cost, maxUsageCost)
	vals, err := s.eval(ctx, script, []string{key}, []string{nowArg, op, c.code, c.l, p, c.b, strconv.FormatInt(cost, 10), "", refundChannel(s.prefix)}, nil)
	if err == nil {
		var d sluice.Decision
		if len(vals) != replyWidth || vals[4] != 0 {
			err = s.malformed(vals)
		} else {
			d, err = parseDecision(req.Policy, vals)
		}
		if err == nil && op == opRefund && !d.Allowed {
			err = s.malformed(vals)
		}
		if err == nil {
			// The key's state changed without a decision: a refund makes
			// it more lenient, and a debit leaves a cached refusal refusing
			// with the old state's numbers.
			s.forget(key)
			u := s.usageOf(c.fp)
			if op == opRefund {
				u.refunded.Add(req.Cost)
			} else {
				u.debited.Add(req.Cost)
			}
			return d, nil
		}
		s.report(err)
	}
	if ctx.Err() != nil || s.failure == FailError {
		return sluice.Decision{}, fmt.Errorf("redisstore: %s: %w", name, err)
	}
	return s.degradeUsage(ctx, now, req, op, err)
}

// degradeUsage is degrade for a Debit or Refund that Redis could not
// decide.
func (s *Store) degradeUsage(ctx context.Context, now time.Time, req *sluice.Request, op string, cause error) (sluice.Decision, error) {
	var d sluice.Decision
	var err error
	switch {
	case s.failure == FailLocal && op == opDebit:
		d, err = s.local.Debit(ctx, now, *req)
	case s.failure == FailLocal:
		d, err = s.local.Refund(ctx, now, *req)
	case op == opRefund || s.failure == FailAllow:
		d = sluice.Decision{Allowed: true, Limit: req.Policy.Limit}
	default:
		br := s.breakers.forKey(s.policies.get(req.Policy).key(s.prefix, req.Key))
		d = sluice.Decision{Limit: req.Policy.Limit, RetryAfter: max(time.Millisecond, br.retryAfter().Round(time.Millisecond))}
	}
	_ = cause
	d.Degraded = true
	return d, err
}

// Reset puts req.Key back to its initial state under req.Policy (its key
// deleted), every charge and debt forgotten; under a concurrency policy
// every hold is freed, and their leases then release nothing. The store's
// local refusals of the key are dropped. When Redis cannot answer, Reset
// returns the error (under FailLocal after resetting Options.Local too).
func (s *Store) Reset(ctx context.Context, req sluice.Request) error {
	if req.Policy == nil {
		return fmt.Errorf("redisstore: reset: no policy")
	}
	c := s.policies.get(req.Policy)
	if c.err != nil {
		return c.err
	}
	script, err := usageScript()
	if err != nil {
		return err
	}
	key := c.key(s.prefix, req.Key)
	vals, err := s.eval(ctx, script, []string{key, blockKey(key)}, []string{"", opReset, c.code, refundChannel(s.prefix)}, nil)
	if err == nil && (len(vals) != 1 || vals[0] != 1) {
		err = s.malformed(vals)
		s.report(err)
	}
	if err == nil {
		s.forget(key)
		return nil
	}
	if s.failure == FailLocal && ctx.Err() == nil {
		if lerr := s.local.Reset(ctx, req); lerr != nil {
			return fmt.Errorf("redisstore: reset: %w (and of Options.Local: %v)", err, lerr)
		}
	}
	return fmt.Errorf("redisstore: reset: %w", err)
}

// forget drops the local refusals of keys, whose state a refund, a reset
// or a debit has just changed without a decision, and keeps every state
// learnt from a call sent before now out of the cache: such a state may
// predate the change (after a refund, more lenient than Redis's, which a
// refusal must never be).
func (s *Store) forget(keys ...string) {
	rf := s.refusals
	if rf == nil {
		return
	}
	rf.refunded.Store(rf.mono())
	for _, k := range keys {
		rf.drop(k)
	}
}

// settlement is what Release sends to settle.lua: the lease's concurrency
// keys in the slot of its estimates, the estimates' keys and their
// policies' arguments, and the actual costs.
type settlement struct {
	conc, rate []string
	cs         []*compiled
	args       []string // per rate key: code, L, P, B
	usage      []string
}

// settlementOf returns the settlement of the lease id whose estimates lie
// on rate (the lease's rate keys, in its order) at now, with the actual
// costs usage. Only the keys in the slot of the first take part: the
// settlement is kept in that slot (allow_settle.lua).
func (s *Store) settlementOf(now time.Time, id leaseID, rate []string, usage []int64) (*settlement, error) {
	st := &settlement{}
	for _, k := range rate {
		if s.cluster() && slot(k) != slot(rate[0]) {
			continue // not a key of one decision: nothing kept there
		}
		c, err := s.keyPolicy(k)
		if err != nil {
			return nil, err
		}
		p, err := c.periodArg(now)
		if err != nil {
			return nil, err
		}
		st.rate, st.cs = append(st.rate, k), append(st.cs, c)
		st.args = append(st.args, c.code, c.l, p, c.b)
	}
	st.usage = make([]string, 0, 1+len(usage))
	st.usage = append(st.usage, strconv.Itoa(len(usage)))
	for _, u := range usage {
		st.usage = append(st.usage, strconv.FormatInt(max(min(u, maxUsageCost), -1), 10))
	}
	return st, nil
}

// settleLease runs settle.lua for the lease id and returns the units it
// freed and whether it found estimates to settle.
func (s *Store) settleLease(ctx context.Context, now time.Time, id leaseID, st *settlement) (freed int64, found bool, err error) {
	script, err := settleScript()
	if err != nil {
		return 0, false, err
	}
	nowArg, err := s.timeArg(now)
	if err != nil {
		return 0, false, err
	}
	keys := slices.Concat(st.conc, st.rate, []string{settleKey(s.prefix, st.rate[0], id.text())})
	args := slices.Concat([]string{nowArg, opRelease, id.text(), strconv.Itoa(len(st.conc)), strconv.Itoa(len(st.rate))}, st.args, st.usage, []string{refundChannel(s.prefix)})
	v, err := s.eval(ctx, script, keys, args, nil)
	if err != nil {
		return 0, false, err
	}
	nc, ne := len(st.conc), len(st.rate)
	if len(v) != 2+nc+3*ne || v[0] < 0 || v[1+nc] < 0 || v[1+nc] > 1 || slices.ContainsFunc(v, func(x int64) bool { return x < 0 }) {
		err := s.malformed(v)
		s.report(err)
		return 0, false, err
	}
	s.countDropped(st.conc, v[1:1+nc])
	changed := false
	for j := range st.cs {
		r := v[2+nc+3*j:]
		u := s.usageOf(keyFingerprint(st.rate[j])) // the policy's fingerprint, name and all
		u.debited.Add(r[0])
		u.refunded.Add(r[1])
		u.unsettled.Add(r[2])
		changed = changed || r[0] > 0 || r[1] > 0
	}
	if changed {
		s.forget(st.rate...)
	}
	return v[0], v[1+nc] == 1, nil
}

// keyPolicy returns the compiled policy of a rate key of this store, from
// its fingerprint (see fingerprint): the algorithm, limit, period (or
// calendar) and burst, which decide; the policy's name, which does not,
// is left out.
func (s *Store) keyPolicy(key string) (*compiled, error) {
	bad := fmt.Errorf("redisstore: %w: the key %q of its estimates names no policy", sluice.ErrInvalidLease, key)
	parts := strings.SplitN(keyFingerprint(key), ":", 6)
	if len(parts) < 5 || parts[0] != "" {
		return nil, bad
	}
	a := slices.Index(algoCodes[:], parts[1])
	limit, err1 := strconv.ParseInt(parts[2], 10, 64)
	burst, err2 := strconv.ParseInt(parts[4], 10, 64)
	if a < 0 || sluice.Algorithm(a) == sluice.ConcurrencyAlgorithm || err1 != nil || err2 != nil {
		return nil, bad
	}
	p := sluice.Policy{Algorithm: sluice.Algorithm(a), Limit: limit, Burst: burst}
	if cal, ok := strings.CutPrefix(parts[3], "calendar_"); ok {
		unitText, zoneText, ok := strings.Cut("calendar_"+cal, "@")
		zone, okz := unescapeText(zoneText)
		if !ok || !okz {
			return nil, bad
		}
		if p.Calendar.WeekStartsSunday = strings.HasSuffix(unitText, "-sunday"); p.Calendar.WeekStartsSunday {
			unitText = strings.TrimSuffix(unitText, "-sunday")
		}
		if p.Calendar.Unit, ok = sluice.ParseCalendarUnit(unitText); !ok {
			return nil, bad
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, bad
		}
		p.Calendar.Zone = loc
	} else if p.Period, err1 = time.ParseDuration(parts[3]); err1 != nil {
		return nil, bad
	}
	c := s.policies.get(&p)
	if c.err != nil {
		return nil, bad
	}
	return c, nil
}

// unescapeText undoes appendText's escaping (not its hashing).
func unescapeText(s string) (string, bool) {
	if strings.HasPrefix(s, "#") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}
