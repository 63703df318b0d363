package sluicetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// sameShape reports whether two decisions that need not agree on times
// (taken on a store's own clock) agree on everything else.
func sameShape(a, b sluice.Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining && a.Degraded == b.Degraded
}

// same compares two decisions fully with caller time, by shape without.
func (s *suite) same(a, b sluice.Decision) bool {
	if s.callerTime {
		return a == b
	}
	return sameShape(a, b)
}

// expect checks that d has the given verdict and remaining units.
func expect(t *testing.T, what string, d sluice.Decision, err error, allowed bool, remaining int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s error = %v", what, err)
	}
	if d.Allowed != allowed || d.Remaining != remaining {
		verdict := "denied"
		if allowed {
			verdict = "allowed"
		}
		t.Errorf("%s = %s, want %s with remaining %d", what, fmtDecision(d), verdict, remaining)
	}
}

// step is a request's cost and the decision expected for it.
type step struct {
	cost      int64
	allowed   bool
	remaining int64
}

// weightedCost checks that requests cost their Cost: under a capacity of
// 10, 7 passes, 4 does not fit the 3 left, 3 does, and then 1 does not.
func (s *suite) weightedCost(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 10, slow)
		for i, c := range []step{{7, true, 3}, {4, false, 3}, {3, true, 0}, {1, false, 0}} {
			d, err := allow(t, st, s.at(0), sluice.Request{Policy: &p, Key: "weighted", Cost: c.cost})
			expect(t, fmt.Sprintf("request %d: Allow(cost %d)", i, c.cost), d, err, c.allowed, c.remaining)
		}
	})
}

// costExceedsCapacity checks that a cost above the capacity (the burst for
// the token-bucket family, even below the limit) is refused with Never and
// ErrCostExceedsCapacity by Allow, Peek and AllowAll, and charges nothing.
func (s *suite) costExceedsCapacity(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 5, slow)
		if a.HasBurst() {
			p.Limit, p.Burst = 10, 5
		}
		other := sluice.TokenBucket(4, slow, 0).Named("other")
		big := sluice.Request{Policy: &p, Key: "k", Cost: 6}
		small := sluice.Request{Policy: &other, Key: "k", Cost: 1}
		check := func(op string, d sluice.Decision, err error) {
			t.Helper()
			if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
				t.Errorf("%s(cost 6, capacity 5) error = %v, want ErrCostExceedsCapacity", op, err)
			}
			if d.Allowed || d.RetryAfter != sluice.Never {
				t.Errorf("%s(cost 6, capacity 5) = %s, want denied with RetryAfter Never", op, fmtDecision(d))
			}
		}
		d, err := allow(t, st, s.at(0), big)
		check("Allow", d, err)
		d, err = peek(t, st, s.at(0), big)
		check("Peek", d, err)
		d, _, err = allowAll(t, st, s.at(0), []sluice.Request{big})
		check("AllowAll", d, err)
		d, _, err = allowAll(t, st, s.at(0), []sluice.Request{small, big})
		check("AllowAll(other, big)", d, err)
		d, _, err = allowAll(t, st, s.at(0), []sluice.Request{big, small})
		check("AllowAll(big, other)", d, err)

		// Nothing was charged: the whole capacity is still there, and the
		// other policy lost nothing.
		d, err = allow(t, st, s.at(0), sluice.Request{Policy: &p, Key: "k", Cost: 5})
		expect(t, "Allow(cost 5) after the refusals", d, err, true, 0)
		d, err = peek(t, st, s.at(0), small)
		expect(t, "Peek(other policy) after the refusals", d, err, true, 3)
	})
}

