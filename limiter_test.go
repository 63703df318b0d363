package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, policies ...sluice.Policy) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(memstore.New(memstore.Options{}), policies...)
	if err != nil {
		t.Fatalf("New(%v) error = %v", policies, err)
	}
	return l
}

func TestNew(t *testing.T) {
	st := memstore.New(memstore.Options{})
	if _, err := sluice.New(st); !errors.Is(err, sluice.ErrNoPolicy) {
		t.Errorf("New(store) error = %v, want ErrNoPolicy", err)
	}
	if _, err := sluice.New(st, sluice.TokenBucket(1, time.Second, 0), sluice.FixedWindow(0, time.Second)); !errors.Is(err, sluice.ErrInvalidPolicy) {
		t.Errorf("New(store, valid, invalid) error = %v, want ErrInvalidPolicy", err)
	}
	if _, err := sluice.New(nil, sluice.TokenBucket(1, time.Second, 0)); err == nil {
		t.Error("New(nil store) error = nil, want an error")
	}
	l, err := sluice.New(st, sluice.TokenBucket(1, time.Second, 0).Named("a"), sluice.SlidingLog(5, time.Minute).Named("b"))
	if err != nil {
		t.Fatalf("New error = %v", err)
	}
	got := l.Policies()
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("Policies() = %v, want a and b in order", got)
	}
	got[0].Name = "changed"
	if l.Policies()[0].Name != "a" {
		t.Error("changing the slice Policies returned changed the limiter")
	}
}

func TestLimiterInvalidCost(t *testing.T) {
	l := newLimiter(t, sluice.TokenBucket(1, time.Second, 0), sluice.FixedWindow(5, time.Minute))
	ctx := t.Context()
	for _, cost := range []int64{-1} {
		if _, err := l.Allow(ctx, "k", cost); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("Allow(cost %d) error = %v, want ErrInvalidCost", cost, err)
		}
		if _, err := l.AllowAt(ctx, t0, "k", cost); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("AllowAt(cost %d) error = %v, want ErrInvalidCost", cost, err)
		}
		if _, err := l.Peek(ctx, "k", cost); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("Peek(cost %d) error = %v, want ErrInvalidCost", cost, err)
		}
		if _, err := l.Wait(ctx, "k", cost); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("Wait(cost %d) error = %v, want ErrInvalidCost", cost, err)
		}
	}
}

