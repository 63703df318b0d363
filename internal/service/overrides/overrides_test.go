package overrides

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

var t0 = time.UnixMilli(1_700_000_000_000)

func ov(limit, key string, n int64, expires time.Time) Override {
	return Override{
		Limit:     limit,
		Key:       key,
		Policy:    sluice.TokenBucket(n, time.Minute, 0).Named(limit),
		ExpiresAt: expires,
		SetBy:     "test",
		SetAt:     t0,
	}
}

// storeContract checks what every Store does, on a store that starts
// empty.
func storeContract(t *testing.T, s Store) {
	ctx := context.Background()
	if _, ok := s.Lookup("api", "k1", t0); ok {
		t.Fatal("an empty store has an override")
	}
	before, err := s.Put(ctx, ov("api", "k1", 100, time.Time{}), t0)
	if err != nil || before != nil {
		t.Fatalf("first Put = %v, %v, want nil, nil", before, err)
	}
	p, ok := s.Lookup("api", "k1", t0)
	if !ok || p.Limit != 100 || p.Name != "api" {
		t.Errorf("Lookup = %v, %v, want the override of 100", p, ok)
	}
	if _, ok := s.Lookup("api", "k2", t0); ok {
		t.Error("another key is overridden")
	}
	if _, ok := s.Lookup("web", "k1", t0); ok {
		t.Error("another limit is overridden")
	}
	before, err = s.Put(ctx, ov("api", "k1", 200, t0.Add(time.Minute)), t0)
	if err != nil || before == nil || before.Policy.Limit != 100 {
		t.Fatalf("second Put = %v, %v, want the override of 100 before", before, err)
	}
	if p, _ := s.Lookup("api", "k1", t0); p.Limit != 200 {
		t.Errorf("after the second Put, Lookup = %v, want 200", p)
	}
	got, ok, err := s.Get(ctx, "api", "k1", t0)
	if err != nil || !ok || got.Policy.Limit != 200 || !got.ExpiresAt.Equal(t0.Add(time.Minute)) || got.SetBy != "test" || !got.SetAt.Equal(t0) {
		t.Errorf("Get = %+v, %v, %v", got, ok, err)
	}
	// Expiry: the override stops applying at ExpiresAt.
	if _, ok := s.Lookup("api", "k1", t0.Add(time.Minute-time.Millisecond)); !ok {
		t.Error("the override ended before its expiry")
	}
	if _, ok := s.Lookup("api", "k1", t0.Add(time.Minute)); ok {
		t.Error("the override applies at its expiry")
	}
	if _, ok, _ := s.Get(ctx, "api", "k1", t0.Add(time.Minute)); ok {
		t.Error("Get returns an expired override")
	}
	if _, err := s.Put(ctx, ov("web", "k9", 5, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, ov("api", "k0", 7, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Limit+"/"+o.Key)
	}
	if got := strings.Join(names, ","); got != "api/k0,api/k1,web/k9" {
		t.Errorf("List = %s, want api/k0,api/k1,web/k9", got)
	}
	if list, _ := s.List(ctx, "web", t0.Add(time.Hour)); len(list) != 1 || list[0].Key != "k9" {
		t.Errorf("List(web) = %v", list)
	}
	if list, _ := s.List(ctx, "api", t0.Add(time.Hour)); len(list) != 1 || list[0].Key != "k0" {
		t.Errorf("List(api) after k1's expiry = %v, want k0 alone", list)
	}
	before, err = s.Delete(ctx, "web", "k9", t0)
	if err != nil || before == nil || before.Policy.Limit != 5 {
		t.Errorf("Delete = %v, %v, want the override of 5", before, err)
	}
	if _, ok := s.Lookup("web", "k9", t0); ok {
		t.Error("a deleted override applies")
	}
	if before, err := s.Delete(ctx, "web", "k9", t0); before != nil || err != nil {
		t.Errorf("second Delete = %v, %v, want nil, nil", before, err)
	}
	// An expired override is no "before".
	if before, err := s.Put(ctx, ov("api", "k1", 300, time.Time{}), t0.Add(time.Hour)); before != nil || err != nil {
		t.Errorf("Put over an expired override = %v, %v, want nil before", before, err)
	}
	// Keys with any bytes, colons and slashes included.
	odd := "2001:db8::/64|é\x00"
	if _, err := s.Put(ctx, ov("api", odd, 9, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Lookup("api", odd, t0); !ok || p.Limit != 9 {
		t.Errorf("Lookup(%q) = %v, %v", odd, p, ok)
	}
	// Limit names with colons and percent signs (Envoy's descriptors),
	// apart from a name that would read the same if they were not kept
	// apart.
	for i, name := range []string{"envoy:edge.a", "envoy%3Aedge.a", "envoy"} {
		if _, err := s.Put(ctx, ov(name, "edge.a:k", int64(11+i), time.Time{}), t0); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"envoy:edge.a", "envoy%3Aedge.a", "envoy"} {
		if p, ok := s.Lookup(name, "edge.a:k", t0); !ok || p.Limit != int64(11+i) || p.Name != name {
			t.Errorf("Lookup(%q, edge.a:k) = %v, %v, want the override of %d", name, p, ok, 11+i)
		}
		if list, err := s.List(ctx, name, t0); err != nil || len(list) != 1 || list[0].Limit != name || list[0].Policy.Limit != int64(11+i) {
			t.Errorf("List(%q) = %v, %v", name, list, err)
		}
	}
	// Invalid overrides are refused.
	for _, bad := range []Override{
		{Limit: "", Key: "k", Policy: sluice.FixedWindow(1, time.Second)},
		{Limit: "api", Key: "", Policy: sluice.FixedWindow(1, time.Second).Named("api")},
		{Limit: "api", Key: "k", Policy: sluice.FixedWindow(1, time.Second).Named("web")},
		{Limit: "api", Key: "k", Policy: sluice.FixedWindow(0, time.Second).Named("api")},
	} {
		if _, err := s.Put(ctx, bad, t0); err == nil {
			t.Errorf("Put(%+v) succeeded", bad)
		}
	}
}

func TestMemory(t *testing.T) {
	storeContract(t, NewMemory())
	if NewMemory().Shared() {
		t.Error("a memory store says it is shared")
	}
}

func TestMemoryFull(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	for i := range MaxOverrides {
		exp := time.Time{}
		if i < 10 {
			exp = t0.Add(time.Second)
		}
		if _, err := m.Put(ctx, ov("api", fmt.Sprint(i), 1, exp), t0); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if _, err := m.Put(ctx, ov("api", "one more", 1, time.Time{}), t0); !errors.Is(err, ErrFull) {
		t.Errorf("Put into a full store = %v, want ErrFull", err)
	}
	// Replacing one is fine, and once some expire there is room again.
	if _, err := m.Put(ctx, ov("api", "5000", 2, time.Time{}), t0); err != nil {
		t.Errorf("replacing in a full store: %v", err)
	}
	if _, err := m.Put(ctx, ov("api", "one more", 1, time.Time{}), t0.Add(time.Second)); err != nil {
		t.Errorf("Put after expiries: %v", err)
	}
}

func newClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	// Sweeping uses the store's clock: the contract's times are t0.
	r := NewRedis(newClient(t, srv.Addr), RedisOptions{Poll: 20 * time.Millisecond, Now: func() time.Time { return t0 }})
	defer r.Close()
	if !r.Shared() {
		t.Error("a Redis store says it is not shared")
	}
	storeContract(t, r)
}

// TestRedisShared: three instances on one Redis; a change made through
// one applies to it at once and to the others at their next poll.
func TestRedisShared(t *testing.T) {
	srv := testkit.StartRedis(t)
	const poll = 100 * time.Millisecond
	var stores [3]*Redis
	for i := range stores {
		stores[i] = NewRedis(newClient(t, srv.Addr), RedisOptions{Poll: poll, Prefix: "app:"})
		defer stores[i].Close()
	}
	ctx := context.Background()
	setAt := time.Now()
	if _, err := stores[0].Put(ctx, ov("api", "k1", 42, time.Time{}), setAt); err != nil {
		t.Fatal(err)
	}
	if p, ok := stores[0].Lookup("api", "k1", setAt); !ok || p.Limit != 42 {
		t.Fatalf("the writing instance does not apply its own Put at once: %v, %v", p, ok)
	}
	waitAll := func(want bool) time.Duration {
		t.Helper()
		start := time.Now()
		testkit.WaitFor(t, 2*time.Second, fmt.Sprintf("every instance to see the override as %v", want), func() bool {
			for _, s := range stores {
				if _, ok := s.Lookup("api", "k1", time.Now()); ok != want {
					return false
				}
			}
			return true
		})
		return time.Since(start)
	}
	if d := waitAll(true); d > poll+200*time.Millisecond {
		t.Errorf("the override took %v to reach every instance, want at most a poll (%v) and a round trip", d, poll)
	}
	if _, err := stores[1].Delete(ctx, "api", "k1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if d := waitAll(false); d > poll+200*time.Millisecond {
		t.Errorf("the removal took %v to reach every instance", d)
	}
	// Keys live under the prefix, in one hash slot.
	if v, err := srv.Do("EXISTS", "app:{overrides}:version"); err != nil || v != int64(1) {
		t.Errorf("EXISTS app:{overrides}:version = %v, %v", v, err)
	}
}

// TestRedisExpirySweep: an expired override stops applying at once, and
// is removed from Redis by an instance that sees it.
func TestRedisExpirySweep(t *testing.T) {
	srv := testkit.StartRedis(t)
	now := t0
	clock := func() time.Time { return now }
	r := NewRedis(newClient(t, srv.Addr), RedisOptions{Poll: time.Hour, Now: clock})
	defer r.Close()
	ctx := context.Background()
	if _, err := r.Put(ctx, ov("api", "k1", 5, t0.Add(time.Second)), now); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, ov("api", "k2", 5, time.Time{}), now); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(time.Second)
	if _, ok := r.Lookup("api", "k1", now); ok {
		t.Error("an expired override applies")
	}
	if err := r.refresh(ctx, false); err != nil {
		t.Fatal(err)
	}
	if v, _ := srv.Do("HLEN", "sluice:{overrides}"); v != int64(1) {
		t.Errorf("HLEN after the sweep = %v, want 1 (k2)", v)
	}
}

// TestRedisDown: with Redis gone, lookups keep the last copy, and changes
// fail with an error.
func TestRedisDown(t *testing.T) {
	srv := testkit.StartRedis(t)
	r := NewRedis(newClient(t, srv.Addr), RedisOptions{Poll: 20 * time.Millisecond, Timeout: 200 * time.Millisecond})
	defer r.Close()
	ctx := context.Background()
	if _, err := r.Put(ctx, ov("api", "k1", 5, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	// A malformed field is skipped, not fatal.
	srv.Do("HSET", "sluice:{overrides}", "api:bad", "{not json", "nocolon", "{}")
	srv.Do("INCR", "sluice:{overrides}:version")
	if err := r.refresh(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("api", "k1", t0); !ok {
		t.Error("a malformed field dropped the good ones")
	}
	srv.Kill()
	testkit.WaitFor(t, 5*time.Second, "a refresh to fail", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.failing
	})
	if _, ok := r.Lookup("api", "k1", t0); !ok {
		t.Error("with Redis down the copy was lost")
	}
	if _, err := r.Put(ctx, ov("api", "k2", 5, time.Time{}), t0); err == nil {
		t.Error("Put with Redis down succeeded")
	}
}

// TestRedisLateClient: a store made before its connection fails with
// ErrNotConnected, and works once SetClient gives it one.
func TestRedisLateClient(t *testing.T) {
	srv := testkit.StartRedis(t)
	seed := NewRedis(newClient(t, srv.Addr), RedisOptions{})
	defer seed.Close()
	ctx := context.Background()
	if _, err := seed.Put(ctx, ov("api", "k1", 5, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	r := NewRedis(nil, RedisOptions{Poll: time.Hour})
	defer r.Close()
	if _, err := r.Put(ctx, ov("api", "k2", 5, time.Time{}), t0); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Put without a client = %v, want ErrNotConnected", err)
	}
	if _, err := r.List(ctx, "", t0); !errors.Is(err, ErrNotConnected) {
		t.Errorf("List without a client = %v, want ErrNotConnected", err)
	}
	r.SetClient(newClient(t, srv.Addr))
	if _, ok := r.Lookup("api", "k1", t0); !ok {
		t.Error("after SetClient the copy lacks the override in Redis")
	}
}

func TestAny(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	if m.Any() {
		t.Error("an empty store has Any")
	}
	m.Put(ctx, ov("api", "k", 1, time.Time{}), t0)
	if !m.Any() {
		t.Error("a store with an override has not Any")
	}
	m.Delete(ctx, "api", "k", t0)
	if m.Any() {
		t.Error("a store emptied has Any")
	}
}
