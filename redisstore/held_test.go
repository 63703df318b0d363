package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// redisNow returns the Redis server's TIME at addr, in µs.
func redisNow(t *testing.T, addr string) int64 {
	t.Helper()
	v, err := testkit.RedisDo(addr, "TIME")
	a, ok := v.([]any)
	if err != nil || !ok || len(a) != 2 {
		t.Fatalf("TIME = %v, %v", v, err)
	}
	sec, _ := strconv.ParseInt(a[0].(string), 10, 64)
	us, _ := strconv.ParseInt(a[1].(string), 10, 64)
	return sec*1e6 + us
}

// waitHoldsExpire waits until every hold of the concurrency key at addr
// has expired on Redis's clock, without running a script on it (which
// would drop them).
func waitHoldsExpire(t *testing.T, addr, key string) {
	t.Helper()
	v, err := testkit.RedisDo(addr, "HGETALL", key)
	kv, ok := v.([]any)
	if err != nil || !ok || len(kv) == 0 {
		t.Fatalf("HGETALL %s = %v, %v", key, v, err)
	}
	var last int64
	for i := 1; i < len(kv); i += 2 {
		f := strings.Fields(kv[i].(string))
		e, _ := strconv.ParseInt(f[1], 10, 64)
		last = max(last, e)
	}
	testkit.WaitFor(t, 10*time.Second, "the holds of "+key+" to expire", func() bool {
		return redisNow(t, addr) >= last
	})
}

func scanHeld(t *testing.T, st *Store, ps ...*sluice.Policy) []int64 {
	t.Helper()
	units := make([]int64, len(ps))
	complete, err := st.ScanHeld(t.Context(), ps, 0, units)
	if err != nil || !complete {
		t.Fatalf("ScanHeld = %v, %v; want complete", complete, err)
	}
	return units
}

func expiredSum(t *testing.T, p *sluice.Policy, stores ...*Store) int64 {
	t.Helper()
	var n int64
	for _, st := range stores {
		e, err := st.Expired(p)
		if err != nil {
			t.Fatal(err)
		}
		n += e
	}
	return n
}

// TestHeldAndExpired checks, on a single Redis and on Redis Cluster, that
// ScanHeld sums the units held under each concurrency policy over all its
// keys (on every master), and that every hold that runs out unreleased is
// counted once by Expired, by whichever store's script drops it: a
// decision, a release, a renewal, an AllowAll refused for a cost beyond
// capacity, or the scan.
func TestHeldAndExpired(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		testHeldAndExpired(t, []string{srv.Addr}, func(string) string { return srv.Addr })
	})
	t.Run("cluster", func(t *testing.T) {
		c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
		testHeldAndExpired(t, c.Addrs, func(key string) string {
			n, err := c.NodeForSlot(int(slot(key)))
			if err != nil {
				t.Fatal(err)
			}
			return n.Addr
		})
	})
}