// TestLimiterAllOrNothing checks 10 per second AND 25 per hour on one key:
// when one policy denies, the other is not charged.
func TestLimiterAllOrNothing(t *testing.T) {
	ctx := t.Context()
	l := newLimiter(t, sluice.TokenBucket(10, time.Second, 0).Named("second"), sluice.FixedWindow(25, time.Hour).Named("hour"))
	for i, c := range []struct {
		at       time.Duration
		n        int
		admitted int
		last     sluice.Decision
	}{
		{0, 12, 10, sluice.Decision{Limit: 10, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Hour}},
		// The 2 denied at 0 did not charge the hour: 15 are left of it.
		{time.Second, 12, 10, sluice.Decision{Limit: 10, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Hour - time.Second}},
		{2 * time.Second, 12, 5, sluice.Decision{Limit: 25, Remaining: 0, RetryAfter: time.Hour - 2*time.Second, ResetAfter: time.Hour - 2*time.Second}},
		// The 7 denied at 2 s did not charge the second: it has 5 left
		// (refilled to 10 at 3 s), and the hour still denies.
		{3 * time.Second, 1, 0, sluice.Decision{Limit: 25, Remaining: 0, RetryAfter: time.Hour - 3*time.Second, ResetAfter: time.Hour - 3*time.Second}},
		{time.Hour, 11, 10, sluice.Decision{Limit: 10, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Hour}},
	} {
		admitted := 0
		var d sluice.Decision
		for range c.n {
			var err error
			d, err = l.AllowAt(ctx, t0.Add(c.at), "user", 1)
			if err != nil {
				t.Fatalf("step %d: AllowAt error = %v", i, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != c.admitted || d != c.last {
			t.Errorf("step %d: at t0+%v %d requests admitted %d, the last = %+v; want %d and %+v", i, c.at, c.n, admitted, d, c.admitted, c.last)
		}
	}
}

func TestLimiterSetPolicies(t *testing.T) {
	ctx := t.Context()
	keep := sluice.FixedWindow(3, time.Hour).Named("keep")
	l := newLimiter(t, keep)
	for range 2 {
		l.AllowAt(ctx, t0, "k", 1)
	}
	before := l.Policies()
	for _, bad := range [][]sluice.Policy{
		nil,
		{keep, sluice.TokenBucket(0, time.Second, 0)},
		{sluice.Policy{Algorithm: 9, Limit: 1, Period: time.Second}},
	} {
		if err := l.SetPolicies(bad...); err == nil {
			t.Errorf("SetPolicies(%v) error = nil, want an error", bad)
		}
		if got := l.Policies(); !slices.Equal(got, before) {
			t.Errorf("SetPolicies(%v) failed but changed the policies to %v", bad, got)
		}
	}
	if d, _ := l.AllowAt(ctx, t0, "k", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("AllowAt after the failed SetPolicies = %+v, want the third of 3 admitted", d)
	}
	// An unchanged policy keeps its state; a new one starts fresh.
	added := sluice.TokenBucket(1, time.Hour, 0).Named("new")
	if err := l.SetPolicies(keep, added); err != nil {
		t.Fatalf("SetPolicies error = %v", err)
	}
	if d, _ := l.AllowAt(ctx, t0, "k", 1); d.Allowed || d.Limit != 3 {
		t.Errorf("AllowAt after adding a policy = %+v, want denied by keep, which is spent", d)
	}
	if err := l.SetPolicies(added); err != nil {
		t.Fatalf("SetPolicies error = %v", err)
	}
	if d, _ := l.AllowAt(ctx, t0, "k", 1); !d.Allowed || d.Limit != 1 {
		t.Errorf("AllowAt after dropping keep = %+v, want admitted by the fresh new policy", d)
	}
	// A changed policy starts afresh: the same name with other numbers.
	if err := l.SetPolicies(sluice.FixedWindow(4, time.Hour).Named("keep")); err != nil {
		t.Fatalf("SetPolicies error = %v", err)
	}
	if d, _ := l.AllowAt(ctx, t0, "k", 1); !d.Allowed || d.Remaining != 3 {
		t.Errorf("AllowAt under a changed policy = %+v, want a fresh window", d)
	}
}

// TestLimiterSetPoliciesConcurrently changes the policies while other
// goroutines decide, for the race detector; every decision is made under
// one whole set of policies.
func TestLimiterSetPoliciesConcurrently(t *testing.T) {
	sets := [][]sluice.Policy{
		{sluice.TokenBucket(1000, time.Second, 0)},
		{sluice.TokenBucket(1000, time.Second, 0), sluice.FixedWindow(5000, time.Minute)},
		{sluice.SlidingWindow(7000, time.Minute), sluice.GCRA(3000, time.Second, 0), sluice.LeakyBucket(9000, time.Second, 0)},
	}
	limits := map[int64]bool{1000: true, 5000: true, 7000: true, 3000: true, 9000: true}
	l := newLimiter(t, sets[0]...)
	// The setter swaps the policies until the deciders are done; they
	// start once it has swapped them at least once.
	var setter, deciders sync.WaitGroup
	stop := make(chan struct{})
	swapped := make(chan struct{})
	setter.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := l.SetPolicies(sets[i%len(sets)]...)
			if i == 0 {
				close(swapped)
			}
			if err != nil {
				t.Errorf("SetPolicies error = %v", err)
				return
			}
		}
	})
	<-swapped
	for g := range 4 {
		deciders.Go(func() {
			for i := range 2000 {
				d, err := l.Allow(context.Background(), fmt.Sprint(g, i%10), 1)
				if err != nil || !limits[d.Limit] {
					t.Errorf("Allow = %+v, %v", d, err)
					return
				}
				l.Peek(context.Background(), "k", 1)
			}
		})
	}
	deciders.Wait()
	close(stop)
	setter.Wait()
}

