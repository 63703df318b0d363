package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestTTL checks that every key expires when its state is back to initial:
// its TTL is the decision's ResetAfter (plus 1 ms), and once that has
// passed the key is gone, so Redis holds only active keys.
func TestTTL(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Prefix: "ttl:", Failure: FailError})
	const period = 400 * time.Millisecond
	var longest time.Duration
	for _, a := range sluice.Algorithms() {
		p := sluice.Policy{Algorithm: a, Limit: 4, Period: period}
		req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
		d, err := st.Allow(t.Context(), time.Time{}, req)
		if err != nil || !d.Allowed || d.ResetAfter <= 0 {
			t.Fatalf("Allow(%v) = %+v, %v", p, d, err)
		}
		key := compile(p).key("ttl:", "k")
		pttl, err := srv.Do("PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := pttl.(int64)
		reset := d.ResetAfter.Milliseconds()
		if ms <= 0 || ms > reset+1 || ms < reset-50 {
			t.Errorf("%v: PTTL %q = %v ms, want about ResetAfter = %d ms, plus 1", a, key, pttl, reset)
		}
		longest = max(longest, d.ResetAfter)
	}
	// No key outlives the longest ResetAfter: none is without a TTL (-1)
	// or has a longer one.
	for _, key := range srv.Keys(t, "*") {
		pttl, err := srv.Do("PTTL", key)
		if ms, _ := pttl.(int64); err != nil || ms <= 0 || ms > longest.Milliseconds()+1 {
			t.Errorf("PTTL %q = %v, %v; want at most the longest ResetAfter, %d ms, plus 1", key, pttl, err, longest.Milliseconds())
		}
	}
	// And Redis drops them: DBSIZE counts expired keys until Redis's
	// expiry cycle reclaims them, within a second of their TTL.
	testkit.WaitFor(t, longest+3*time.Second, "DBSIZE 0 once every state is back to initial", func() bool {
		n, err := srv.Do("DBSIZE")
		return err == nil && n == int64(0)
	})
}

// TestDenialWritesNothing checks that on Redis's clock a denied request
// and a Peek change nothing in Redis (no write, no replication traffic),
// which keeps a flood of denied requests cheap.
func TestDenialWritesNothing(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	for _, a := range sluice.Algorithms() {
		req := sluice.Request{Policy: &sluice.Policy{Algorithm: a, Limit: 1, Period: time.Hour}, Key: "k", Cost: 1}
		if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || !d.Allowed {
			t.Fatalf("first Allow(%v) = %+v, %v", req.Policy, d, err)
		}
		before := dirty(t, srv)
		for range 3 {
			if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || d.Allowed {
				t.Fatalf("Allow(%v) = %+v, %v; want denied", req.Policy, d, err)
			}
			if _, err := st.Peek(t.Context(), time.Time{}, req); err != nil {
				t.Fatal(err)
			}
		}
		if after := dirty(t, srv); after != before {
			t.Errorf("%v: denied requests and peeks made %d writes, want 0", a, after-before)
		}
	}
}

// dirty returns Redis's count of changes since the last save.
func dirty(t *testing.T, srv *testkit.RedisServer) int64 {
	t.Helper()
	info, err := srv.Info("persistence")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range info["rdb_changes_since_last_save"] {
		n = n*10 + int64(c-'0')
	}
	return n
}

// TestRedisClock checks that by default the store decides at Redis's TIME
// and ignores the time it is passed.
func TestRedisClock(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	req := sluice.Request{Policy: new(sluice.FixedWindow(5, time.Hour)), Key: "k", Cost: 1}
	// At the caller's time the window would end in exactly 30 minutes.
	callerNow := time.Date(2001, 1, 1, 0, 30, 0, 0, time.UTC)
	d, err := st.Allow(t.Context(), callerNow, req)
	if err != nil {
		t.Fatal(err)
	}
	real := time.Now()
	want := real.Truncate(time.Hour).Add(time.Hour).Sub(real)
	if diff := d.ResetAfter - want; diff < -2*time.Second || diff > 2*time.Second {
		t.Errorf("Allow at %v: ResetAfter = %v, want about %v (the end of Redis's current hour)", callerNow, d.ResetAfter, want)
	}
}