// invalidInput checks that a bad cost, a bad policy or a bad AllowAll call
// is an error that says so, never a panic, and charges nothing.
func (s *suite) invalidInput(t *testing.T) {
	good := sluice.TokenBucket(3, slow, 0).Named("good")
	type call struct {
		name string
		req  sluice.Request
		want error
	}
	var calls []call
	for _, c := range []int64{-1, math.MinInt64} {
		calls = append(calls, call{fmt.Sprintf("cost %d", c), sluice.Request{Policy: &good, Key: "k", Cost: c}, sluice.ErrInvalidCost})
	}
	for _, p := range []struct {
		name   string
		policy sluice.Policy
	}{
		{"zero policy", sluice.Policy{}},
		{"limit 0", sluice.TokenBucket(0, time.Second, 1)},
		{"negative limit", sluice.FixedWindow(-1, time.Second)},
		{"limit above MaxLimit", sluice.SlidingLog(sluice.MaxLimit+1, time.Second)},
		{"period 0", sluice.GCRA(1, 0, 0)},
		{"negative period", sluice.SlidingWindow(1, -time.Second)},
		{"period below a microsecond", sluice.LeakyBucket(1, 500*time.Nanosecond, 0)},
		{"period not whole microseconds", sluice.TokenBucket(1, time.Second+time.Nanosecond, 0)},
		{"period above MaxPeriod", sluice.TokenBucket(1, sluice.MaxPeriod+time.Second, 0)},
		{"negative burst", sluice.TokenBucket(1, time.Second, -1)},
		{"window with a burst", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Period: time.Second, Burst: 6}},
		{"unknown algorithm", sluice.Policy{Algorithm: 200, Limit: 1, Period: time.Second}},
		{"token bucket on a calendar", sluice.Policy{Algorithm: sluice.TokenBucketAlgorithm, Limit: 5, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth}}},
		{"calendar window with a period", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Period: time.Hour, Calendar: sluice.Calendar{Unit: sluice.CalendarDay}}},
		{"unknown calendar unit", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Calendar: sluice.Calendar{Unit: 99}}},
		{"sunday weeks of a month", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Calendar: sluice.Calendar{Unit: sluice.CalendarMonth, WeekStartsSunday: true}}},
	} {
		calls = append(calls, call{p.name, sluice.Request{Policy: &p.policy, Key: "k", Cost: 1}, sluice.ErrInvalidPolicy})
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			st := s.newStore(t)
			if _, err := allow(t, st, s.at(0), c.req); !errors.Is(err, c.want) {
				t.Errorf("Allow(%s) error = %v, want %v", fmtRequest(c.req), err, c.want)
			}
			if _, err := peek(t, st, s.at(0), c.req); !errors.Is(err, c.want) {
				t.Errorf("Peek(%s) error = %v, want %v", fmtRequest(c.req), err, c.want)
			}
			ok := sluice.Request{Policy: &good, Key: "k", Cost: 1}
			if _, _, err := allowAll(t, st, s.at(0), []sluice.Request{ok, c.req}); !errors.Is(err, c.want) {
				t.Errorf("AllowAll(good, %s) error = %v, want %v", fmtRequest(c.req), err, c.want)
			}
			d, err := peek(t, st, s.at(0), ok)
			expect(t, "Peek(good) after the AllowAll that failed", d, err, true, 2)
		})
	}
	t.Run("AllowAll with no requests", func(t *testing.T) {
		st := s.newStore(t)
		for _, reqs := range [][]sluice.Request{nil, {}} {
			err := noPanic(t, "AllowAll", reqs, func() error {
				_, err := st.AllowAll(t.Context(), s.at(0), reqs, nil)
				return err
			})
			if err == nil {
				t.Errorf("AllowAll(%#v) error = nil, want an error", reqs)
			}
		}
	})
	t.Run("AllowAll with out of the wrong length", func(t *testing.T) {
		st := s.newStore(t)
		reqs := []sluice.Request{{Policy: &good, Key: "k", Cost: 1}, {Policy: new(good.Named("second")), Key: "k", Cost: 1}}
		for _, n := range []int{0, 1, 3} {
			out := make([]sluice.Decision, n)
			err := noPanic(t, "AllowAll", reqs, func() error {
				_, err := st.AllowAll(t.Context(), s.at(0), reqs, out)
				return err
			})
			if err == nil {
				t.Errorf("AllowAll(2 requests, out of length %d) error = nil, want an error", n)
			}
		}
		d, err := peek(t, st, s.at(0), reqs[0])
		expect(t, "Peek after the AllowAll calls that failed", d, err, true, 2)
	})
}

