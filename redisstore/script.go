package redisstore

import (
	"embed"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scriptNames names the scripts for Options.Observe: *rueidis.Lua -> the
// name its Call reports.
var scriptNames sync.Map

// named records l's name for Options.Observe, and returns l.
func named(l *rueidis.Lua, name string) *rueidis.Lua {
	scriptNames.Store(l, name)
	return l
}

// algorithmFiles lists, for each algorithm, the Lua files it needs after
// muldivmod.lua and lib.lua, in order, and the functions the
// single-request script calls: the family's decide, which reads and writes
// the state, and the algorithm's own. The token-bucket family's
// single-request script is tat_single.lua instead (flat: see script).
var algorithmFiles = [...]struct {
	files             []string
	decide, algorithm string
}{
	sluice.TokenBucketAlgorithm:   {[]string{"big.lua", "tat.lua", "token_bucket.lua"}, "tat_decide", "token_bucket"},
	sluice.GCRAAlgorithm:          {[]string{"big.lua", "tat.lua", "gcra.lua"}, "tat_decide", "gcra"},
	sluice.LeakyBucketAlgorithm:   {[]string{"big.lua", "tat.lua", "leaky_bucket.lua"}, "tat_decide", "leaky_bucket"},
	sluice.FixedWindowAlgorithm:   {[]string{"window.lua", "fixed_window.lua"}, "win_decide", "fixed_window"},
	sluice.SlidingLogAlgorithm:    {[]string{"sliding_log.lua"}, "sliding_log", "false"},
	sluice.SlidingWindowAlgorithm: {[]string{"window.lua", "sliding_window.lua"}, "win_decide", "sliding_window"},
	sluice.ConcurrencyAlgorithm:   {[]string{"concurrency.lua"}, "conc_decide", "false"},
}

// manyFiles are the files of the AllowAll script after muldivmod.lua and
// lib.lua, in order; the batch script adds batch.lua.
var manyFiles = []string{
	"big.lua", "tat.lua", "token_bucket.lua", "gcra.lua", "leaky_bucket.lua", "window.lua", "fixed_window.lua", "sliding_window.lua", "sliding_log.lua", "concurrency.lua", "many.lua",
}

// flat reports whether algorithm a's single-request script is
// tat_single.lua rather than single.lua over the algorithm's functions.
func flat(a sluice.Algorithm) bool {
	return a.HasBurst()
}

// Lua that declares ARG_NOW, the call's time argument for lib.lua: ARGV[1]
// in the scripts that take their arguments as text, and in single.lua the
// time unpacked, with the request's other fields, from its one packed
// argument (see packOne).
const (
	textNow   = "local ARG_NOW = ARGV[1]"
	packedNow = "local L, P, B, COST, MAXD, PEEK, ARG_NOW = cmsgpack.unpack(ARGV[1])"
)

// scriptSource joins parts into one chunk, after the declaration of STATE
// (see lib.lua) and, when maxDelay is not nil, of MAXDELAY (see
// batch_one.lua). A part named *.lua is that file of lua/; any other part
// is Lua code.
func scriptSource(state bool, maxDelay *bool, parts ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "local STATE = %t\n", state)
	if maxDelay != nil {
		fmt.Fprintf(&b, "local MAXDELAY = %t\n", *maxDelay)
	}
	for _, part := range parts {
		if strings.HasSuffix(part, ".lua") {
			src, err := luaFiles.ReadFile("lua/" + part)
			if err != nil {
				return "", fmt.Errorf("redisstore: embedded script %s: %w", part, err)
			}
			part = string(src)
		}
		b.WriteString(part)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// scripts returns the Lua scripts: for each algorithm, one that decides a
// single request and defines only what that algorithm uses (Lua creates
// every function of a script anew on each call; the token-bucket family's
// defines one function), and one that decides a batch of such requests;
// for the token-bucket family, general, single.lua over tat.lua, which
// decides the requests on keys in debt that the flat script leaves to it;
// one that decides any mix of algorithms for AllowAll, and its form that
// keeps estimates to settle (settle); and one that decides a batch of any
// calls. With state, every refusal also returns the key's state (STATE in
// lib.lua), for local refusals.
func scripts(state bool) (single, general [len(algorithmFiles)]string, many, settle, batch string, batchOne [len(algorithmFiles)]string, err error) {
	for a, f := range algorithmFiles {
		maxDelay := sluice.Algorithm(a) == sluice.LeakyBucketAlgorithm
		decide := fmt.Sprintf("local decide, algorithm = %s, %s", f.decide, f.algorithm)
		funcs := slices.Concat([]string{"muldivmod.lua", "lib.lua"}, f.files, []string{decide})
		files := slices.Concat([]string{textNow}, funcs)
		if flat(sluice.Algorithm(a)) {
			if single[a], err = scriptSource(state, &maxDelay, "muldivmod.lua", "tat_single.lua"); err != nil {
				return
			}
			general[a], err = scriptSource(state, nil, slices.Concat([]string{packedNow}, funcs, []string{"single.lua"})...)
		} else {
			single[a], err = scriptSource(state, nil, slices.Concat([]string{packedNow}, funcs, []string{"single.lua"})...)
		}
		if err != nil {
			return
		}
		// The batch script for single requests of this algorithm only.
		if batchOne[a], err = scriptSource(state, &maxDelay, slices.Concat(files, []string{"batch_one.lua"})...); err != nil {
			return
		}
	}
	files := slices.Concat([]string{textNow, "muldivmod.lua", "lib.lua"}, manyFiles)
	if many, err = scriptSource(state, nil, slices.Concat(files, []string{"return allow_all(0, 1, #KEYS)"})...); err != nil {
		return
	}
	if settle, err = scriptSource(state, nil, slices.Concat(files, []string{"allow_settle.lua"})...); err != nil {
		return
	}
	batch, err = scriptSource(state, nil, slices.Concat(files, []string{"batch.lua"})...)
	return single, general, many, settle, batch, batchOne, err
}

// packOne returns the argument of the single-request scripts for req under
// c, whose operation is op and time argument nowArg (see Store.timeArg):
// MessagePack of L, P, B, cost, maxdelay, whether it is a Peek, and now
// (nil for Redis's clock). For a concurrency policy B is id, the lease id
// (see concurrency.lua), as a string. P is the period in µs, or for a calendar policy
// (cal, the argument for the call's time) an array of the six window
// starts. Every number is an integer below 2^53, which Redis's cmsgpack
// turns into a Lua number exactly.
func packOne(c *compiled, cal *calendarArg, req *sluice.Request, op, nowArg, id string) string {
	var buf [128]byte
	b := appendPackedInt(buf[:0], c.ln)
	if cal != nil {
		b = append(b, 0x90|byte(len(cal.starts))) // fixarray
		for _, v := range cal.starts {
			b = appendPackedInt(b, v)
		}
	} else {
		b = appendPackedInt(b, c.pn)
	}
	if req.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
		b = append(b, 0xa0|byte(len(id))) // fixstr: ids are 22 bytes
		b = append(b, id...)
	} else {
		b = appendPackedInt(b, req.Policy.Capacity())
	}
	b = appendPackedInt(b, req.Cost)
	md := int64(-1)
	if req.MaxDelay > 0 {
		md = min(int64(req.MaxDelay/time.Microsecond), maxTime)
	}
	b = appendPackedInt(b, md)
	if op == opPeek {
		b = append(b, 0xc3) // true
	} else {
		b = append(b, 0xc2) // false
	}
	if nowArg == "" {
		b = append(b, 0xc0) // nil
	} else {
		b = appendPackedInt(b, callerMicros(nowArg))
	}
	return string(b)
}

// appendPackedInt appends v to b as a MessagePack integer, in its shortest
// form.
func appendPackedInt(b []byte, v int64) []byte {
	switch {
	case v >= 0 && v < 128:
		return append(b, byte(v)) // positive fixint
	case v < 0 && v >= -32:
		return append(b, byte(v)) // negative fixint
	case v < 0:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v)) // int 64
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(v))
}

