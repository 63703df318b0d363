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

// luaOrder lists the script's parts in the order they are joined: the
// arithmetic, one file per algorithm (each defining local functions that
// the later ones may use), and the entry point.
var luaOrder = []string{
	"lib", "gcra", "token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log", "main",
}

// scriptSource returns the decision script: the files of lua/ joined into
// one chunk, so one EVALSHA decides any mix of algorithms.
func scriptSource() (string, error) {
	var b strings.Builder
	for _, name := range luaOrder {
		src, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			return "", fmt.Errorf("redisstore: embedded script %s: %w", name, err)
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// Script operations.
const (
	opAllow = "a"
	opPeek  = "p"
	opMany  = "m"
)

// replyHeader and replyWidth describe the script's reply: status and index,
// then five integers per decision.
const (
	replyHeader = 2
	replyWidth  = 5
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