// allowAll checks that AllowAll is all-or-nothing and reports each
// request's decision and their combination.
func (s *suite) allowAll(t *testing.T) {
	t.Run("AllOrNothing", s.allOrNothing)
	t.Run("PerSecondAndPerHour", s.perSecondAndPerHour)
	t.Run("Duplicates", s.duplicates)
	t.Run("OneRequestDecidesAsAllow", s.oneRequestDecidesAsAllow)
}

// allOrNothing checks that when one policy denies, none is charged, and
// what each request reports.
func (s *suite) allOrNothing(t *testing.T) {
	st := s.newStore(t)
	short := sluice.TokenBucket(10, slow, 0).Named("short")
	long := sluice.FixedWindow(25, slow).Named("long")
	reqs := []sluice.Request{{Policy: &short, Key: "k", Cost: 1}, {Policy: &long, Key: "k", Cost: 1}}
	for i := range 10 {
		d, out, err := allowAll(t, st, s.at(0), reqs)
		expect(t, fmt.Sprintf("request %d: AllowAll", i), d, err, true, int64(9-i))
		expect(t, fmt.Sprintf("request %d: out[0]", i), out[0], nil, true, int64(9-i))
		expect(t, fmt.Sprintf("request %d: out[1]", i), out[1], nil, true, int64(24-i))
		checkCombined(t, d, out)
	}
	// short denies: long must not be charged.
	d, out, err := allowAll(t, st, s.at(0), reqs)
	expect(t, "11th AllowAll", d, err, false, 0)
	expect(t, "11th AllowAll: out[0]", out[0], nil, false, 0)
	expect(t, "11th AllowAll: out[1], not charged", out[1], nil, true, 15)
	checkUncharged(t, "11th AllowAll: out[1]", out[1])
	checkCombined(t, d, out)
	d, err = peek(t, st, s.at(0), reqs[1])
	expect(t, "Peek(long) after the 11th AllowAll", d, err, true, 14)

	// With the capacities the other way round, long denies and short
	// must not be charged.
	wide := sluice.TokenBucket(30, slow, 0).Named("short")
	reqs = []sluice.Request{{Policy: &wide, Key: "k2", Cost: 1}, {Policy: &long, Key: "k2", Cost: 1}}
	s.admitAll(t, st, "k2", reqs, 25)
	d, out, err = allowAll(t, st, s.at(0), reqs)
	expect(t, "26th AllowAll", d, err, false, 0)
	expect(t, "26th AllowAll: out[0], not charged", out[0], nil, true, 5)
	checkUncharged(t, "26th AllowAll: out[0]", out[0])
	expect(t, "26th AllowAll: out[1]", out[1], nil, false, 0)
	checkCombined(t, d, out)
	if d.Limit != 25 {
		t.Errorf("26th AllowAll = %s, want the Limit 25 of the policy that denied", fmtDecision(d))
	}
	d, err = peek(t, st, s.at(0), reqs[0])
	expect(t, "Peek(short) after the 26th AllowAll", d, err, true, 4)

	// A leaky bucket that would have queued the request reports no
	// Delay when another policy denies: nothing was queued.
	leaky := sluice.LeakyBucket(10, slow, 0).Named("queue")
	reqs = []sluice.Request{{Policy: &leaky, Key: "k3", Cost: 1}, {Policy: new(sluice.FixedWindow(2, slow)), Key: "k3", Cost: 1}}
	s.admitAll(t, st, "k3", reqs, 2)
	d, out, err = allowAll(t, st, s.at(0), reqs)
	expect(t, "3rd AllowAll(leaky, fixed)", d, err, false, 0)
	expect(t, "3rd AllowAll(leaky, fixed): out[0], not charged", out[0], nil, true, 8)
	checkUncharged(t, "3rd AllowAll(leaky, fixed): out[0]", out[0])
	checkCombined(t, d, out)
}