func TestLimiterPeek(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		l := newLimiter(t, sluice.TokenBucket(3, time.Hour, 0).Named("a"), sluice.FixedWindow(2, time.Hour).Named("b"))
		for i, want := range []bool{true, true, false} {
			p1, err1 := l.Peek(ctx, "k", 1)
			p2, err2 := l.Peek(ctx, "k", 1)
			d, err := l.Allow(ctx, "k", 1)
			if err1 != nil || err2 != nil || err != nil {
				t.Fatalf("request %d: errors %v, %v, %v", i, err1, err2, err)
			}
			if d.Allowed != want || p1 != d || p2 != d {
				t.Errorf("request %d: Peek twice = %+v, %+v; Allow = %+v (want allowed %v)", i, p1, p2, d, want)
			}
		}
		// Cost above a capacity.
		if d, err := l.Peek(ctx, "k", 3); !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.RetryAfter != sluice.Never {
			t.Errorf("Peek(cost 3) = %+v, %v; want Never and ErrCostExceedsCapacity", d, err)
		}
		one := newLimiter(t, sluice.SlidingLog(2, time.Minute))
		for range 3 {
			if d, err := one.Peek(ctx, "k", 2); err != nil || !d.Allowed || d.Remaining != 0 {
				t.Errorf("Peek(cost 2) = %+v, %v; want allowed with 0 remaining, every time", d, err)
			}
		}
	})
}

