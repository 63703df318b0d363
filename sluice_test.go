package sluice_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestPolicyValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy sluice.Policy
		want   string // a part of the error; "" for a valid policy
	}{
		{"token bucket", sluice.TokenBucket(100, time.Minute, 20), ""},
		{"burst 0 means the limit", sluice.TokenBucket(100, time.Minute, 0), ""},
		{"every algorithm: gcra", sluice.GCRA(1, time.Microsecond, 0), ""},
		{"every algorithm: leaky", sluice.LeakyBucket(5, time.Second, 50), ""},
		{"every algorithm: fixed", sluice.FixedWindow(5, time.Second), ""},
		{"every algorithm: log", sluice.SlidingLog(5, time.Second), ""},
		{"every algorithm: window", sluice.SlidingWindow(5, time.Second), ""},
		{"window with burst equal to limit", sluice.Policy{Algorithm: sluice.SlidingWindowAlgorithm, Limit: 5, Period: time.Second, Burst: 5}, ""},
		{"largest numbers", sluice.TokenBucket(sluice.MaxLimit, sluice.MaxPeriod, sluice.MaxLimit), ""},
		{"refill just within 2^60 µs", sluice.TokenBucket(1, time.Hour, 300_000_000), ""},
		{"refill within 2^60 µs, product beyond", sluice.TokenBucket(1_000_000, sluice.MaxPeriod, sluice.MaxLimit), ""},

		{"zero policy", sluice.Policy{}, "limit must be at least 1, got 0"},
		{"limit 0", sluice.TokenBucket(0, time.Second, 0), "limit must be at least 1, got 0"},
		{"negative limit", sluice.FixedWindow(-5, time.Second), "limit must be at least 1, got -5"},
		{"limit above max", sluice.SlidingLog(sluice.MaxLimit+1, time.Second), "limit must be at most 1000000000"},
		{"period 0", sluice.TokenBucket(1, 0, 0), "period must be positive, got 0s"},
		{"negative period", sluice.GCRA(1, -time.Second, 0), "period must be positive, got -1s"},
		{"sub-microsecond period", sluice.LeakyBucket(1, 999*time.Nanosecond, 0), "whole number of microseconds, got 999ns"},
		{"period not whole microseconds", sluice.SlidingWindow(1, time.Second+time.Nanosecond), "whole number of microseconds"},
		{"period above ten years", sluice.TokenBucket(1, sluice.MaxPeriod+time.Microsecond, 0), "period must be at most"},
		{"negative burst", sluice.TokenBucket(1, time.Second, -1), "burst must not be negative"},
		{"burst above max", sluice.TokenBucket(1, time.Second, sluice.MaxLimit+1), "burst must be at most 1000000000"},
		{"unknown algorithm", sluice.Policy{Algorithm: 7, Limit: 1, Period: time.Second}, "unknown algorithm 7"},
		{"concurrency with a burst", sluice.Policy{Algorithm: sluice.ConcurrencyAlgorithm, Limit: 2, Burst: 3, Period: time.Second}, "concurrency has no burst"},
		{"concurrency without a lease", sluice.Concurrency(2, 0), "period must be positive"},
		{"fixed window with burst", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Period: time.Second, Burst: 10}, "fixed_window has no burst"},
		{"sliding log with burst", sluice.Policy{Algorithm: sluice.SlidingLogAlgorithm, Limit: 5, Period: time.Second, Burst: 1}, "sliding_log has no burst"},
		{"refill beyond 2^60 µs", sluice.TokenBucket(1, time.Hour, sluice.MaxLimit), "exceeds 36,000 years"},
		{"refill far beyond 2^64 µs", sluice.TokenBucket(1, sluice.MaxPeriod, sluice.MaxLimit), "exceeds 36,000 years"},
		{"the name is in the error", sluice.TokenBucket(0, time.Second, 0).Named("api"), `policy "api": limit must be at least 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.policy.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Validate(%v) = %v, want nil", c.policy, err)
			case c.want != "" && err == nil:
				t.Errorf("Validate(%v) = nil, want an error containing %q", c.policy, c.want)
			case c.want != "" && (!errors.Is(err, sluice.ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Validate(%v) = %v, want an error wrapping ErrInvalidPolicy containing %q", c.policy, err, c.want)
			}
		})
	}
}

func TestPolicyAccessors(t *testing.T) {
	for _, c := range []struct {
		policy   sluice.Policy
		capacity int64
		str      string
	}{
		{sluice.TokenBucket(100, time.Minute, 20).Named("api"), 20, "api: token_bucket 100/1m0s burst 20"},
		{sluice.GCRA(100, time.Minute, 0), 100, "gcra 100/1m0s burst 100"},
		{sluice.LeakyBucket(10, time.Second, 5), 5, "leaky_bucket 10/1s burst 5"},
		{sluice.FixedWindow(100, time.Hour), 100, "fixed_window 100/1h0m0s"},
		{sluice.SlidingLog(3, time.Minute), 3, "sliding_log 3/1m0s"},
		{sluice.SlidingWindow(7, time.Second).Named("w"), 7, "w: sliding_window 7/1s"},
	} {
		if got := c.policy.Capacity(); got != c.capacity {
			t.Errorf("%v.Capacity() = %d, want %d", c.policy, got, c.capacity)
		}
		if got := c.policy.String(); got != c.str {
			t.Errorf("String() = %q, want %q", got, c.str)
		}
	}
	p := sluice.TokenBucket(1, time.Second, 0)
	if q := p.Named("x"); q.Name != "x" || p.Name != "" {
		t.Errorf("Named changed its receiver or did not name the copy: %q, %q", p.Name, q.Name)
	}
}

func TestAlgorithmText(t *testing.T) {
	names := []string{"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window"}
	algs := sluice.Algorithms()
	if len(algs) != len(names) {
		t.Fatalf("Algorithms() has %d algorithms, want %d", len(algs), len(names))
	}
	for i, a := range algs {
		if a.String() != names[i] {
			t.Errorf("Algorithms()[%d].String() = %q, want %q", i, a, names[i])
		}
		got, err := sluice.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a, got, err, a)
		}
		text, err := a.MarshalText()
		if err != nil || string(text) != names[i] {
			t.Errorf("%v.MarshalText() = %q, %v", a, text, err)
		}
		var back sluice.Algorithm
		if err := back.UnmarshalText(text); err != nil || back != a {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, back, err, a)
		}
		if want := i < 3; a.HasBurst() != want {
			t.Errorf("%v.HasBurst() = %v, want %v", a, a.HasBurst(), want)
		}
	}
	for _, bad := range []string{"", "TOKEN_BUCKET", "token-bucket", "tokenbucket", " gcra", "all"} {
		if a, err := sluice.ParseAlgorithm(bad); err == nil || !strings.Contains(err.Error(), "token_bucket, gcra") {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want an error listing the algorithms", bad, a, err)
		}
		var a sluice.Algorithm = sluice.SlidingLogAlgorithm
		if err := a.UnmarshalText([]byte(bad)); err == nil || a != sluice.SlidingLogAlgorithm {
			t.Errorf("UnmarshalText(%q) = %v and changed the value to %v", bad, err, a)
		}
	}
	unknown := sluice.Algorithm(42)
	if s := unknown.String(); s != "Algorithm(42)" {
		t.Errorf("Algorithm(42).String() = %q", s)
	}
	if _, err := unknown.MarshalText(); err == nil {
		t.Error("Algorithm(42).MarshalText() = nil error")
	}

	// Through encoding/json, as a configuration would use it.
	type conf struct{ Algorithm sluice.Algorithm }
	b, err := json.Marshal(conf{sluice.SlidingWindowAlgorithm})
	if err != nil || string(b) != `{"Algorithm":"sliding_window"}` {
		t.Errorf("json.Marshal = %s, %v", b, err)
	}
	var c conf
	if err := json.Unmarshal([]byte(`{"Algorithm":"leaky_bucket"}`), &c); err != nil || c.Algorithm != sluice.LeakyBucketAlgorithm {
		t.Errorf("json.Unmarshal = %v, %v", c.Algorithm, err)
	}
	if err := json.Unmarshal([]byte(`{"Algorithm":"leaky"}`), &c); err == nil {
		t.Error(`json.Unmarshal("leaky") = nil error`)
	}
}
