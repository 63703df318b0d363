package redisstore

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

func TestNewOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no redis", Options{}, "no Redis"},
		{"brace in prefix", Options{Addrs: []string{"127.0.0.1:1"}, Prefix: "a{b"}, "must not contain"},
		{"local without store", Options{Addrs: []string{"127.0.0.1:1"}, Failure: FailLocal}, "needs Options.Local"},
		{"unknown failure policy", Options{Addrs: []string{"127.0.0.1:1"}, Failure: 9}, "unknown failure policy"},
		{"negative timeout", Options{Addrs: []string{"127.0.0.1:1"}, Timeout: -time.Second}, "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := New(c.opts)
			if err == nil {
				st.Close()
				t.Fatalf("New(%+v) succeeded, want an error containing %q", c.opts, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%+v) error = %q, want it to contain %q", c.opts, err, c.want)
			}
		})
	}
}

func TestFailurePolicyText(t *testing.T) {
	for _, f := range []FailurePolicy{FailAllow, FailDeny, FailLocal, FailError} {
		b, err := f.MarshalText()
		if err != nil {
			t.Fatalf("%v.MarshalText: %v", f, err)
		}
		var g FailurePolicy
		if err := g.UnmarshalText(b); err != nil || g != f {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", b, g, err, f)
		}
	}
	if _, err := ParseFailurePolicy("open"); err == nil {
		t.Errorf("ParseFailurePolicy(open) succeeded, want an error")
	}
	if _, err := FailurePolicy(9).MarshalText(); err == nil {
		t.Errorf("FailurePolicy(9).MarshalText succeeded, want an error")
	}
}

func TestParseDecision(t *testing.T) {
	p := sluice.TokenBucket(10, time.Second, 5)
	for _, c := range []struct {
		v    []int64
		want sluice.Decision
		ok   bool
	}{
		{[]int64{1, 4, 0, 100_001, 0}, sluice.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 101 * time.Millisecond}, true},
		{[]int64{0, 0, 999, 5, 0}, sluice.Decision{Limit: 10, RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}, true},
		{[]int64{0, 0, 1001, 0, 0}, sluice.Decision{Limit: 10, RetryAfter: 2 * time.Millisecond}, true},
		{[]int64{0, 5, -1, 0, 0}, sluice.Decision{Limit: 10, Remaining: 5, RetryAfter: sluice.Never}, true},
		{[]int64{1, 0, 0, 0, 1500}, sluice.Decision{Allowed: true, Limit: 10, Delay: 1500 * time.Microsecond}, true},
		{[]int64{2, 0, 0, 0, 0}, sluice.Decision{}, false},
		{[]int64{1, 6, 0, 0, 0}, sluice.Decision{}, false},
		{[]int64{1, -1, 0, 0, 0}, sluice.Decision{}, false},
		{[]int64{1, 0, 5, 0, 0}, sluice.Decision{}, false},
		{[]int64{0, 0, -2, 0, 0}, sluice.Decision{}, false},
		{[]int64{0, 0, 1, -1, 0}, sluice.Decision{}, false},
	} {
		got, err := parseDecision(&p, c.v)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseDecision(%v) = %+v, %v; want %+v, ok %v", c.v, got, err, c.want, c.ok)
		}
	}
}

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		b := newBreaker(2, 20*time.Millisecond, func(from, to BreakerState) { changes = append(changes, from.String()+">"+to.String()) })
		step := func(what string, wantOK, wantProbe bool) bool {
			t.Helper()
			ok, probe := b.allow()
			if ok != wantOK || probe != wantProbe {
				t.Errorf("%s: allow() = %v, %v; want %v, %v", what, ok, probe, wantOK, wantProbe)
			}
			return probe
		}
		step("closed", true, false)
		b.failure(false)
		step("one failure", true, false)
		b.success()
		b.failure(false)
		step("one failure after a success", true, false)
		b.failure(false)
		step("two failures in a row", false, false)
		if got := b.retryAfter(); got != 20*time.Millisecond {
			t.Errorf("retryAfter() when just opened = %v, want 20ms", got)
		}
		// The bubble's clock moves only by these Sleeps.
		time.Sleep(20*time.Millisecond - time.Nanosecond)
		step("just before the cooldown ends", false, false)
		if got := b.retryAfter(); got != time.Nanosecond {
			t.Errorf("retryAfter() just before the cooldown ends = %v, want 1ns", got)
		}
		time.Sleep(time.Nanosecond)
		probe := step("after the cooldown", true, true)
		step("while the probe runs", false, false)
		b.failure(probe)
		step("after the probe failed", false, false)
		time.Sleep(20 * time.Millisecond)
		probe = step("after another cooldown", true, true)
		b.abandon(probe)
		step("after the probe's caller gave up", true, true)
		b.success()
		step("after the probe succeeded", true, false)
		want := "closed>open open>half-open half-open>open open>half-open half-open>open open>half-open half-open>closed"
		if got := strings.Join(changes, " "); got != want {
			t.Errorf("changes = %s\nwant %s", got, want)
		}
	})
}
