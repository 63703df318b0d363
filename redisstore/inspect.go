package redisstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/engine"
)

var _ sluice.Inspector = (*Store)(nil)

// inspectScripts are the scripts of Inspect, one per algorithm: the files
// that define its functions (as for single.lua; see algorithmFiles) and
// lua/inspect.lua. They are built once; a rueidis.Lua holds only the script's
// text and hash, so the stores share them.
var inspectScripts = sync.OnceValues(func() ([len(algorithmFiles)]*rueidis.Lua, error) {
	var out [len(algorithmFiles)]*rueidis.Lua
	for a, f := range algorithmFiles {
		decide := fmt.Sprintf("local decide, algorithm = %s, %s", f.decide, f.algorithm)
		src, err := scriptSource(false, nil, slices.Concat([]string{textNow, "muldivmod.lua", "lib.lua"}, f.files, []string{decide, "inspect.lua"})...)
		if err != nil {
			return out, err
		}
		out[a] = named(rueidis.NewLuaScript(src), "inspect")
	}
	return out, nil
})

// inspectWidths is the length of Inspect's reply for each family: now,
// the decision, then the state.
const (
	inspectTAT    = 1 + replyWidth + 3
	inspectWindow = 1 + replyWidth + 3
	inspectLog    = 1 + replyWidth + 4
	inspectHolds  = 1 + replyWidth + 3
)

// Inspect returns the state the store keeps in Redis for req's key under
// its policy, and the decision Peek would make for req, read in one script
// call on Redis's clock (or at now, under Options.CallerTime). For a
// concurrency policy the state is the units held, by how many leases, and
// when the last of them expires; expired holds count for nothing. It
// charges nothing, and with Redis's clock writes nothing, not even the
// drop of expired holds. The failure policy does not apply: when Redis
// cannot answer, Inspect returns the error.
func (s *Store) Inspect(ctx context.Context, now time.Time, req sluice.Request) (sluice.State, error) {
	c, err := s.check(&req)
	if err != nil {
		return sluice.State{}, err
	}
	scripts, err := inspectScripts()
	if err != nil {
		return sluice.State{}, err
	}
	nowArg, err := s.timeArg(now)
	if err != nil {
		return sluice.State{}, err
	}
	p, err := c.periodArg(now)
	if err != nil {
		return sluice.State{}, err
	}
	keys := []string{c.key(s.prefix, req.Key)}
	args := []string{nowArg, opPeek, c.code, c.l, p, c.b, strconv.FormatInt(req.Cost, 10), maxDelayArg(req.MaxDelay)}
	vals, err := s.eval(ctx, scripts[req.Policy.Algorithm], keys, args, nil)
	if err != nil {
		return sluice.State{}, fmt.Errorf("redisstore: inspect: %w", err)
	}
	if len(vals) > replyWidth {
		s.concDropped(c, vals[1:1+replyWidth])
	}
	st, err := inspectState(req.Policy, vals)
	if err != nil {
		s.report(err)
		return sluice.State{}, err
	}
	if st.Decision.RetryAfter == sluice.Never {
		return sluice.State{}, capacityError(&req)
	}
	if c.penalized {
		if err := s.inspectBlock(ctx, now, c, &req, &st); err != nil {
			return sluice.State{}, err
		}
	}
	return st, nil
}

// inspectState turns Inspect's reply into a State, checking every field.
func inspectState(p *sluice.Policy, vals []int64) (sluice.State, error) {
	malformed := fmt.Errorf("redisstore: malformed inspect reply %v from the script", vals)
	want := inspectTAT
	switch p.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		want = inspectWindow
	case sluice.SlidingLogAlgorithm:
		want = inspectLog
	case sluice.ConcurrencyAlgorithm:
		want = inspectHolds
	}
	if len(vals) != want || vals[0] < 0 || vals[0] >= maxTime {
		return sluice.State{}, malformed
	}
	for _, v := range vals[1+replyWidth:] {
		if v < 0 || v >= maxTime {
			return sluice.State{}, malformed
		}
	}
	d, err := parseDecision(p, vals[1:1+replyWidth])
	if err != nil {
		return sluice.State{}, err
	}
	t, state := vals[0], vals[1+replyWidth:]
	period := int64(p.Period / time.Microsecond)
	params := engine.Params(p)
	var v algo.View
	var tracked bool
	switch p.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		w := algo.Window{Start: state[0]}
		if state[1] > math.MaxUint32 || state[2] > math.MaxUint32 {
			return sluice.State{}, malformed
		}
		w.Prev, w.Curr = uint32(state[1]), uint32(state[2])
		c := compile(*p)
		w.Expire = c.windowExpire(w.Start, int64(w.Prev), int64(w.Curr))
		tracked = w.Expire > t
		if p.Algorithm == sluice.FixedWindowAlgorithm {
			v = algo.ViewFixedWindow(params, w, t)
		} else {
			v = algo.ViewSlidingWindow(params, w, t)
		}
	case sluice.SlidingLogAlgorithm:
		entries, counted, oldest, newest := state[0], state[1], state[2], state[3]
		// A debit may count past the limit, up to 2^32−1.
		if counted > math.MaxUint32 || (entries == 0) != (counted == 0) || oldest > newest || newest > t {
			return sluice.State{}, malformed
		}
		v = algo.View{Now: t, Entries: int(entries), Counted: counted, Oldest: oldest, Newest: newest}
		tracked = entries > 0
	case sluice.ConcurrencyAlgorithm:
		// Every hold holds at least one unit and counts until its expiry,
		// after t.
		held, leases, expires := state[0], state[1], state[2]
		if held > p.Limit || leases > held || (leases == 0) != (held == 0) || (leases == 0) != (expires == 0) || (leases > 0 && expires <= t) {
			return sluice.State{}, malformed
		}
		v = algo.View{Now: t, Held: held, Leases: leases, Expires: expires}
		tracked = leases > 0
	default:
		// The script's L is divided by gcd(L, P): its frac counts 1/(L/g)
		// µs, g/L µs each.
		g := gcd(p.Limit, period)
		if state[1] >= 1e8 || state[0] >= 1<<40 || state[2] >= p.Limit/g {
			return sluice.State{}, malformed
		}
		tat := algo.TAT{At: state[0]*1e8 + state[1], Frac: state[2] * g}
		tracked = tat.Expiry() > t
		pp := algo.Prepare(params)
		v = pp.ViewTAT(tat, t)
	}
	return engine.ViewState(p, v, tracked, d), nil
}