// admitAll calls AllowAll(reqs) n times at s.at(0) and checks that each
// call is admitted with n-1, n-2, ..., 0 remaining.
func (s *suite) admitAll(t *testing.T, st sluice.Store, what string, reqs []sluice.Request, n int) {
	t.Helper()
	for i := range n {
		d, _, err := allowAll(t, st, s.at(0), reqs)
		expect(t, fmt.Sprintf("%s request %d: AllowAll", what, i), d, err, true, int64(n-1-i))
	}
}

// perSecondAndPerHour replays a per-second and a per-hour limit on one key
// over an hour.
func (s *suite) perSecondAndPerHour(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	second := sluice.TokenBucket(10, time.Second, 0).Named("second")
	hour := sluice.FixedWindow(25, time.Hour).Named("hour")
	reqs := []sluice.Request{{Policy: &second, Key: "k", Cost: 1}, {Policy: &hour, Key: "k", Cost: 1}}
	type want struct {
		allowed    bool
		limit      int64
		remaining  int64
		retryAfter time.Duration
		out        [2]int64 // remaining of each request
	}
	for i, c := range []struct {
		at   time.Duration
		n    int  // requests, all with this outcome
		want want // of the last one
	}{
		{0, 10, want{true, 10, 0, 0, [2]int64{0, 15}}},
		{0, 1, want{false, 10, 0, 100 * ms, [2]int64{0, 15}}},
		{1 * sec, 10, want{true, 10, 0, 0, [2]int64{0, 5}}},
		{2 * sec, 5, want{true, 25, 0, 0, [2]int64{5, 0}}},
		// The hour is spent; the second must not lose its 5.
		{2 * sec, 1, want{false, 25, 0, time.Hour - 2*sec, [2]int64{5, 0}}},
		{3 * sec, 1, want{false, 25, 0, time.Hour - 3*sec, [2]int64{10, 0}}},
		{time.Hour, 1, want{true, 10, 9, 0, [2]int64{9, 24}}},
	} {
		var d sluice.Decision
		var out []sluice.Decision
		for range c.n {
			var err error
			d, out, err = allowAll(t, st, t0.Add(c.at), reqs)
			if err != nil {
				t.Fatalf("step %d: AllowAll(%s) error = %v", i, fmtAt(t0.Add(c.at)), err)
			}
		}
		got := want{d.Allowed, d.Limit, d.Remaining, d.RetryAfter, [2]int64{out[0].Remaining, out[1].Remaining}}
		if got != c.want {
			t.Errorf("step %d: AllowAll(%s) = %+v, want %+v", i, fmtAt(t0.Add(c.at)), got, c.want)
		}
		checkCombined(t, d, out)
	}
}

// duplicates checks that requests for one policy and key are charged in
// order, as one request of their summed cost.
func (s *suite) duplicates(t *testing.T) {
	st := s.newStore(t)
	p := sluice.TokenBucket(5, slow, 0)
	two := func(a, b int64) []sluice.Request {
		return []sluice.Request{{Policy: &p, Key: "d", Cost: a}, {Policy: &p, Key: "d", Cost: b}}
	}
	d, out, err := allowAll(t, st, s.at(0), two(2, 2))
	expect(t, "AllowAll(cost 2, cost 2)", d, err, true, 1)
	expect(t, "AllowAll(cost 2, cost 2): out[0]", out[0], nil, true, 3)
	expect(t, "AllowAll(cost 2, cost 2): out[1]", out[1], nil, true, 1)
	d, _, err = allowAll(t, st, s.at(0), two(1, 1))
	expect(t, "AllowAll(cost 1, cost 1) with 1 left", d, err, false, 1)
	d, _, err = allowAll(t, st, s.at(0), two(3, 3))
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.RetryAfter != sluice.Never {
		t.Errorf("AllowAll(cost 3, cost 3) under capacity 5 = %s, %v; want RetryAfter Never and ErrCostExceedsCapacity", fmtDecision(d), err)
	}
	d, err = allow(t, st, s.at(0), sluice.Request{Policy: &p, Key: "d", Cost: 1})
	expect(t, "Allow(cost 1) after the denied duplicates", d, err, true, 0)

	// A leaky bucket's MaxDelay bounds the wait of the summed request
	// (none here: the queue is empty), not the second request's wait
	// behind the first.
	leaky := sluice.Request{Policy: new(sluice.LeakyBucket(10, slow, 0)), Key: "d", Cost: 1, MaxDelay: 24 * time.Hour}
	d, out, err = allowAll(t, st, s.at(0), []sluice.Request{leaky, leaky})
	expect(t, "AllowAll(leaky, leaky) with MaxDelay", d, err, true, 8)
	expect(t, "AllowAll(leaky, leaky) with MaxDelay: out[1]", out[1], nil, true, 8)
	leaky.MaxDelay = 0
	d, err = peek(t, st, s.at(0), leaky)
	expect(t, "Peek(leaky) after both were admitted", d, err, true, 7)
}

