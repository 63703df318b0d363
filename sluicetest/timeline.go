package sluicetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

// row is one request of a timeline and the decision it must get, worked
// out by hand from the algorithm's definition.
type row struct {
	at       time.Duration // since t0
	cost     int64
	peek     bool
	maxDelay time.Duration

	allowed   bool
	blocked   bool // refused by a penalty's block
	offence   bool // an offence that started one
	remaining int64
	retry     time.Duration
	reset     time.Duration
	delay     time.Duration
}

// never is the retry of a row whose cost exceeds the capacity.
const never = sluice.Never

type timelineCase struct {
	name   string
	policy sluice.Policy
	rows   []row
}

// tokenBucketRows is the timeline of a token bucket of 10 per second with
// burst 3 (one token every 100 ms); GCRA must decide identically.
var tokenBucketRows = []row{
	{at: 0, cost: 1, allowed: true, remaining: 2, reset: 100 * ms},
	{at: 0, cost: 2, allowed: true, remaining: 0, reset: 300 * ms},
	{at: 0, cost: 1, remaining: 0, retry: 100 * ms, reset: 300 * ms},
	{at: 50 * ms, cost: 1, peek: true, remaining: 0, retry: 50 * ms, reset: 250 * ms},
	{at: 50 * ms, cost: 1, remaining: 0, retry: 50 * ms, reset: 250 * ms},
	{at: 100 * ms, cost: 1, allowed: true, remaining: 0, reset: 300 * ms},
	{at: 1 * sec, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
	// One microsecond later a whole token is 100 ms minus 1 µs away: the
	// retry rounds up to 100 ms.
	{at: 1*sec + 1*us, cost: 1, remaining: 0, retry: 100 * ms, reset: 300 * ms},
	{at: 1*sec + 1*us, cost: 4, remaining: 0, retry: never, reset: 300 * ms},
	{at: 1*sec + 250*ms, cost: 2, allowed: true, remaining: 0, reset: 250 * ms},
	{at: 1*sec + 299*ms, cost: 1, remaining: 0, retry: 1 * ms, reset: 201 * ms},
	{at: 1*sec + 300*ms, cost: 1, allowed: true, remaining: 0, reset: 300 * ms},
	{at: 10 * sec, cost: 1, allowed: true, remaining: 2, reset: 100 * ms},
}

// thirdsRows is the timeline of a token bucket of 3 per second with burst
// 2: one token every 333⅓ ms, which no whole number of microseconds holds.
var thirdsRows = []row{
	{at: 0, cost: 2, allowed: true, remaining: 0, reset: 667 * ms},
	{at: 0, cost: 1, remaining: 0, retry: 334 * ms, reset: 667 * ms},
	// At 333 ms the backlog is 333,666⅔ µs: a third of a µs too long.
	{at: 333 * ms, cost: 1, peek: true, remaining: 0, retry: 1 * ms, reset: 334 * ms},
	{at: 334 * ms, cost: 1, allowed: true, remaining: 0, reset: 666 * ms},
	{at: 1 * sec, cost: 1, allowed: true, remaining: 1, reset: 334 * ms},
}

var timelineCases = []timelineCase{
	{"token_bucket", sluice.TokenBucket(10, time.Second, 3), tokenBucketRows},
	{"token_bucket/thirds", sluice.TokenBucket(3, time.Second, 2), thirdsRows},
	{"gcra", sluice.GCRA(10, time.Second, 3), tokenBucketRows},
	{"gcra/thirds", sluice.GCRA(3, time.Second, 2), thirdsRows},
	{"leaky_bucket", sluice.LeakyBucket(10, time.Second, 3), []row{
		{at: 0, cost: 1, allowed: true, remaining: 2, reset: 100 * ms},
		{at: 0, cost: 1, allowed: true, remaining: 1, reset: 200 * ms, delay: 100 * ms},
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 300 * ms, delay: 200 * ms},
		{at: 0, cost: 1, remaining: 0, retry: 100 * ms, reset: 300 * ms},
		{at: 150 * ms, cost: 2, remaining: 1, retry: 50 * ms, reset: 150 * ms},
		{at: 200 * ms, cost: 2, allowed: true, remaining: 0, reset: 300 * ms, delay: 100 * ms},
		// Full: denied for room (there is room from 300 ms), and the
		// 250 ms queue exceeds MaxDelay until 400 ms.
		{at: 250 * ms, cost: 1, maxDelay: 100 * ms, remaining: 0, retry: 150 * ms, reset: 250 * ms},
		// Room, but the 200 ms queue exceeds MaxDelay: denied, not queued,
		// reporting the Delay it would have had.
		{at: 300 * ms, cost: 1, maxDelay: 100 * ms, remaining: 1, retry: 100 * ms, reset: 200 * ms, delay: 200 * ms},
		{at: 400 * ms, cost: 1, maxDelay: 100 * ms, allowed: true, remaining: 1, reset: 200 * ms, delay: 100 * ms},
		{at: 5 * sec, cost: 1, allowed: true, remaining: 2, reset: 100 * ms},
		{at: 5 * sec, cost: 4, remaining: 2, retry: never, reset: 100 * ms},
	}},
	{"fixed_window", sluice.FixedWindow(3, time.Minute), []row{
		{at: 10 * sec, cost: 2, allowed: true, remaining: 1, reset: 50 * sec},
		{at: 20 * sec, cost: 1, allowed: true, remaining: 0, reset: 40 * sec},
		{at: 30 * sec, cost: 1, remaining: 0, retry: 30 * sec, reset: 30 * sec},
		// Half a millisecond before the window ends.
		{at: 59*sec + 999500*us, cost: 1, peek: true, remaining: 0, retry: 1 * ms, reset: 1 * ms},
		{at: 60 * sec, cost: 3, allowed: true, remaining: 0, reset: 60 * sec},
		{at: 60 * sec, cost: 4, remaining: 0, retry: never, reset: 60 * sec},
		{at: 150 * sec, cost: 1, allowed: true, remaining: 2, reset: 30 * sec},
	}},
	{"sliding_log", sluice.SlidingLog(3, time.Minute), []row{
		{at: 0, cost: 1, allowed: true, remaining: 2, reset: 60 * sec},
		{at: 20 * sec, cost: 2, allowed: true, remaining: 0, reset: 60 * sec},
		// Room for 1 once the request at 0 stops counting, at 60 s.
		{at: 30 * sec, cost: 1, remaining: 0, retry: 30 * sec, reset: 50 * sec},
		{at: 60 * sec, cost: 1, allowed: true, remaining: 0, reset: 60 * sec},
		// Room for 2 once the request of 2 at 20 s stops counting, at 80 s.
		{at: 70 * sec, cost: 2, remaining: 0, retry: 10 * sec, reset: 50 * sec},
		{at: 79*sec + 999*ms, cost: 2, peek: true, remaining: 0, retry: 1 * ms, reset: 40*sec + 1*ms},
		{at: 80 * sec, cost: 2, allowed: true, remaining: 0, reset: 60 * sec},
		{at: 80 * sec, cost: 4, remaining: 0, retry: never, reset: 60 * sec},
		{at: 10 * time.Minute, cost: 1, allowed: true, remaining: 2, reset: 60 * sec},
	}},
	{"sliding_window", sluice.SlidingWindow(10, time.Minute), []row{
		{at: 30 * sec, cost: 4, allowed: true, remaining: 6, reset: 90 * sec},
		{at: 50 * sec, cost: 6, allowed: true, remaining: 0, reset: 70 * sec},
		// Next window, prev = 10: 10·(60−y)/60 + 1 ≤ 10 from y = 6 s.
		{at: 55 * sec, cost: 1, remaining: 0, retry: 11 * sec, reset: 65 * sec},
		// 10·45/60 = 7.5, + 2 = 9.5 ≤ 10; remaining floor(0.5) = 0.
		{at: 75 * sec, cost: 2, allowed: true, remaining: 0, reset: 105 * sec},
		// 10·(60−x)/60 + 2 + 1 ≤ 10 from x = 18 s.
		{at: 75 * sec, cost: 1, remaining: 0, retry: 3 * sec, reset: 105 * sec},
		{at: 78 * sec, cost: 1, allowed: true, remaining: 0, reset: 102 * sec},
		// Window at 120 s: prev = 3, weighted 3·30/60 = 1.5.
		{at: 150 * sec, cost: 1, peek: true, allowed: true, remaining: 7, reset: 90 * sec},
		{at: 150 * sec, cost: 8, allowed: true, remaining: 0, reset: 90 * sec},
		// 1.5 + 8 + 1 > 10 until 3·(60−x)/60 ≤ 1, from x = 40 s.
		{at: 150 * sec, cost: 1, remaining: 0, retry: 10 * sec, reset: 90 * sec},
		{at: 150 * sec, cost: 11, remaining: 0, retry: never, reset: 90 * sec},
		// Window at 180 s: prev = 8, weighted 8·40/60 = 5⅓.
		{at: 200 * sec, cost: 1, allowed: true, remaining: 3, reset: 100 * sec},
		// Window at 240 s: only prev = 1 is left, so the state is initial
		// at the end of this window.
		{at: 250 * sec, cost: 11, remaining: 9, retry: never, reset: 50 * sec},
		{at: 7 * time.Minute, cost: 1, allowed: true, remaining: 9, reset: 120 * sec},
	}},
}