// elapsed runs f in a synctest bubble's goroutine and returns how long it
// took in the bubble's fake time.
func elapsed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func TestWait(t *testing.T) {
	t.Run("waits for RetryAfter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.TokenBucket(2, time.Second, 1))
			var d sluice.Decision
			var err error
			took := elapsed(func() {
				for range 3 {
					d, err = l.Wait(t.Context(), "k", 1)
					if err != nil {
						t.Fatalf("Wait error = %v", err)
					}
				}
			})
			if took != time.Second || !d.Allowed {
				t.Errorf("3 Waits under 2/s burst 1 took %v and ended with %+v, want 1s and allowed", took, d)
			}
		})
	})
	t.Run("waits for the leaky bucket's Delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.LeakyBucket(10, time.Second, 5))
			var mu sync.Mutex
			var starts []time.Duration
			start := time.Now()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					d, err := l.Wait(t.Context(), "k", 1)
					if err != nil || !d.Allowed {
						t.Errorf("Wait = %+v, %v", d, err)
					}
					mu.Lock()
					starts = append(starts, time.Since(start))
					mu.Unlock()
				})
			}
			wg.Wait()
			slices.Sort(starts)
			want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
			if !slices.Equal(starts, want) {
				t.Errorf("4 Waits under a leaky bucket of 10/s returned at %v, want %v", starts, want)
			}
		})
	})
	t.Run("waits for both policies", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.TokenBucket(10, time.Second, 0), sluice.FixedWindow(3, time.Minute))
			var took []time.Duration
			start := time.Now()
			for range 4 {
				if _, err := l.Wait(t.Context(), "k", 1); err != nil {
					t.Fatalf("Wait error = %v", err)
				}
				took = append(took, time.Since(start))
			}
			// The fake clock starts at midnight, so the window ends a
			// minute in.
			want := []time.Duration{0, 0, 0, time.Minute}
			if !slices.Equal(took, want) {
				t.Errorf("4 Waits under 10/s and 3/min returned at %v, want %v", took, want)
			}
		})
	})
	for _, c := range []struct {
		name   string
		policy sluice.Policy
		before int64         // the cost spent before the Wait
		cancel time.Duration // when ctx is canceled
		after  time.Duration // when a request passes again, if nothing was charged
	}{
		{"cancel", sluice.TokenBucket(1, time.Hour, 0), 1, time.Minute, time.Hour},
		{"cancel during the leaky bucket's Delay", sluice.LeakyBucket(1, time.Second, 5), 3, time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, c.policy)
				l.Allow(t.Context(), "k", c.before)
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(c.cancel, cancel)
				var err error
				took := elapsed(func() { _, err = l.Wait(ctx, "k", 1) })
				if !errors.Is(err, context.Canceled) || took != c.cancel {
					t.Errorf("Wait canceled after %v = %v after %v, want context.Canceled", c.cancel, err, took)
				}
				if c.after > 0 {
					// Nothing was charged: when the first request has
					// left, one passes.
					time.Sleep(c.after - c.cancel)
					if d, err := l.Allow(t.Context(), "k", 1); err != nil || !d.Allowed {
						t.Errorf("Allow %v after the first = %+v, %v", c.after, d, err)
					}
				}
			})
		})
	}
	for _, c := range []struct {
		name     string
		policies []sluice.Policy
		before   []int64 // costs spent before the Wait
		timeout  time.Duration
		fails    bool
		took     time.Duration
	}{
		{"a retry past the deadline", []sluice.Policy{sluice.TokenBucket(1, time.Hour, 0)}, []int64{1}, time.Minute, true, 0},
		{"a retry within the deadline", []sluice.Policy{sluice.TokenBucket(1, time.Minute, 0)}, []int64{1}, time.Hour, false, time.Minute},
		{"a retry right at the deadline", []sluice.Policy{sluice.TokenBucket(1, time.Minute, 0)}, []int64{1}, time.Minute + time.Millisecond, false, time.Minute},
		{"a window that ends past the deadline", []sluice.Policy{sluice.FixedWindow(1, time.Hour)}, []int64{1}, 59 * time.Minute, true, 0},
		{"one of two policies past the deadline", []sluice.Policy{sluice.TokenBucket(10, time.Second, 0), sluice.SlidingLog(1, time.Hour)}, []int64{1}, time.Minute, true, 0},
		{"a leaky queue past the deadline, with room", []sluice.Policy{sluice.LeakyBucket(1, time.Second, 10)}, []int64{5}, 3 * time.Second, true, 0},
		{"a full leaky queue past the deadline", []sluice.Policy{sluice.LeakyBucket(1, time.Second, 5)}, []int64{5}, 3 * time.Second, true, 0},
		{"a full leaky queue, twice the deadline", []sluice.Policy{sluice.LeakyBucket(1, time.Second, 5)}, []int64{5}, 2500 * time.Millisecond, true, 0},
		{"a full leaky queue past the deadline, with another policy", []sluice.Policy{sluice.TokenBucket(100, time.Second, 0), sluice.LeakyBucket(1, time.Second, 5)}, []int64{5}, 3 * time.Second, true, 0},
		{"a full leaky queue within the deadline", []sluice.Policy{sluice.LeakyBucket(1, time.Second, 5)}, []int64{5}, 6 * time.Second, false, 5 * time.Second},
		{"a leaky queue within the deadline", []sluice.Policy{sluice.LeakyBucket(1, time.Second, 5)}, []int64{2}, 3 * time.Second, false, 2 * time.Second},
	} {
		t.Run("deadline: "+c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, c.policies...)
				for _, cost := range c.before {
					if d, err := l.Allow(t.Context(), "k", cost); err != nil || !d.Allowed {
						t.Fatalf("Allow(cost %d) = %+v, %v", cost, d, err)
					}
				}
				ctx, cancel := context.WithTimeout(t.Context(), c.timeout)
				defer cancel()
				var d sluice.Decision
				var err error
				took := elapsed(func() { d, err = l.Wait(ctx, "k", 1) })
				switch {
				case c.fails && (!errors.Is(err, context.DeadlineExceeded) || d.Allowed):
					t.Errorf("Wait = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
				case !c.fails && (err != nil || !d.Allowed):
					t.Errorf("Wait = %+v, %v; want allowed", d, err)
				}
				if took != c.took {
					t.Errorf("Wait took %v, want %v", took, c.took)
				}
			})
		})
	}
	t.Run("deadline already passed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.TokenBucket(1, time.Second, 0))
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			defer cancel()
			if _, err := l.Wait(ctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Wait with a past deadline error = %v, want context.DeadlineExceeded", err)
			}
			if d, _ := l.Peek(t.Context(), "k", 1); d.Remaining != 0 || !d.Allowed {
				t.Errorf("Peek after the failed Wait = %+v, want the bucket untouched", d)
			}
		})
	})
	t.Run("cost above the capacity", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.TokenBucket(10, time.Second, 5))
			var d sluice.Decision
			var err error
			took := elapsed(func() { d, err = l.Wait(t.Context(), "k", 6) })
			if !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.RetryAfter != sluice.Never || took != 0 {
				t.Errorf("Wait(cost 6, burst 5) = %+v, %v after %v; want Never and ErrCostExceedsCapacity at once", d, err, took)
			}
		})
	})
}