// oneRequestDecidesAsAllow checks that AllowAll of one request decides as
// Allow.
func (s *suite) oneRequestDecidesAsAllow(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		byAllow, byAll := s.newStore(t), s.newStore(t)
		p := policyOf(a, 4, slow)
		for i, cost := range []int64{1, 2, 2, 1, 1, 5} {
			req := sluice.Request{Policy: &p, Key: "k", Cost: cost}
			want, wantErr := allow(t, byAllow, s.at(0), req)
			got, out, err := allowAll(t, byAll, s.at(0), []sluice.Request{req})
			if (err == nil) != (wantErr == nil) || !s.same(got, want) {
				t.Errorf("request %d: AllowAll(cost %d) = %s, %v; Allow = %s, %v", i, cost, fmtDecision(got), err, fmtDecision(want), wantErr)
			}
			if err == nil && !s.same(out[0], want) {
				t.Errorf("request %d: AllowAll(cost %d) out[0] = %s; Allow = %s", i, cost, fmtDecision(out[0]), fmtDecision(want))
			}
		}
	})
}

// checkCombined checks that d combines out as the Store contract says.
func checkCombined(t *testing.T, d sluice.Decision, out []sluice.Decision) {
	t.Helper()
	allowed := true
	var retry, reset, delay time.Duration
	for _, o := range out {
		allowed = allowed && o.Allowed
		if !o.Allowed {
			retry = max(retry, o.RetryAfter)
		}
		reset = max(reset, o.ResetAfter)
		delay = max(delay, o.Delay)
	}
	if d.Allowed != allowed || d.RetryAfter != retry || d.ResetAfter != reset || d.Delay != delay {
		t.Errorf("AllowAll = %s, which does not combine its requests' decisions %v", fmtDecision(d), fmtDecisions(out))
	}
	deciders := 0
	for _, o := range out {
		if o.Allowed == d.Allowed && o.Limit == d.Limit && o.Remaining == d.Remaining {
			deciders++
		}
	}
	if deciders == 0 {
		t.Errorf("AllowAll = %s: its Limit and Remaining are no request's, in %v", fmtDecision(d), fmtDecisions(out))
	}
}

// checkUncharged checks the decision of a request that would have passed in
// a denied AllowAll: it reports the state as it stays, with no wait.
func checkUncharged(t *testing.T, what string, d sluice.Decision) {
	t.Helper()
	if d.RetryAfter != 0 || d.Delay != 0 {
		t.Errorf("%s = %s, want no RetryAfter and no Delay for a request that was not charged", what, fmtDecision(d))
	}
}

func fmtDecisions(ds []sluice.Decision) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmtDecision(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// peek checks that Peek decides as Allow would and charges nothing.
func (s *suite) peek(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 3, slow)
		for i, c := range []step{
			{1, true, 2},
			{1, true, 1},
			{2, false, 1},
			{1, true, 0},
			{1, false, 0},
		} {
			req := sluice.Request{Policy: &p, Key: "peek", Cost: c.cost}
			p1, err1 := peek(t, st, s.at(0), req)
			p2, err2 := peek(t, st, s.at(0), req)
			d, err := allow(t, st, s.at(0), req)
			expect(t, fmt.Sprintf("request %d: Allow(cost %d)", i, c.cost), d, err, c.allowed, c.remaining)
			if err1 != nil || err2 != nil || !s.same(p1, d) || !s.same(p2, d) {
				t.Errorf("request %d: Peek(cost %d) twice = %s, %s (errors %v, %v); the Allow after them = %s",
					i, c.cost, fmtDecision(p1), fmtDecision(p2), err1, err2, fmtDecision(d))
			}
		}
	})
}

