package memstore

import (
	"context"
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
	f.Add(lt.lease())
	f.Add("")
	f.Add("m1.")
	f.Add("m1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("r1.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		id, hs, err := parseLease(s, nil)
		if err != nil {
			return
		}
		if len(hs) == 0 || len(hs) > maxLeaseKeys {
			t.Fatalf("parseLease(%q) = %d keys, want 1 to %d", s, len(hs), maxLeaseKeys)
		}
		again := leaseTaker{id: id, hs: hs} // as the store wrote them, repeats and all
		if got := again.lease(); got != s {
			t.Fatalf("parseLease(%q) then lease() = %q", s, got)
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
