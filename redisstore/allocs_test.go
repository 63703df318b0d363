//go:build !race

package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestLocalRefusalAllocs: a local refusal allocates nothing, for Allow and
// for an AllowAll of up to maxLocalAll requests (docs/redis.md, "Refused
// floods"), on Redis's clock and at a caller's time. The race detector
// allocates on its own, hence the build tag.
func TestLocalRefusalAllocs(t *testing.T) {
	srv := testkit.StartRedis(t)
	for _, callerTime := range []bool{false, true} {
		name := "redis-clock"
		var now time.Time
		if callerTime {
			name, now = "caller-time", time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		}
		t.Run(name, func(t *testing.T) {
			st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, CallerTime: callerTime})
			flood := sluice.TokenBucket(10, time.Hour, 10).Named("flood")
			reqs := []sluice.Request{
				{Policy: new(sluice.FixedWindow(1_000_000, time.Hour).Named("hourly")), Key: "abuser", Cost: 1},
				{Policy: &flood, Key: "abuser", Cost: 1},
				{Policy: new(sluice.SlidingWindow(1_000_000, time.Minute).Named("minutely")), Key: "abuser", Cost: 1},
				{Policy: &flood, Key: "abuser", Cost: 2}, // the same key: one request of cost 3 with the second
			}
			out := make([]sluice.Decision, len(reqs))
			one := sluice.Request{Policy: &flood, Key: "other", Cost: 1}
			for range 11 {
				if _, err := st.AllowAll(t.Context(), now, reqs, out); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Allow(t.Context(), now, one); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []struct {
				name string
				call func() (sluice.Decision, error)
			}{
				{"Allow", func() (sluice.Decision, error) { return st.Allow(t.Context(), now, one) }},
				{"AllowAll", func() (sluice.Decision, error) { return st.AllowAll(t.Context(), now, reqs, out) }},
				{"AllowAll-nil-out", func() (sluice.Decision, error) { return st.AllowAll(t.Context(), now, reqs, nil) }},
				{"AllowAll-one", func() (sluice.Decision, error) { return st.AllowAll(t.Context(), now, reqs[3:], nil) }},
			} {
				// AllocsPerRun counts every goroutine's allocations, and the
				// Redis client's own (its first use of a connection builds
				// a ring of thousands) can fall in one measurement: the
				// least of three is the refusal's.
				n := -1.0
				for range 3 {
					local := st.LocalRefusalStats().Local
					const runs = 1000
					bad := 0
					got := testing.AllocsPerRun(runs, func() {
						if d, err := c.call(); err != nil || d.Allowed {
							bad++
						}
					})
					if bad > 0 {
						t.Fatalf("%s: %d calls failed or were admitted", c.name, bad)
					}
					if l := st.LocalRefusalStats().Local - local; l != runs+1 {
						t.Fatalf("%s: %d of %d refusals were local", c.name, l, runs+1)
					}
					if n < 0 || got < n {
						n = got
					}
					if n == 0 {
						break
					}
				}
				if n != 0 {
					t.Errorf("%s: a local refusal allocates %v times, want 0", c.name, n)
				}
			}
			// The combined decision is algo.Combine's of the requests'.
			if d, err := st.AllowAll(t.Context(), now, reqs, out); err != nil || d != algo.Combine(out) {
				t.Errorf("AllowAll = %+v, %v; algo.Combine of its decisions %+v = %+v", d, err, out, algo.Combine(out))
			}
		})
	}
}