// independentKeys checks that keys do not share state.
func (s *suite) independentKeys(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 2, slow)
		for round, c := range []step{{1, true, 1}, {1, true, 0}, {1, false, 0}} {
			for k := range 10 {
				req := sluice.Request{Policy: &p, Key: fmt.Sprintf("key-%d", k), Cost: c.cost}
				d, err := allow(t, st, s.at(0), req)
				expect(t, fmt.Sprintf("round %d: Allow(%q)", round, req.Key), d, err, c.allowed, c.remaining)
			}
		}
	})
}

// awkwardKeys are keys that a store building backend keys out of user text
// might confuse: separators, braces (Redis Cluster hash tags), NUL, newline,
// invalid UTF-8, the empty key and 1 MB keys that differ only at one end.
func awkwardKeys() []string {
	long := strings.Repeat("k", 1<<20)
	return []string{
		"", " ", "a", "A", "a\n", "a\r\n", "a\x00", "a\x00b", "a\x00c", "\x00", "\n",
		"{a}", "{a}b", "{a}c", "a}", "{", "}", "{}", "a:b", "a:", ":b", ":", "a|b", "a b",
		"*", "a*", "\xff\xfe", "héllo", "hello", "日本",
		long, long + "x", "x" + long, long[1:],
	}
}

// arbitraryKeys checks that awkward keys do not collide.
func (s *suite) arbitraryKeys(t *testing.T) {
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 1, slow)
		keys := awkwardKeys()
		for round, allowed := range []bool{true, false} {
			for _, k := range keys {
				d, err := allow(t, st, s.at(0), sluice.Request{Policy: &p, Key: k, Cost: 1})
				expect(t, fmt.Sprintf("round %d: Allow(%s)", round, fmtRequest(sluice.Request{Key: k, Cost: 1, Policy: &p})), d, err, allowed, 0)
			}
		}
	})
}

// distinctPolicies checks that policies that differ in name, algorithm or
// any number keep separate state for the same key, including names and
// keys whose concatenations are equal.
func (s *suite) distinctPolicies(t *testing.T) {
	st := s.newStore(t)
	type pair struct {
		p   sluice.Policy
		key string
	}
	base := sluice.TokenBucket(2, slow, 1)
	pairs := []pair{
		{base, "k"},
		{base.Named("a"), "k"},
		{base.Named("b"), "k"},
		{base.Named("k"), ""},
		{sluice.TokenBucket(3, slow, 1), "k"},
		{sluice.TokenBucket(2, 2*slow, 1), "k"},
		{sluice.TokenBucket(2, slow, 2), "k"},
		{sluice.GCRA(2, slow, 1), "k"},
		{sluice.LeakyBucket(2, slow, 1), "k"},
		{sluice.FixedWindow(2, slow), "k"},
		{sluice.SlidingLog(2, slow), "k"},
		{sluice.SlidingWindow(2, slow), "k"},
		{sluice.FixedWindow(1, slow), "k"},
		{sluice.FixedCalendarWindow(2, sluice.Calendar{Unit: sluice.CalendarYear}), "k"},
		{sluice.FixedCalendarWindow(2, sluice.Calendar{Unit: sluice.CalendarYear, Zone: time.FixedZone("UTC+5", 5*3600)}), "k"},
		{sluice.SlidingCalendarWindow(2, sluice.Calendar{Unit: sluice.CalendarYear}), "k"},
		{base.Named("a:b"), "c"},
		{base.Named("a"), "b:c"},
		{base.Named("a:b:c"), ""},
		{base.Named(""), "a:b:c"},
		{base.Named("{x}"), "y"},
		{base.Named("{x}y"), ""},
		{base.Named("x\x00"), "y"},
		{base.Named("x"), "\x00y"},
	}
	for round, allowed := range []bool{true, false} {
		for i, pr := range pairs {
			req := sluice.Request{Policy: &pr.p, Key: pr.key, Cost: pr.p.Capacity()}
			if !allowed {
				req.Cost = 1
			}
			d, err := allow(t, st, s.at(0), req)
			expect(t, fmt.Sprintf("round %d, pair %d: Allow(%s)", round, i, fmtRequest(req)), d, err, allowed, 0)
		}
	}
}

