package sluicetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Usage makes Run check the part of the sluice.Store contract for costs
// known afterwards: Debit, Refund, checks of cost 0, estimates settled
// through Release, and Reset.
func Usage() Option {
	return func(c *config) { c.usage = true }
}

// usageEnvoy checks the usage pattern of Envoy Gateway on a fixed window
// of 100 per hour: a check before the request, the units used debited
// after it. The second debit of 60 goes past the limit, is counted, and
// every request is refused from then on (docs/algorithms.md, "Debt,
// refunds and checks").
func (s *suite) usageEnvoy(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	p := sluice.FixedWindow(100, slow).Named("tokens")
	req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "k", Cost: cost} }

	d, err := allow(t, st, s.at(0), req(0))
	expect(t, "check on a fresh key", d, err, true, 100)
	d, err = st.Debit(ctx, s.at(0), req(60))
	expect(t, "debit 60", d, err, true, 40)
	d, err = allow(t, st, s.at(0), req(0))
	expect(t, "check after 60", d, err, true, 40)
	d, err = st.Debit(ctx, s.at(0), req(60))
	expect(t, "debit 60 more, past the limit", d, err, false, 0)
	if d.RetryAfter <= 0 {
		t.Errorf("debit past the limit = %s, want a RetryAfter", fmtDecision(d))
	}
	for _, c := range []int64{0, 1} {
		d, err = allow(t, st, s.at(0), req(c))
		expect(t, fmt.Sprintf("Allow(cost %d) in debt", c), d, err, false, 0)
		d, err = peek(t, st, s.at(0), req(c))
		expect(t, fmt.Sprintf("Peek(cost %d) in debt", c), d, err, false, 0)
	}
	// 120 of 100 are counted: a refund of 30 leaves 90, so 10 remain.
	d, err = st.Refund(ctx, s.at(0), req(30))
	expect(t, "refund 30", d, err, true, 10)
	d, err = st.Refund(ctx, s.at(0), req(1000))
	expect(t, "refund of more than was charged", d, err, true, 100)
	if d.ResetAfter != 0 {
		t.Errorf("after refunding everything = %s, want the initial state (no reset)", fmtDecision(d))
	}
}

// usageEveryAlgorithm checks on one policy of each rate algorithm that a
// debit past the capacity refuses everything until it is refunded, and
// that a refund never leaves a key better than initial.
func (s *suite) usageEveryAlgorithm(t *testing.T) {
	ctx := t.Context()
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(5, slow, 0).Named("tb"),
		sluice.GCRA(5, slow, 0).Named("gcra"),
		sluice.LeakyBucket(5, slow, 0).Named("leaky"),
		sluice.FixedWindow(5, slow).Named("fixed"),
		sluice.SlidingWindow(5, slow).Named("window"),
		sluice.SlidingLog(5, slow).Named("log"),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			st := s.newStore(t)
			req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "k", Cost: cost} }
			d, err := st.Debit(ctx, s.at(0), req(12))
			expect(t, "debit 12 of 5", d, err, false, 0)
			d, err = allow(t, st, s.at(0), req(1))
			expect(t, "Allow(1) owing 7", d, err, false, 0)
			d, err = st.Refund(ctx, s.at(0), req(8))
			expect(t, "refund 8 of 12", d, err, true, 1)
			d, err = allow(t, st, s.at(0), req(0))
			expect(t, "check with 1 left", d, err, true, 1)
			d, err = allow(t, st, s.at(0), req(1))
			expect(t, "Allow(1) with 1 left", d, err, true, 0)
			d, err = allow(t, st, s.at(0), req(0))
			expect(t, "check with none left", d, err, false, 0)
			d, err = st.Refund(ctx, s.at(0), req(100))
			expect(t, "refund of more than was charged", d, err, true, 5)
			d, err = allow(t, st, s.at(0), req(5))
			expect(t, "Allow(5) after the refund", d, err, true, 0)
			if err := st.Reset(ctx, req(0)); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			d, err = peek(t, st, s.at(0), req(5))
			expect(t, "Peek(5) after Reset", d, err, true, 0)
		})
	}
}

