package sluicetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// leaseTimeline checks a hand-worked timeline of a concurrency policy of 3
// units with leases of 10 s (docs/algorithms.md, "Concurrency"): holds,
// refusals with the wait until enough holds expire, release, a second
// release, renewal, expiry, and a release and a renewal after expiry.
func (s *suite) leaseTimeline(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	p := sluice.Concurrency(3, 10*time.Second).Named("conc")
	req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "k", Cost: cost} }
	sec := func(n int) time.Time { return s.at(time.Duration(n) * time.Second) }
	want := func(what string, d sluice.Decision, err error, allowed bool, remaining int64, retry, reset time.Duration) {
		t.Helper()
		expect(t, what, d, err, allowed, remaining)
		if d.RetryAfter != retry || d.ResetAfter != reset {
			t.Errorf("%s = %s, want retry %v, reset %v", what, fmtDecision(d), retry, reset)
		}
	}
	ctx := t.Context()

	d, err := allow(t, st, sec(0), req(2)) // A: 2 units until 10 s
	want("t=0 A cost 2", d, err, true, 1, 0, 10*time.Second)
	a := d.Lease
	d, err = allow(t, st, sec(1), req(2)) // 2 + 2 > 3: A's expiry at 10 s makes room
	want("t=1s cost 2", d, err, false, 1, 9*time.Second, 9*time.Second)
	d, err = allow(t, st, sec(1), req(1)) // B: 1 unit until 11 s
	want("t=1s B cost 1", d, err, true, 0, 0, 10*time.Second)
	b := d.Lease
	d, err = peek(t, st, sec(2), req(1))
	want("t=2s peek cost 1", d, err, false, 0, 8*time.Second, 9*time.Second)

	if ok, err := st.Release(ctx, sec(3), a, nil); err != nil || !ok {
		t.Fatalf("t=3s Release(A) = %v, %v; want true, nil", ok, err)
	}
	if ok, err := st.Release(ctx, sec(3), a, nil); err != nil || ok {
		t.Fatalf("t=3s Release(A) again = %v, %v; want false, nil", ok, err)
	}
	d, err = allow(t, st, sec(3), req(2)) // C: 2 units until 13 s, beside B
	want("t=3s C cost 2", d, err, true, 0, 0, 10*time.Second)
	c := d.Lease
	if in, err := st.Renew(ctx, sec(5), b); err != nil || in != 10*time.Second {
		t.Fatalf("t=5s Renew(B) = %v, %v; want 10s, nil", in, err) // B now until 15 s
	}
	d, err = allow(t, st, sec(12), req(1)) // B and C hold 3; C's expiry at 13 s makes room
	want("t=12s cost 1", d, err, false, 0, time.Second, 3*time.Second)

	if ok, err := st.Release(ctx, sec(13), c, nil); err != nil || ok {
		t.Fatalf("t=13s Release(C), expired = %v, %v; want false, nil", ok, err)
	}
	if _, err := st.Renew(ctx, sec(13), c); !errors.Is(err, sluice.ErrLeaseExpired) {
		t.Fatalf("t=13s Renew(C), expired: error %v, want ErrLeaseExpired", err)
	}
	d, err = allow(t, st, sec(13), req(2)) // D: 2 units until 23 s, beside B
	want("t=13s D cost 2", d, err, true, 0, 0, 10*time.Second)
	// B's release after its expiry must not free D's units.
	if ok, err := st.Release(ctx, sec(16), b, nil); err != nil || ok {
		t.Fatalf("t=16s Release(B), expired = %v, %v; want false, nil", ok, err)
	}
	d, err = allow(t, st, sec(16), req(1)) // E: 1 unit until 26 s, beside D
	want("t=16s E cost 1", d, err, true, 0, 0, 10*time.Second)
	d, err = allow(t, st, sec(16), req(1)) // D's expiry at 23 s makes room
	want("t=16s cost 1 again", d, err, false, 0, 7*time.Second, 10*time.Second)
	d, err = allow(t, st, sec(16), req(4))
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.RetryAfter != sluice.Never {
		t.Errorf("t=16s cost 4 of 3 = %s, %v; want RetryAfter Never and ErrCostExceedsCapacity", fmtDecision(d), err)
	}
}