// concurrency checks that goroutines hammering one key get exactly the
// limit admitted, for every algorithm and for AllowAll over two policies.
func (s *suite) concurrency(t *testing.T) {
	const limit = 100
	attempts := (3*limit + s.goroutines - 1) / s.goroutines
	hammer := func(t *testing.T, decide func() (sluice.Decision, error)) int64 {
		t.Helper()
		var admitted, failed atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range s.goroutines {
			wg.Go(func() {
				<-start
				for range attempts {
					d, err := decide()
					switch {
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					case d.Allowed:
						admitted.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d of %d calls failed, the first with %v", n, s.goroutines*attempts, firstErr.Load())
		}
		return admitted.Load()
	}
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		req := sluice.Request{Policy: new(policyOf(a, limit, slow)), Key: "hot", Cost: 1}
		got := hammer(t, func() (sluice.Decision, error) { return st.Allow(t.Context(), s.at(0), req) })
		if got != limit {
			t.Errorf("%d goroutines × %d Allow calls admitted %d under %v, want %d", s.goroutines, attempts, got, req.Policy, limit)
		}
		d, err := peek(t, st, s.at(0), req)
		expect(t, "Peek after the hammering", d, err, false, 0)
	})
	t.Run("AllowAll", func(t *testing.T) {
		st := s.newStore(t)
		reqs := []sluice.Request{
			{Policy: new(sluice.TokenBucket(limit, slow, 0)), Key: "hot", Cost: 1},
			{Policy: new(sluice.FixedWindow(60, slow)), Key: "hot", Cost: 1},
		}
		got := hammer(t, func() (sluice.Decision, error) {
			return st.AllowAll(t.Context(), s.at(0), reqs, make([]sluice.Decision, len(reqs)))
		})
		if got != 60 {
			t.Errorf("%d goroutines × %d AllowAll calls admitted %d, want 60", s.goroutines, attempts, got)
		}
		// The token bucket was charged exactly for the 60 admitted.
		d, err := peek(t, st, s.at(0), reqs[0])
		expect(t, "Peek(token bucket) after the hammering", d, err, true, limit-60-1)
	})
}

// clockBackwards checks that a time before one the key has already seen is
// treated as no time passing: the decisions are those of the same requests
// at the latest time seen, field by field.
func (s *suite) clockBackwards(t *testing.T) {
	s.needCallerTime(t)
	times := []time.Duration{0, 30 * sec, 10 * sec, 65 * sec, 61 * sec, 59 * sec, 125 * sec, 0, 130 * sec, 129*sec + 999*ms}
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		back, clamped := s.newStore(t), s.newStore(t)
		p := policyOf(a, 3, time.Minute)
		var latest time.Duration
		for i, at := range times {
			latest = max(latest, at)
			req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
			for _, op := range []string{"Peek", "Allow"} {
				f := allow
				if op == "Peek" {
					f = peek
				}
				got, err := f(t, back, t0.Add(at), req)
				want, wantErr := f(t, clamped, t0.Add(latest), req)
				if err != nil || wantErr != nil {
					t.Fatalf("request %d: errors %v and %v", i, err, wantErr)
				}
				if got != want {
					t.Errorf("request %d: %s(%s) after %s = %s, want %s as at %s",
						i, op, fmtAt(t0.Add(at)), fmtAt(t0.Add(latest)), fmtDecision(got), fmtDecision(want), fmtAt(t0.Add(latest)))
				}
			}
		}
	})
}

