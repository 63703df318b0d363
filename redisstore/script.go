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

// family is a group of algorithms that share a state layout and a Lua
// file of I/O: the token-bucket family, the windows, and the sliding log.
type family uint8

const (
	famTAT family = iota
	famWindow
	famLog
	numFamilies
)

// familyFiles lists each family's Lua files, in the order they are joined,
// and the function that decides one of its requests.
var familyFiles = [numFamilies]struct {
	files  []string
	decide string
}{
	famTAT:    {[]string{"gcra", "token_bucket", "leaky_bucket"}, "tat_decide"},
	famWindow: {[]string{"fixed_window", "sliding_window"}, "win_decide"},
	famLog:    {[]string{"sliding_log"}, "sliding_log"},
}

// scripts returns the Lua scripts, each made of the files of lua/ joined
// into one chunk: for each family, a script that decides one request (so
// that a call defines only the functions it may need), and one that
// decides any mix of algorithms for AllowAll.
func scripts() (single [numFamilies]string, many string, err error) {
	read := func(b *strings.Builder, names ...string) {
		for _, name := range names {
			src, rerr := luaFiles.ReadFile("lua/" + name + ".lua")
			if rerr != nil && err == nil {
				err = fmt.Errorf("redisstore: embedded script %s: %w", name, rerr)
			}
			b.Write(src)
			b.WriteByte('\n')
		}
	}
	var all strings.Builder
	read(&all, "lib")
	for f := range numFamilies {
		var b strings.Builder
		read(&b, "lib")
		read(&b, familyFiles[f].files...)
		fmt.Fprintf(&b, "local decide = %s\n", familyFiles[f].decide)
		read(&b, "single")
		single[f] = b.String()
		read(&all, familyFiles[f].files...)
	}
	read(&all, "many")
	return single, all.String(), err
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
