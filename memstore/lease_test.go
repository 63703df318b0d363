package memstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// FuzzParseLease checks that the lease decoder never panics on what a
// client may send, and that what it accepts is what the store writes: the
// lease made from the decoded identifier and keys is the input again.
func FuzzParseLease(f *testing.F) {
	lt := newLeaseTaker(nil)
	lt.took(1)
	lt.took(0xfedcba9876543210)
	f.Add(lt.encode())
	f.Add("")
	f.Add("m1.")
	f.Add("m1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("r1.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		id, hs, settles, err := parseLease(s, nil)
		if err != nil {
			return
		}
		if len(hs) > maxLeaseKeys {
			t.Fatalf("parseLease(%q) = %d keys, want at most %d", s, len(hs), maxLeaseKeys)
		}
		again := leaseTaker{id: id, hs: hs} // as the store wrote them, repeats and all
		if settles {
			again.settle = []estimate{{}}
		}
		if got := again.encode(); got != s {
			t.Fatalf("parseLease(%q) then encode() = %q", s, got)
		}
	})
}

// TestLeaseNeverEvicted checks that a key at its cap evicts rate state
// only: the units a lease holds stay held however many keys come.
func TestLeaseNeverEvicted(t *testing.T) {
	ctx := context.Background()
	s := New(Options{Shards: 1, MaxKeys: 8})
	conc := sluice.Concurrency(1, time.Hour)
	rate := sluice.TokenBucket(1, time.Hour, 1)
	d, err := s.Allow(ctx, time.Time{}, sluice.Request{Policy: &conc, Key: "held", Cost: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	for i := range 100 {
		if _, err := s.Allow(ctx, time.Time{}, sluice.Request{Policy: &rate, Key: strconv.Itoa(i), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := s.Allow(ctx, time.Time{}, sluice.Request{Policy: &conc, Key: "held", Cost: 1}); err != nil || d.Allowed {
		t.Fatalf("after 100 other keys at a cap of 8, Allow on the held key = %+v, %v; want refused", d, err)
	}
}

// TestLeasePruned checks that Prune drops a concurrency key once every
// hold has expired, and not before.
func TestLeasePruned(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	s := New(Options{})
	conc := sluice.Concurrency(2, 10*time.Second)
	if _, err := s.Allow(ctx, t0, sluice.Request{Policy: &conc, Key: "k", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if n := s.Prune(t0.Add(10*time.Second - time.Microsecond)); n != 0 || s.Len() != 1 {
		t.Fatalf("Prune before the expiry dropped %d, Len %d; want 0, 1", n, s.Len())
	}
	if n := s.Prune(t0.Add(10 * time.Second)); n != 1 || s.Len() != 0 {
		t.Fatalf("Prune at the expiry dropped %d, Len %d; want 1, 0", n, s.Len())
	}
}

// TestHeld checks Held: the units and leases held under one policy over
// all its keys, none of another policy's, and nothing once they expire or
// are released.
func TestHeld(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	s := New(Options{})
	a := sluice.Concurrency(5, 10*time.Second).Named("a")
	b := sluice.Concurrency(5, 10*time.Second).Named("b")
	var leases []string
	for i, r := range []sluice.Request{{Policy: &a, Key: "k1", Cost: 2}, {Policy: &a, Key: "k2", Cost: 1}, {Policy: &b, Key: "k1", Cost: 3}} {
		d, err := s.Allow(ctx, t0.Add(time.Duration(i)*time.Second), r)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow %d = %+v, %v", i, d, err)
		}
		leases = append(leases, d.Lease)
	}
	check := func(at time.Time, p *sluice.Policy, units, n int64) {
		t.Helper()
		if u, l, err := s.Held(at, p); err != nil || u != units || l != n {
			t.Errorf("Held(%v, %s) = %d, %d, %v; want %d, %d", at.Sub(t0), p.Name, u, l, err, units, n)
		}
	}
	check(t0.Add(2*time.Second), &a, 3, 2)
	check(t0.Add(2*time.Second), &b, 3, 1)
	if _, err := s.Release(ctx, t0.Add(3*time.Second), leases[1], nil); err != nil {
		t.Fatal(err)
	}
	check(t0.Add(3*time.Second), &a, 2, 1)
	check(t0.Add(10*time.Second), &a, 0, 0) // k1's lease ran out at 10 s
	check(t0.Add(10*time.Second), &b, 3, 1) // b's, taken at 2 s, runs to 12 s
	if _, _, err := s.Held(t0, &sluice.Policy{Algorithm: sluice.TokenBucketAlgorithm, Limit: 1, Period: time.Second}); err == nil {
		t.Error("Held of a rate policy: no error")
	}
}

// TestLeaseKeysBound checks that an AllowAll that would hold more
// concurrency keys than a lease can name is refused with an error before
// anything is held, and that 64 keys still make a lease that releases
// them all.
func TestLeaseKeysBound(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	p := sluice.Concurrency(1, time.Hour)
	reqs := func(n int) []sluice.Request {
		var rs []sluice.Request
		for i := range n {
			rs = append(rs, sluice.Request{Policy: &p, Key: strconv.Itoa(i), Cost: 1})
		}
		return rs
	}
	if d, err := s.AllowAll(ctx, time.Time{}, reqs(maxLeaseKeys+1), nil); !errors.Is(err, sluice.ErrNotSupported) || d.Allowed {
		t.Fatalf("AllowAll of %d keys = %+v, %v; want ErrNotSupported", maxLeaseKeys+1, d, err)
	}
	if d, err := s.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "0", Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("after the refused AllowAll, key 0 = %+v, %v; want free", d, err)
	} else if _, err := s.Release(ctx, time.Time{}, d.Lease, nil); err != nil {
		t.Fatal(err)
	}
	d, err := s.AllowAll(ctx, time.Time{}, reqs(maxLeaseKeys), nil)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAll of %d keys = %+v, %v", maxLeaseKeys, d, err)
	}
	if ok, err := s.Release(ctx, time.Time{}, d.Lease, nil); err != nil || !ok {
		t.Fatalf("Release of %d keys = %v, %v", maxLeaseKeys, ok, err)
	}
	if u, _, _ := s.Held(time.Time{}, &p); u != 0 {
		t.Errorf("after the release, %d units held, want 0", u)
	}
}

// TestExpired checks that Expired counts the holds that ran out without a
// release, once each, whether the store notices them at a decision, a
// release or Prune, and not the ones released in time.
func TestExpired(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	s := New(Options{})
	p := sluice.Concurrency(10, 10*time.Second).Named("p")
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	take := func(sec int, key string) string {
		t.Helper()
		d, err := s.Allow(ctx, at(sec), sluice.Request{Policy: &p, Key: key, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v", key, d, err)
		}
		return d.Lease
	}
	want := func(n int64) {
		t.Helper()
		if got, err := s.Expired(&p); err != nil || got != n {
			t.Errorf("Expired = %d, %v; want %d", got, err, n)
		}
	}
	a1, a2 := take(0, "a"), take(0, "a")
	b := take(0, "b")
	take(0, "c")
	if ok, _ := s.Release(ctx, at(5), a1, nil); !ok {
		t.Fatal("Release(a1) freed nothing")
	}
	want(0)
	take(11, "a") // a2 ran out at 10 s: noticed by this decision
	want(1)
	if ok, _ := s.Release(ctx, at(12), b, nil); ok {
		t.Fatal("Release(b) after its expiry freed something")
	}
	want(2) // b, noticed by its late release
	if ok, _ := s.Release(ctx, at(12), a2, nil); ok {
		t.Fatal("Release(a2) again freed something")
	}
	s.Prune(at(30)) // c, and a's last hold, dropped with their keys
	want(4)
}

// TestLeaseOneKeyTwice checks that a lease naming one key twice (an
// AllowAll with two requests of it) holds it once, with the summed units,
// as the Redis store does: one lease in Inspect, the units freed together.
func TestLeaseOneKeyTwice(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	p := sluice.Concurrency(5, time.Minute)
	d, err := s.AllowAll(ctx, time.Time{}, []sluice.Request{{Policy: &p, Key: "k", Cost: 1}, {Policy: &p, Key: "k", Cost: 2}}, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAll = %+v, %v", d, err)
	}
	st, err := s.Inspect(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1})
	if err != nil || st.Held != 3 || st.Leases != 1 {
		t.Fatalf("Inspect = held %d, leases %d, %v; want 3 held by 1 lease", st.Held, st.Leases, err)
	}
	if ok, err := s.Release(ctx, time.Time{}, d.Lease, nil); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if u, l, _ := s.Held(time.Time{}, &p); u != 0 || l != 0 {
		t.Errorf("after the release: %d units by %d leases, want none", u, l)
	}
}
