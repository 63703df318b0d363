package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// edgePeriod is the longest period (in µs) for which a token bucket of
// limit 1 and burst 15 still qualifies: 15·P <= 2^52 − 2.
const edgePeriod = 300239975158032 * time.Microsecond

// TestSupportedPolicies checks which valid policies the Redis store takes:
// every practical one, and all but those whose empty bucket takes more
// than 2^52 µs (about 142 years) to refill.
func TestSupportedPolicies(t *testing.T) {
	day, year := 24*time.Hour, 365*24*time.Hour
	for _, c := range []struct {
		p  sluice.Policy
		ok bool
	}{
		{sluice.TokenBucket(10, time.Second, 0), true},
		{sluice.TokenBucket(100, time.Minute, 0), true},
		{sluice.TokenBucket(1_000_000, day, 1_000_000), true},
		{sluice.GCRA(999_999_937, time.Hour, 17), true},
		{sluice.LeakyBucket(3, time.Second, 4), true},
		{sluice.TokenBucket(sluice.MaxLimit, year, sluice.MaxLimit), true},
		{sluice.TokenBucket(sluice.MaxLimit, sluice.MaxPeriod, 0), true},
		{sluice.TokenBucket(7, sluice.MaxPeriod, 7), true},
		{sluice.FixedWindow(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingWindow(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingLog(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingWindow(1_000_000, day), true},
		{sluice.TokenBucket(1, edgePeriod, 15), true},
		// One µs more and the refill time passes 2^52 − 2 µs.
		{sluice.TokenBucket(1, edgePeriod+time.Microsecond, 15), false},
		{sluice.TokenBucket(1, year, 1000), false},
		{sluice.GCRA(3, sluice.MaxPeriod, 1000), false},
	} {
		if err := c.p.Validate(); err != nil {
			t.Fatalf("%v is not a valid policy: %v", c.p, err)
		}
		err := compile(c.p).err
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrUnsupportedPolicy)) {
			t.Errorf("compile(%v) error = %v, want supported = %v", c.p, err, c.ok)
		}
	}
}

// TestRefusedPolicy checks that a policy the store cannot decide exactly
// is refused with ErrUnsupportedPolicy before Redis is asked, by every
// method, while the memory store decides it.
func TestRefusedPolicy(t *testing.T) {
	srv := testkit.StartRedis(t)
	srv.Kill() // nothing may reach Redis: a call would fail differently
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailAllow})
	p := sluice.TokenBucket(1, 365*24*time.Hour, 1000)
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	if _, err := memstore.New(memstore.Options{}).Allow(t.Context(), time.Time{}, req); err != nil {
		t.Fatalf("memstore refuses %v: %v", p, err)
	}
	if d, err := st.Allow(t.Context(), time.Time{}, req); !errors.Is(err, ErrUnsupportedPolicy) || d.Degraded {
		t.Errorf("Allow(%v) = %+v, %v; want ErrUnsupportedPolicy", p, d, err)
	}
	if _, err := st.Peek(t.Context(), time.Time{}, req); !errors.Is(err, ErrUnsupportedPolicy) {
		t.Errorf("Peek(%v) error = %v, want ErrUnsupportedPolicy", p, err)
	}
	reqs := []sluice.Request{{Policy: new(sluice.TokenBucket(5, time.Second, 0)), Key: "k", Cost: 1}, req}
	if _, err := st.AllowAll(t.Context(), time.Time{}, reqs, nil); !errors.Is(err, ErrUnsupportedPolicy) {
		t.Errorf("AllowAll(..., %v) error = %v, want ErrUnsupportedPolicy", p, err)
	}
	if _, err := sluice.New(st, p); err != nil {
		t.Logf("sluice.New accepts the policy (valid); the store refuses it per call: %v", err)
	}
	if st.BreakerState() != BreakerClosed {
		t.Errorf("a refused policy reached Redis: the breaker is %v", st.BreakerState())
	}
}

// TestExtremes replays random traces whose policies sit at the limits the
// Redis store takes (the longest refill it accepts, the largest limits and
// periods) at times near the end of its range, in 2112, where timestamps
// approach 2^53 µs: the store must still agree with the memory store.
func TestExtremes(t *testing.T) {
	srv := testkit.StartRedis(t)
	policies := []sluice.Policy{
		sluice.TokenBucket(1, edgePeriod, 15).Named("edge"),
		sluice.LeakyBucket(1, edgePeriod, 15).Named("edge-leaky"),
		sluice.GCRA(999_999_937, sluice.MaxPeriod, 14_000).Named("prime"),
		sluice.SlidingWindow(sluice.MaxLimit, sluice.MaxPeriod).Named("window"),
		sluice.SlidingWindow(999_999_999, 86_399_999_999*time.Microsecond).Named("window-odd"),
		sluice.FixedWindow(sluice.MaxLimit, sluice.MaxPeriod).Named("fixed"),
		sluice.SlidingLog(3, sluice.MaxPeriod).Named("log"),
	}
	for _, p := range policies {
		if err := compile(p).err; err != nil {
			t.Fatalf("%v: %v", p, err)
		}
	}
	start := time.UnixMicro(maxTime).Add(-30 * 24 * time.Hour)
	for seed := range uint64(4) {
		tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 400, Policies: policies, Start: start, MaxGap: time.Hour, BigCostOneIn: 4})
		rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
		sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
	}
	// Past the range: refused, not decided wrongly.
	rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	_, err := rs.Allow(t.Context(), time.UnixMicro(maxTime), sluice.Request{Policy: &policies[0], Key: "k", Cost: 1})
	if err == nil {
		t.Errorf("Allow at 2^52 µs succeeded, want an error naming the time range")
	}
}