// retryAndReset replays random histories and checks, after the last
// request of each, that Peek agrees with Allow, that RetryAfter is tight
// (the request passes at t + RetryAfter and not 1 ms earlier) and that at
// t + ResetAfter the key is back to initial (it decides as a new key).
func (s *suite) retryAndReset(t *testing.T) {
	s.needCallerTime(t)
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		p := policyOf(a, 5, 7*time.Second)
		if a.HasBurst() {
			p.Burst = 3
		}
		r := newRand(uint64(a) + 1)
		now := t0
		for h := range 60 {
			key := fmt.Sprintf("history-%d", h)
			n := 1 + r.intn(10)
			var req sluice.Request
			var d sluice.Decision
			for i := range n {
				now = now.Add(randomGap(r, 3*time.Second))
				req = sluice.Request{Policy: &p, Key: key, Cost: 1 + int64(r.intn(3))}
				if a == sluice.LeakyBucketAlgorithm && r.intn(3) == 0 {
					req.MaxDelay = time.Duration(1+r.intn(2000)) * time.Millisecond
				}
				if i == n-1 {
					pd, err := peek(t, st, now, req)
					if err != nil {
						t.Fatalf("history %d: Peek error = %v", h, err)
					}
					d, err = allow(t, st, now, req)
					if err != nil {
						t.Fatalf("history %d: Allow error = %v", h, err)
					}
					if pd != d {
						t.Errorf("history %d: Peek(%s) = %s, but Allow = %s", h, fmtRequest(req), fmtDecision(pd), fmtDecision(d))
					}
				} else if _, err := allow(t, st, now, req); err != nil {
					t.Fatalf("history %d: Allow error = %v", h, err)
				}
			}
			type probe struct {
				at   time.Duration
				kind string
			}
			var probes []probe
			if !d.Allowed {
				probes = append(probes, probe{d.RetryAfter, "retry"})
				if d.RetryAfter > time.Millisecond {
					probes = append(probes, probe{d.RetryAfter - time.Millisecond, "before retry"})
				}
			}
			probes = append(probes, probe{d.ResetAfter, "reset"})
			slices.SortFunc(probes, func(x, y probe) int { return int(x.at - y.at) })
			for _, pr := range probes {
				at := now.Add(pr.at)
				switch pr.kind {
				case "retry", "before retry":
					got, err := peek(t, st, at, req)
					if err != nil {
						t.Fatalf("history %d: Peek error = %v", h, err)
					}
					if want := pr.kind == "retry"; got.Allowed != want {
						t.Errorf("history %d: after %s = %s at %s, Peek at t+%v = %s; RetryAfter is not tight",
							h, fmtRequest(req), fmtDecision(d), fmtAt(now), pr.at, fmtDecision(got))
					}
				case "reset":
					one := sluice.Request{Policy: &p, Key: key, Cost: 1}
					got, err1 := peek(t, st, at, one)
					one.Key = "fresh-" + key
					want, err2 := peek(t, st, at, one)
					if err1 != nil || err2 != nil {
						t.Fatalf("history %d: Peek errors %v, %v", h, err1, err2)
					}
					if got != want {
						t.Errorf("history %d: after %s = %s at %s, Peek at t+ResetAfter = %s, but a new key gets %s",
							h, fmtRequest(req), fmtDecision(d), fmtAt(now), fmtDecision(got), fmtDecision(want))
					}
				}
			}
			now = now.Add(max(d.RetryAfter, d.ResetAfter))
		}
	})
}

// randomGap returns a gap between requests: zero a quarter of the time,
// otherwise spread over several orders of magnitude up to limit.
func randomGap(r *rand, limit time.Duration) time.Duration {
	if r.intn(4) == 0 {
		return 0
	}
	micros := int64(limit / time.Microsecond)
	scale := int64(1)
	for range r.intn(12) {
		if scale*10 > micros {
			break
		}
		scale *= 10
	}
	return time.Duration(1+r.int63n(scale)) * time.Microsecond
}