// timeline replays, for every algorithm, a timeline whose decisions were
// worked out by hand, and checks every field of every decision.
func (s *suite) timeline(t *testing.T) {
	s.needCallerTime(t)
	for _, tc := range timelineCases {
		t.Run(tc.name, func(t *testing.T) {
			st := s.newStore(t)
			runRows(t, st, tc.policy, "timeline", tc.rows)
		})
	}
}

// runRows replays rows on key under p and checks each decision.
func runRows(t *testing.T, st sluice.Store, p sluice.Policy, key string, rows []row) {
	t.Helper()
	runRowsFrom(t, st, p, key, t0, rows)
}

// runRowsFrom is runRows with rows timed from origin instead of t0.
func runRowsFrom(t *testing.T, st sluice.Store, p sluice.Policy, key string, origin time.Time, rows []row) {
	t.Helper()
	for i, r := range rows {
		req := sluice.Request{Policy: &p, Key: key, Cost: r.cost, MaxDelay: r.maxDelay}
		now := origin.Add(r.at)
		op := "Allow"
		var got sluice.Decision
		var err error
		if r.peek {
			op = "Peek"
			got, err = peek(t, st, now, req)
		} else {
			got, err = allow(t, st, now, req)
		}
		want := sluice.Decision{
			Allowed:    r.allowed,
			Limit:      p.Limit,
			Remaining:  r.remaining,
			RetryAfter: r.retry,
			ResetAfter: r.reset,
			Delay:      r.delay,
			Blocked:    r.blocked,
			Offence:    r.offence,
		}
		if r.retry == never {
			if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
				t.Errorf("row %d: %s(%s, cost %d) error = %v, want ErrCostExceedsCapacity", i, op, fmtAt(now), r.cost, err)
			}
		} else if err != nil {
			t.Fatalf("row %d: %s(%s, cost %d) error = %v", i, op, fmtAt(now), r.cost, err)
		}
		if got != want {
			t.Errorf("row %d: %s(%s, cost %d) = %s, want %s", i, op, fmtAt(now), r.cost, fmtDecision(got), fmtDecision(want))
		}
	}
}