func testHeldAndExpired(t *testing.T, addrs []string, nodeOf func(key string) string) {
	ctx := t.Context()
	a := newTestStore(t, addrs, Options{Failure: FailError})
	b := newTestStore(t, addrs, Options{Failure: FailError, Prefix: a.prefix})
	lease := 300 * time.Millisecond
	p := sluice.Concurrency(5, lease)
	q := sluice.Concurrency(5, lease)
	q.Name = "q"
	rate := sluice.TokenBucket(10, time.Second, 0)
	take := func(st *Store, pol *sluice.Policy, key string, cost int64) string {
		t.Helper()
		d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: pol, Key: key, Cost: cost})
		if err != nil || !d.Allowed || d.Lease == "" {
			t.Fatalf("Allow(%s, %q, %d) = %+v, %v; want admitted with a lease", pol, key, cost, d, err)
		}
		return d.Lease
	}
	// Keys spread over the slots (and masters): a..h.
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var want int64
	for i, k := range keys {
		take(a, &p, k, int64(i%3+1))
		want += int64(i%3 + 1)
	}
	released := take(b, &p, "a", 2)
	take(a, &q, "a", 4)
	if d, err := a.Allow(ctx, time.Time{}, sluice.Request{Policy: &rate, Key: "a", Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("Allow(rate) = %+v, %v", d, err) // a rate key of the same caller key: not read
	}
	if ok, err := a.Release(ctx, time.Time{}, released, nil); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if got := scanHeld(t, b, &p, &q, &p); got[0] != want || got[1] != 4 || got[2] != want {
		t.Fatalf("ScanHeld(p, q, p) = %v, want [%d 4 %d]", got, want, want)
	}
	// The bound: one key read of nine, not complete, a lower bound.
	units := make([]int64, 2)
	if complete, err := b.ScanHeld(ctx, []*sluice.Policy{&p, &q}, 1, units); err != nil || complete || units[0]+units[1] == 0 || units[0]+units[1] > 4 {
		t.Fatalf("ScanHeld with maxKeys 1 = %v, %v, %v; want incomplete with one key's units", units, complete, err)
	}
	if _, err := b.ScanHeld(ctx, []*sluice.Policy{&rate}, 0, make([]int64, 1)); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Fatalf("ScanHeld of a rate policy: error %v, want ErrInvalidPolicy", err)
	}
	if _, err := a.Expired(&rate); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Fatalf("Expired of a rate policy: error %v, want ErrInvalidPolicy", err)
	}
	if n := expiredSum(t, &p, a, b) + expiredSum(t, &q, a, b); n != 0 {
		t.Fatalf("Expired before any hold ran out = %d, want 0", n)
	}

	// A key outlives its last hold, for a script to find its holds.
	keyOf := func(pol *sluice.Policy, k string) string { return a.policies.get(pol).key(a.prefix, k) }
	kb := keyOf(&p, "b")
	if ms, err := testkit.RedisDo(nodeOf(kb), "PTTL", kb); err != nil || ms.(int64) <= 120000 || ms.(int64) > 120000+int64(lease/time.Millisecond)+1 {
		t.Fatalf("PTTL %s = %v, %v; want the lease plus two minutes", kb, ms, err)
	}

	// Each way a script finds expired holds: a decision on a (p: one
	// hold of 1 unit; q: one of 4), a release on c, a renewal on d, a
	// refused AllowAll on e; the scan finds the rest (b, f, g, h).
	for _, k := range keys {
		waitHoldsExpire(t, nodeOf(keyOf(&p, k)), keyOf(&p, k))
	}
	waitHoldsExpire(t, nodeOf(keyOf(&q, "a")), keyOf(&q, "a"))
	take(a, &p, "a", 1)
	take(b, &q, "a", 1)
	if n := expiredSum(t, &p, a, b); n != 1 {
		t.Fatalf("Expired(p) after a decision on a = %d, want 1", n)
	}
	if n := expiredSum(t, &q, a, b); n != 1 {
		t.Fatalf("Expired(q) after a decision on a = %d, want 1", n)
	}
	relC, err := encodeLease(newLeaseID(), []string{keyOf(&p, "c")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Release(ctx, time.Time{}, relC, nil); err != nil || ok {
		t.Fatalf("Release of another lease on c = %v, %v; want false", ok, err)
	}
	if n, err := b.Expired(&p); err != nil || n != 1 {
		t.Fatalf("b.Expired(p) after a release on c = %d, %v; want 1", n, err)
	}
	renD, err := encodeLease(newLeaseID(), []string{keyOf(&p, "d")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx, time.Time{}, renD); !errors.Is(err, sluice.ErrLeaseExpired) {
		t.Fatalf("Renew of another lease on d: error %v, want ErrLeaseExpired", err)
	}
	if n := expiredSum(t, &p, a, b); n != 3 {
		t.Fatalf("Expired(p) after a renewal on d = %d, want 3", n)
	}
	big := sluice.TokenBucket(1, time.Second, 0)
	_, err = a.AllowAll(ctx, time.Time{}, []sluice.Request{{Policy: &p, Key: "e", Cost: 1}, {Policy: &big, Key: "e", Cost: 2}}, nil)
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("AllowAll beyond capacity: error %v", err)
	}
	if n := expiredSum(t, &p, a, b); n != 4 {
		t.Fatalf("Expired(p) after a refused AllowAll on e = %d, want 4", n)
	}
	if got := scanHeld(t, b, &p, &q); got[0] != 1 || got[1] != 1 {
		t.Fatalf("ScanHeld(p, q) after the expiry = %v, want [1 1] (the two new holds)", got)
	}
	if n := expiredSum(t, &p, a, b); n != int64(len(keys)) {
		t.Fatalf("Expired(p) after the scan = %d, want %d: every hold that ran out, once", n, len(keys))
	}
	if n, err := b.Expired(&p); err != nil || n != int64(len(keys))-3 {
		t.Fatalf("b.Expired(p) = %d, %v; want %d (c, and the scan's four)", n, err, len(keys)-3)
	}
	for _, k := range []string{"b", "c", "d", "f", "g", "h"} {
		if n, err := testkit.RedisDo(nodeOf(keyOf(&p, k)), "EXISTS", keyOf(&p, k)); err != nil || n != int64(0) {
			t.Errorf("EXISTS %s after its holds were dropped = %v, %v; want 0", k, n, err)
		}
	}
	// Nothing is counted twice: another scan finds nothing new.
	scanHeld(t, a, &p)
	if n := expiredSum(t, &p, a, b); n != int64(len(keys)) {
		t.Fatalf("Expired(p) after a second scan = %d, want %d", n, len(keys))
	}
}

// TestGlobEscape checks the escaping of a prefix in SCAN's pattern.
func TestGlobEscape(t *testing.T) {
	if got, want := globEscape(`a*b?c[d]e\f{g}`), `a\*b\?c\[d\]e\\f{g}`; got != want {
		t.Errorf("globEscape = %q, want %q", got, want)
	}
	srv := testkit.StartRedis(t)
	odd := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, Prefix: "x*[1]:"})
	other := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, Prefix: "x1:"})
	p := sluice.Concurrency(5, time.Minute)
	for _, st := range []*Store{odd, other} {
		if d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 2}); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
	}
	if got := scanHeld(t, odd, &p); got[0] != 2 {
		t.Errorf("ScanHeld under the prefix %q = %v, want [2]: only its own keys", odd.prefix, got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := odd.ScanHeld(ctx, []*sluice.Policy{&p}, 0, make([]int64, 1)); err == nil {
		t.Error("ScanHeld with a cancelled context: no error")
	}
}