// Script operations.
const (
	opAllow = "a"
	opPeek  = "p"
	opMany  = "m"
)

// replyWidth is the number of integers of one decision in the scripts'
// replies; replyHeader is the number that precede them in AllowAll's.
const (
	replyWidth  = 5
	replyHeader = 3
)

// parseDecision turns five integers of the script's reply into a Decision,
// checking every field.
func parseDecision(p *sluice.Policy, v []int64) (sluice.Decision, error) {
	allowed, remaining, retry, reset, delay := v[0], v[1], v[2], v[3], v[4]
	if allowed < 0 || allowed > 1 || remaining < 0 || remaining > p.Capacity() || retry < -1 || reset < 0 || delay < 0 ||
		(allowed == 1 && retry != 0) {
		return sluice.Decision{}, fmt.Errorf("redisstore: malformed decision %v from the script", v)
	}
	d := sluice.Decision{
		Allowed:    allowed == 1,
		Limit:      p.Limit,
		Remaining:  remaining,
		ResetAfter: ceilMillis(reset),
		Delay:      time.Duration(delay) * time.Microsecond,
	}
	switch {
	case retry == -1:
		d.RetryAfter = sluice.Never
	case !d.Allowed:
		d.RetryAfter = retryMillis(retry)
	}
	return d, nil
}

// maxDurationMillis is the most whole milliseconds a Duration holds.
const maxDurationMillis = math.MaxInt64 / int64(time.Millisecond)

// ceilMillis converts µs to a Duration rounded up to whole milliseconds,
// saturating at the longest (a debt that takes longer to repay), as
// internal/algo does.
func ceilMillis(us int64) time.Duration {
	return time.Duration(min((us+999)/1000, maxDurationMillis)) * time.Millisecond
}

// retryMillis is ceilMillis with the floor of 1 ms that RetryAfter
// promises.
func retryMillis(us int64) time.Duration {
	if us <= 1000 {
		return time.Millisecond
	}
	return ceilMillis(us)
}