// boundary is the fixed window's boundary problem: 100 per minute, 100
// requests at 12:00:59 and 100 at 12:01:00.
func (s *suite) boundary(t *testing.T) {
	s.needCallerTime(t)
	want := map[sluice.Algorithm]int{
		sluice.TokenBucketAlgorithm:   101,
		sluice.GCRAAlgorithm:          101,
		sluice.LeakyBucketAlgorithm:   101,
		sluice.FixedWindowAlgorithm:   200,
		sluice.SlidingLogAlgorithm:    100,
		sluice.SlidingWindowAlgorithm: 100,
	}
	forEachAlgorithm(t, func(t *testing.T, a sluice.Algorithm) {
		st := s.newStore(t)
		req := sluice.Request{Policy: new(policyOf(a, 100, time.Minute)), Key: "boundary", Cost: 1}
		admitted := 0
		for _, at := range []time.Duration{59 * sec, 60 * sec} {
			for range 100 {
				d, err := allow(t, st, t0.Add(at), req)
				if err != nil {
					t.Fatalf("Allow(%s) error = %v", fmtAt(t0.Add(at)), err)
				}
				if d.Allowed {
					admitted++
				}
			}
		}
		if admitted != want[a] {
			t.Errorf("admitted %d of 100 at 12:00:59 and 100 at 12:01:00 under %v, want %d", admitted, req.Policy, want[a])
		}
	})
}
