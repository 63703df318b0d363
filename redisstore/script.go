package redisstore

import (
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algorithmFiles lists, for each algorithm, the Lua files it needs after
// lib.lua, in order, and the functions the single-request script calls:
// the family's decide, which reads and writes the state, and the
// algorithm's own.
var algorithmFiles = [...]struct {
	files             []string
	decide, algorithm string
}{
	sluice.TokenBucketAlgorithm:   {[]string{"tat", "token_bucket"}, "tat_decide", "token_bucket"},
	sluice.GCRAAlgorithm:          {[]string{"tat", "gcra"}, "tat_decide", "gcra"},
	sluice.LeakyBucketAlgorithm:   {[]string{"tat", "leaky_bucket"}, "tat_decide", "leaky_bucket"},
	sluice.FixedWindowAlgorithm:   {[]string{"window", "fixed_window"}, "win_decide", "fixed_window"},
	sluice.SlidingLogAlgorithm:    {[]string{"sliding_log"}, "sliding_log", "false"},
	sluice.SlidingWindowAlgorithm: {[]string{"window", "sliding_window"}, "win_decide", "sliding_window"},
}

// manyFiles are the files of the AllowAll script, in order; the batch
// script adds batch.lua.
var manyFiles = []string{
	"lib", "tat", "token_bucket", "gcra", "leaky_bucket", "window", "fixed_window", "sliding_window", "sliding_log", "many",
}

// scripts returns the Lua scripts, each made of files of lua/ joined into
// one chunk: for each algorithm, one that decides a single request and
// defines only the functions that algorithm uses (Lua creates every
// function of a script anew on each call), and one that decides a batch of
// such requests; one that decides any mix of algorithms for AllowAll; and
// one that decides a batch of any calls. With state, every refusal also
// returns the key's state (STATE in lib.lua), for local refusals.
func scripts(state bool) (single [len(algorithmFiles)]string, many, batch string, batchOne [len(algorithmFiles)]string, err error) {
	read := func(b *strings.Builder, names ...string) {
		for _, name := range names {
			src, rerr := luaFiles.ReadFile("lua/" + name + ".lua")
			if rerr != nil && err == nil {
				err = fmt.Errorf("redisstore: embedded script %s: %w", name, rerr)
			}
			b.Write(src)
			b.WriteByte('\n')
			if state && name == "lib" {
				b.WriteString("STATE = true\n")
			}
		}
	}
	for a, f := range algorithmFiles {
		var b strings.Builder
		read(&b, "lib")
		read(&b, f.files...)
		fmt.Fprintf(&b, "local decide, algorithm = %s, %s\n", f.decide, f.algorithm)
		common := b.String()
		read(&b, "single")
		single[a] = b.String()
		// The batch script for single requests of this algorithm only.
		b.Reset()
		b.WriteString(common)
		fmt.Fprintf(&b, "local MAXDELAY = %t\n", sluice.Algorithm(a) == sluice.LeakyBucketAlgorithm)
		read(&b, "batch_one")
		batchOne[a] = b.String()
	}
	var b strings.Builder
	read(&b, manyFiles...)
	common := b.String()
	b.WriteString("return allow_all(0, 1, #KEYS)\n")
	many = b.String()
	b.Reset()
	b.WriteString(common)
	read(&b, "batch")
	return single, many, b.String(), batchOne, err
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
	replyHeader = 2
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

// ceilMillis converts µs to a Duration rounded up to whole milliseconds.
func ceilMillis(us int64) time.Duration {
	return time.Duration((us+999)/1000) * time.Millisecond
}

// retryMillis is ceilMillis with the floor of 1 ms that RetryAfter
// promises.
func retryMillis(us int64) time.Duration {
	if us <= 1000 {
		return time.Millisecond
	}
	return ceilMillis(us)
}