// usageSettle checks estimates settled through Release: a higher actual
// cost debits the difference, a lower one refunds it, a lease settles
// once, an unknown usage keeps the estimate, and one lease settles every
// request of an AllowAll by its index.
func (s *suite) usageSettle(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	p := sluice.TokenBucket(100, slow, 0).Named("budget")
	q := sluice.FixedWindow(1000, slow).Named("daily")
	req := func(cost int64) sluice.Request {
		return sluice.Request{Policy: &p, Key: "k", Cost: cost, SettleWithin: time.Hour}
	}
	remaining := func(what string, want int64) {
		t.Helper()
		d, err := peek(t, st, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 0})
		if err != nil || d.Remaining != want {
			t.Errorf("%s: remaining %s, %v; want %d", what, fmtDecision(d), err, want)
		}
	}
	d, err := allow(t, st, s.at(0), req(10))
	expect(t, "Allow estimate 10", d, err, true, 90)
	if d.Lease == "" {
		t.Fatalf("Allow with SettleWithin = %s, want a lease", fmtDecision(d))
	}
	if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{25}); err != nil || !ok {
		t.Fatalf("Release(estimate 10, actual 25) = %v, %v; want true, nil", ok, err)
	}
	remaining("after settling 25", 75)
	if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{1}); err != nil || ok {
		t.Fatalf("Release of a settled lease = %v, %v; want false, nil", ok, err)
	}
	remaining("after settling again", 75)

	d, err = allow(t, st, s.at(0), req(30))
	expect(t, "Allow estimate 30", d, err, true, 45)
	if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{5}); err != nil || !ok {
		t.Fatalf("Release(estimate 30, actual 5) = %v, %v; want true, nil", ok, err)
	}
	remaining("after settling 5 of 30", 70)

	d, err = allow(t, st, s.at(0), req(0))
	expect(t, "Allow estimate 0", d, err, true, 70)
	if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{200}); err != nil || !ok {
		t.Fatalf("Release(estimate 0, actual 200) = %v, %v; want true, nil", ok, err)
	}
	d, err = peek(t, st, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 0})
	expect(t, "check after settling 200 of 70 left", d, err, false, 0)
	if err := st.Reset(ctx, req(0)); err != nil {
		t.Fatalf("Reset: %v", err)
	}

	// No usage, or a negative one: the estimate stands.
	d, err = allow(t, st, s.at(0), req(10))
	expect(t, "Allow estimate 10 after Reset", d, err, true, 90)
	if ok, err := st.Release(ctx, s.at(0), d.Lease, nil); err != nil || !ok {
		t.Fatalf("Release without usage = %v, %v; want true, nil", ok, err)
	}
	remaining("after a release without usage", 90)

	// One lease for two requests, settled by index.
	reqs := []sluice.Request{req(10), {Policy: &q, Key: "k", Cost: 10, SettleWithin: time.Hour}}
	d, _, err = allowAll(t, st, s.at(0), reqs)
	if err != nil || !d.Allowed || d.Lease == "" {
		t.Fatalf("AllowAll of two estimates = %s, %v; want allowed with a lease", fmtDecision(d), err)
	}
	if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{20, 500}); err != nil || !ok {
		t.Fatalf("Release(AllowAll, [20 500]) = %v, %v; want true, nil", ok, err)
	}
	remaining("budget after settling 20 by index", 70)
	d, err = peek(t, st, s.at(0), sluice.Request{Policy: &q, Key: "k", Cost: 0})
	expect(t, "daily after settling 500 by index", d, err, true, 500)

	// A lease whose time to settle has passed keeps its estimate.
	if s.callerTime {
		d, err = allow(t, st, s.at(0), sluice.Request{Policy: &p, Key: "late", Cost: 10, SettleWithin: time.Second})
		expect(t, "Allow estimate 10 to settle within 1s", d, err, true, 90)
		if ok, err := st.Release(ctx, s.at(2*time.Second), d.Lease, []int64{0}); err != nil || ok {
			t.Fatalf("Release after the time to settle = %v, %v; want false, nil", ok, err)
		}
		d, err = peek(t, st, s.at(2*time.Second), sluice.Request{Policy: &p, Key: "late", Cost: 0})
		expect(t, "after a late settlement", d, err, true, 90)
	}

	// Concurrency policies hold units; they are not charged.
	c := sluice.Concurrency(3, slow).Named("conc")
	for name, f := range map[string]func() (sluice.Decision, error){
		"Debit": func() (sluice.Decision, error) {
			return st.Debit(ctx, s.at(0), sluice.Request{Policy: &c, Key: "k", Cost: 1})
		},
		"Refund": func() (sluice.Decision, error) {
			return st.Refund(ctx, s.at(0), sluice.Request{Policy: &c, Key: "k", Cost: 1})
		},
	} {
		if _, err := f(); !errors.Is(err, sluice.ErrNotSupported) {
			t.Errorf("%s under a concurrency policy: error %v, want ErrNotSupported", name, err)
		}
	}
	for _, cost := range []int64{0, -1} {
		if _, err := st.Debit(ctx, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: cost}); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("Debit(cost %d): error %v, want ErrInvalidCost", cost, err)
		}
	}
}

// usageExact settles leases from several goroutines at once: the key is
// charged exactly the sum of the actual costs.
func (s *suite) usageExact(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	p := sluice.FixedWindow(sluice.MaxLimit, slow).Named("sum")
	var wg sync.WaitGroup
	const each = 50
	for g := range s.goroutines {
		wg.Go(func() {
			for i := range each {
				d, err := st.Allow(ctx, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 3, SettleWithin: time.Hour})
				if err != nil || !d.Allowed {
					t.Errorf("Allow estimate 3 = %s, %v", fmtDecision(d), err)
					return
				}
				if ok, err := st.Release(ctx, s.at(0), d.Lease, []int64{int64(g + i%7)}); err != nil || !ok {
					t.Errorf("Release = %v, %v; want true, nil", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	var sum int64
	for g := range s.goroutines {
		for i := range each {
			sum += int64(g + i%7)
		}
	}
	d, err := peek(t, st, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 0})
	expect(t, "after every settlement", d, err, true, sluice.MaxLimit-sum)
}