// TestWaitOnTheStoresClock: Wait decides, reads its deadline and sleeps on
// the store's clock, so that a fake one drives it without real time and it
// agrees with AllowAt at that clock's Now.
func TestWaitOnTheStoresClock(t *testing.T) {
	// An hour ahead of the system clock: a deadline read on the system
	// clock would leave an hour to wait.
	clk := teststore.NewClock(time.Now().Add(time.Hour).Truncate(time.Second))
	start := clk.Now()
	l, err := sluice.New(memstore.New(memstore.Options{Now: clk.Now, Sleep: clk.Sleep}), sluice.TokenBucket(2, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := l.Wait(t.Context(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("Wait %d = %+v, %v; want allowed", i, d, err)
		}
	}
	if got := clk.Now().Sub(start); got != time.Second {
		t.Errorf("3 Waits under 2/s burst 1 advanced the store's clock by %v, want 1s", got)
	}
	if d, err := l.AllowAt(t.Context(), clk.Now(), "k", 1); err != nil || d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Errorf("AllowAt(the clock's now) after the Waits = %+v, %v; want refused, retry in 500ms", d, err)
	}
	ctx, cancel := context.WithDeadline(t.Context(), clk.Now().Add(400*time.Millisecond))
	defer cancel()
	before := clk.Now()
	if d, err := l.Wait(ctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
		t.Errorf("Wait with 400ms left on the store's clock = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
	}
	if clk.Now() != before {
		t.Errorf("the failed Wait slept %v, want none", clk.Now().Sub(before))
	}
}

func TestWaitConcurrency(t *testing.T) {
	t.Run("polls for a released slot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.Concurrency(1, 10*time.Second))
			first, err := l.Allow(t.Context(), "k", 1)
			if err != nil || !first.Allowed || first.Lease == "" {
				t.Fatalf("Allow = %+v, %v; want a lease", first, err)
			}
			const release = 100 * time.Millisecond
			go func() {
				time.Sleep(release) // the bubble's clock: no real time passes
				if ok, err := l.Release(context.Background(), first.Lease); !ok || err != nil {
					t.Errorf("Release = %v, %v", ok, err)
				}
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var d sluice.Decision
			took := elapsed(func() { d, err = l.Wait(ctx, "k", 1) })
			if err != nil || !d.Allowed || d.Lease == "" {
				t.Fatalf("Wait = %+v, %v; want a lease", d, err)
			}
			if took <= release || took > release+sluice.LeasePoll {
				t.Errorf("Wait took %v after a release at %v, want at most %v more (its RetryAfter was 10s)", took, release, sluice.LeasePoll)
			}
		})
	})
	t.Run("fails at the deadline, not at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.Concurrency(1, 10*time.Second))
			if d, err := l.Allow(t.Context(), "k", 1); err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v", d, err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			var err error
			took := elapsed(func() { _, err = l.Wait(ctx, "k", 1) })
			if !errors.Is(err, context.DeadlineExceeded) || took != 2*time.Second {
				t.Errorf("Wait with nothing released = %v after %v, want DeadlineExceeded after 2s", err, took)
			}
		})
	})
	t.Run("a rate refusal sets the earliest try", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, sluice.Concurrency(1, 10*time.Second).Named("c"), sluice.TokenBucket(1, time.Second, 1).Named("r"))
			first, err := l.Allow(t.Context(), "k", 1)
			if err != nil || !first.Allowed {
				t.Fatalf("Allow = %+v, %v", first, err)
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				l.Release(context.Background(), first.Lease)
			}()
			var d sluice.Decision
			took := elapsed(func() { d, err = l.Wait(t.Context(), "k", 1) })
			if err != nil || !d.Allowed || took != time.Second {
				t.Errorf("Wait = %+v, %v after %v; want allowed after the rate's 1s", d, err, took)
			}
		})
	})
}