// leaseAllOrNothing checks that a concurrency policy and a rate policy
// decided together are all or nothing: a refusal by either takes no unit
// of the other, and one lease covers the units of two concurrency
// policies.
func (s *suite) leaseAllOrNothing(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	conc := sluice.Concurrency(2, slow).Named("conc")
	wide := sluice.Concurrency(5, slow).Named("wide")
	rate := sluice.TokenBucket(1, slow, 1).Named("rate")
	key := "k"
	reqs := []sluice.Request{{Policy: &conc, Key: key, Cost: 2}, {Policy: &rate, Key: key, Cost: 1}, {Policy: &wide, Key: key, Cost: 2}}

	d, _, err := allowAll(t, st, s.at(0), reqs)
	if err != nil || !d.Allowed || d.Lease == "" {
		t.Fatalf("first AllowAll = %s lease %q, %v; want allowed with a lease", fmtDecision(d), d.Lease, err)
	}
	lease := d.Lease
	// The rate refuses now: no unit of either concurrency policy is taken.
	if ok, err := st.Release(ctx, s.at(0), lease, nil); err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true, nil", ok, err)
	}
	d, _, err = allowAll(t, st, s.at(0), reqs)
	if err != nil || d.Allowed || d.Lease != "" {
		t.Fatalf("AllowAll with the rate spent = %s lease %q, %v; want refused without a lease", fmtDecision(d), d.Lease, err)
	}
	for _, p := range []*sluice.Policy{&conc, &wide} {
		d, err := peek(t, st, s.at(0), sluice.Request{Policy: p, Key: key, Cost: 2})
		expect(t, "peek "+p.Name+" after a refusal by the rate", d, err, true, p.Limit-2)
	}
	// The concurrency policy refuses: the rate is not charged.
	other := "k2"
	hold := []sluice.Request{{Policy: &conc, Key: other, Cost: 2}}
	if d, _, err := allowAll(t, st, s.at(0), hold); err != nil || !d.Allowed {
		t.Fatalf("holding %s: %s, %v", other, fmtDecision(d), err)
	}
	reqs2 := []sluice.Request{{Policy: &rate, Key: other, Cost: 1}, {Policy: &conc, Key: other, Cost: 1}}
	if d, _, err := allowAll(t, st, s.at(0), reqs2); err != nil || d.Allowed || d.Lease != "" {
		t.Fatalf("AllowAll with the slots held = %s lease %q, %v; want refused without a lease", fmtDecision(d), d.Lease, err)
	}
	d, err = peek(t, st, s.at(0), sluice.Request{Policy: &rate, Key: other, Cost: 1})
	expect(t, "peek the rate after a refusal by the concurrency policy", d, err, true, 0)
}

// leaseExact checks that no more than the limit is ever held, with
// goroutines acquiring and releasing on one key, and that the limit is
// reached.
func (s *suite) leaseExact(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	const limit = 3
	p := sluice.Concurrency(limit, slow).Named("exact")
	var inFlight, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for range s.goroutines {
		wg.Go(func() {
			for range 200 {
				d, err := st.Allow(ctx, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 1})
				if err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inFlight.Add(-1)
				if ok, err := st.Release(ctx, s.at(0), d.Lease, nil); err != nil || !ok {
					t.Errorf("Release = %v, %v; want true, nil", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Errorf("%d requests held slots at once, want at most %d", m, limit)
	}
	if admitted.Load() == 0 {
		t.Errorf("no request was admitted")
	}
	d, err := peek(t, st, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: limit})
	expect(t, "peek after every lease was released", d, err, true, 0)
}

// leaseInvalid checks that malformed and foreign leases are errors
// wrapping ErrInvalidLease, for Release and Renew.
func (s *suite) leaseInvalid(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	for _, lease := range []string{"", "x", "m1.", "r1.AAAA", "m1.!!!!", "m1.AAAAAAAAAAAAAAAAAAAAAA", string(make([]byte, 4096))} {
		if ok, err := st.Release(ctx, s.at(0), lease, nil); !errors.Is(err, sluice.ErrInvalidLease) || ok {
			t.Errorf("Release(%.20q) = %v, %v; want false and ErrInvalidLease", lease, ok, err)
		}
		if _, err := st.Renew(ctx, s.at(0), lease); !errors.Is(err, sluice.ErrInvalidLease) {
			t.Errorf("Renew(%.20q) error = %v; want ErrInvalidLease", lease, err)
		}
	}
}