// TestWaitConcurrencyAndRatePastDeadline checks that Wait fails at once,
// without sleeping, when a concurrency policy and a rate policy both
// refuse and the rate's exact retry time passes the deadline: no release
// can help before then.
func TestWaitConcurrencyAndRatePastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := sluice.New(memstore.New(memstore.Options{}), sluice.Concurrency(1, time.Hour), sluice.TokenBucket(1, time.Hour, 1))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := l.Allow(t.Context(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err = l.Wait(ctx, "k", 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("Wait slept %v before failing, want no sleep", waited)
		}
	})
}

// TestLimiterUsage checks costs known afterwards through a Limiter of a
// token budget and a request rate: an estimate settled higher and lower,
// a settlement made once, debits into debt, refunds, checks and Reset.
func TestLimiterUsage(t *testing.T) {
	tokens := sluice.FixedWindow(1000, time.Hour).Named("tokens")
	calls := sluice.TokenBucket(100, time.Hour, 0).Named("calls")
	l := newLimiter(t, tokens, calls)
	ctx := t.Context()

	d, err := l.AllowEstimate(ctx, "k", 100, time.Minute)
	if err != nil || !d.Allowed || d.Lease == "" || d.Remaining != 0 {
		t.Fatalf("AllowEstimate(100) = %+v, %v; want allowed with a lease, 0 calls remaining", d, err)
	}
	if ok, err := l.Settle(ctx, d.Lease, 400); err != nil || !ok {
		t.Fatalf("Settle(400) = %v, %v; want true, nil", ok, err)
	}
	if ok, err := l.Settle(ctx, d.Lease, 0); err != nil || ok {
		t.Fatalf("Settle again = %v, %v; want false, nil", ok, err)
	}
	// Both policies were settled at 400: tokens 600 left, calls 0 (a debt).
	if d, err := l.Peek(ctx, "k", 0); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Peek(0) after settling 400 = %+v, %v; want refused, 0 remaining (calls in debt)", d, err)
	}
	if d, err := l.Refund(ctx, "k", 350); err != nil || !d.Allowed || d.Remaining != 50 {
		t.Fatalf("Refund(350) = %+v, %v; want allowed, 50 remaining (calls)", d, err)
	}
	if d, err := l.Debit(ctx, "k", 900); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("Debit(900) = %+v, %v; want not fitted, 0 remaining", d, err)
	}
	if d, err := l.Allow(ctx, "k", 0); err != nil || d.Allowed {
		t.Fatalf("Allow(0) in debt = %+v, %v; want refused", d, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if d, err := l.Allow(ctx, "k", 0); err != nil || !d.Allowed || d.Remaining != 100 {
		t.Fatalf("Allow(0) after Reset = %+v, %v; want allowed, 100 remaining", d, err)
	}
	if _, err := l.AllowEstimate(ctx, "k", 1, 0); err == nil {
		t.Errorf("AllowEstimate within 0: nil error, want one")
	}
	if _, err := l.Settle(ctx, "m1.nonsense", 1); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("Settle(a malformed lease) error = %v, want ErrInvalidLease", err)
	}
}
