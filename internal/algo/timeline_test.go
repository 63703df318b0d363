package algo

import (
	"fmt"
	"testing"
	"time"
)

// A row is one request of a timeline and the Verdict the definitions give
// for it, worked out by hand (the comments show the arithmetic). Rows run
// in order against one key; t is the offset from the timeline's origin.
type row struct {
	t          time.Duration
	cost       int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	delay      time.Duration
}

// timeline is a named sequence of rows under one policy.
type timeline struct {
	name     string
	p        Params
	maxDelay time.Duration // leaky bucket only
	origin   int64         // us since the epoch; 0 means origin2026
	rows     []row
}

func runTimelines(t *testing.T, algs []algorithm, tls []timeline) {
	t.Helper()
	for _, a := range algs {
		for _, tl := range tls {
			t.Run(fmt.Sprintf("%v/%s", a, tl.name), func(t *testing.T) {
				origin := tl.origin
				if origin == 0 {
					origin = origin2026
				}
				l := newLimiter(a, tl.p, tl.maxDelay)
				for _, r := range tl.rows {
					got := l.decide(origin+micros(r.t), r.cost)
					want := Verdict{
						Allowed:    r.allowed,
						Remaining:  r.remaining,
						RetryAfter: r.retryAfter,
						ResetAfter: r.resetAfter,
						Delay:      r.delay,
					}
					if got != want {
						t.Errorf("%v(t=%v, cost=%d) = %+v, want %+v", a, r.t, r.cost, got, want)
					}
				}
			})
		}
	}
}

// Durations for timelines.
const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

// boundaryRows is the fixed-window boundary trace of
// examples/traces/boundary.csv: limit 100 per minute, 100 requests at
// 12:00:59 and 100 at 12:01:00 (the origin is 12:00:00). first and second
// give the row of the i-th request (0-based) of each burst.
func boundaryRows(first, second func(i int64) row) []row {
	var rows []row
	for i := range int64(100) {
		rows = append(rows, first(i))
	}
	for i := range int64(100) {
		rows = append(rows, second(i))
	}
	return rows
}

var boundaryParams = Params{Limit: 100, Burst: 100, Period: uMin}

// allTimelines pairs every timeline with the algorithms it is run against.
func allTimelines() []struct {
	algs []algorithm
	tls  []timeline
} {
	return []struct {
		algs []algorithm
		tls  []timeline
	}{
		{[]algorithm{tokenBucket, gcra}, tokenBucketTimelines()},
		{[]algorithm{leakyBucket}, leakyBucketTimelines()},
		{[]algorithm{fixedWindow}, fixedWindowTimelines()},
		{[]algorithm{slidingLog}, slidingLogTimelines()},
		{[]algorithm{slidingWindow}, slidingWindowTimelines()},
	}
}

// TestTimelines replays every hand-worked timeline from 2026-03-14 12:00 UTC.
func TestTimelines(t *testing.T) {
	for _, g := range allTimelines() {
		runTimelines(t, g.algs, g.tls)
	}
}

// TestTimelinesFarFuture replays the same timelines from the first instants
// of the years 9999 and 100,000 (multiples of every period they use): the
// results must not change.
func TestTimelinesFarFuture(t *testing.T) {
	for _, year := range []int{9999, 100_000} {
		origin := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		t.Run(fmt.Sprint(year), func(t *testing.T) {
			for _, g := range allTimelines() {
				var moved []timeline
				for _, tl := range g.tls {
					if tl.origin == 0 { // the others are pinned to an instant
						tl.origin = origin
						moved = append(moved, tl)
					}
				}
				runTimelines(t, g.algs, moved)
			}
		})
	}
}

// TestBoundary counts what each algorithm admits of the boundary trace:
// fixed_window 200, sliding_log and sliding_window 100, the token-bucket
// family 101.
func TestBoundary(t *testing.T) {
	want := map[algorithm]int64{
		tokenBucket: 101, gcra: 101, leakyBucket: 101,
		fixedWindow: 200, slidingLog: 100, slidingWindow: 100,
	}
	for _, a := range algorithms {
		l := newLimiter(a, boundaryParams, 0)
		var admitted int64
		for _, at := range []time.Duration{59 * sec, 60 * sec} {
			for range 100 {
				if l.decide(origin2026+micros(at), 1).Allowed {
					admitted++
				}
			}
		}
		if admitted != want[a] {
			t.Errorf("%v admitted %d of the boundary trace, want %d", a, admitted, want[a])
		}
	}
}

// tokenBucketBoundary is the boundary trace under the token bucket.
// T = 600ms. At 59s request i leaves 99−i tokens and a bucket full again
// after (i+1)·600ms. One second later 100/60 tokens are back: one request
// passes (0.67 left, full again in 60s − 1s + 0.6s = 59.6s), and the next
// needs 1/3 token more: 200ms.
func tokenBucketBoundary() []row {
	return boundaryRows(
		func(i int64) row { return row{59 * sec, 1, true, 99 - i, 0, time.Duration(i+1) * 600 * ms, 0} },
		func(i int64) row {
			if i == 0 {
				return row{60 * sec, 1, true, 0, 0, 59600 * ms, 0}
			}
			return row{60 * sec, 1, false, 0, 200 * ms, 59600 * ms, 0}
		})
}

// tokenBucketTimelines are run against both TokenBucket and GCRA, which
// must decide identically.
func tokenBucketTimelines() []timeline {
	return []timeline{
		{name: "boundary", p: boundaryParams, rows: tokenBucketBoundary()},
		{
			// T = 100ms, capacity 5, so a full refill takes 500ms.
			name: "weighted costs and capacity",
			p:    Params{Limit: 10, Burst: 5, Period: uSec},
			rows: []row{
				{0, 3, true, 2, 0, 300 * ms, 0},
				{0, 3, false, 2, 100 * ms, 300 * ms, 0}, // backlog 300 + 300 − 500
				{0, 6, false, 2, Never, 300 * ms, 0},    // over capacity: nothing charged
				{0, 5, false, 2, 300 * ms, 300 * ms, 0}, // cost = capacity waits for a full bucket
				{250 * ms, 4, true, 0, 0, 450 * ms, 0},  // 4.5 tokens, 0.5 left
				{250 * ms, 1, false, 0, 50 * ms, 450 * ms, 0},
				{300 * ms, 1, true, 0, 0, 500 * ms, 0}, // exactly 1 token
				{700 * ms, 0, true, 4, 0, 100 * ms, 0}, // cost 0 only asks
				{800 * ms, 0, true, 5, 0, 0, 0},        // full: reset 0
				{10 * time.Hour, 5, true, 0, 0, 500 * ms, 0},
				{10 * time.Hour, 6, false, 0, Never, 500 * ms, 0},
				{10*time.Hour + 100*ms, 1, true, 0, 0, 500 * ms, 0}, // the 6 took nothing
			},
		},
		{
			// T = 1s/7 = 142857.142857…us, not a whole number of us.
			name: "7 per second",
			p:    Params{Limit: 7, Burst: 7, Period: uSec},
			rows: []row{
				{0, 7, true, 0, 0, 1000 * ms, 0},
				{0, 1, false, 0, 143 * ms, 1000 * ms, 0}, // T rounds up to 143ms
				// 1.001 tokens; after: backlog 857000 + T = 999857.14us.
				{143 * ms, 1, true, 0, 0, 1000 * ms, 0},
				// excess 999857.14 + 142857.14 − 10^6 = 142714.29us.
				{143 * ms, 1, false, 0, 143 * ms, 1000 * ms, 0},
				// The bucket is full at 8T; one token is back at 2T =
				// 285714.29us. At 285714us tokens = 0.999998: 0.29us short,
				// which still rounds up to 1ms; backlog 857143.14us → 858ms.
				{285714 * us, 1, false, 0, 1 * ms, 858 * ms, 0},
				{285715 * us, 1, true, 0, 0, 1000 * ms, 0},
				// Full at 285715 + 999999.29 = 1285714.29us.
				{1285714 * us, 0, true, 6, 0, 1 * ms, 0},
				{1285715 * us, 0, true, 7, 0, 0, 0},
			},
		},
		{
			// T = 10s/3 = 3333333.33…us.
			name: "3 per 10 seconds",
			p:    Params{Limit: 3, Burst: 3, Period: 10 * uSec},
			rows: []row{
				{0, 3, true, 0, 0, 10 * sec, 0},
				{0, 1, false, 0, 3334 * ms, 10 * sec, 0},
				// 3333333us refills 0.9999999 token: 1/3us short.
				{3333333 * us, 1, false, 0, 1 * ms, 6667 * ms, 0},
				{3333334 * us, 1, true, 0, 0, 10 * sec, 0}, // backlog 9999999.33us
				// At 10s the backlog is 13333333.33 − 10^7 = T: exactly 2
				// tokens, and cost 2 takes both.
				{10 * sec, 2, true, 0, 0, 10 * sec, 0},
				{10 * sec, 1, false, 0, 3334 * ms, 10 * sec, 0},
			},
		},
		{
			// A clock that steps back reads the stored TAT as it is: a
			// backlog longer than the bucket, a debt, never more than the
			// bucket held at the latest instant.
			name: "clock steps back",
			p:    Params{Limit: 1, Burst: 1, Period: uSec},
			rows: []row{
				{10 * sec, 1, true, 0, 0, 1 * sec, 0}, // full again at 11s
				{5 * sec, 1, false, 0, 6 * sec, 6 * sec, 0},
				{5 * sec, 0, false, 0, 5 * sec, 6 * sec, 0},
				{10500 * ms, 1, false, 0, 500 * ms, 500 * ms, 0}, // still full at 11s
				{11 * sec, 1, true, 0, 0, 1 * sec, 0},
			},
		},
	}
}

// leakyBucketTimelines check queue delays, which the token bucket does not
// have, and the maxDelay extension.
func leakyBucketTimelines() []timeline {
	// Admission is the token bucket's; request i at 59s waits i·600ms. At
	// 60s the queue empties at 59s + 60s, so the admitted one waits 59s.
	boundary := tokenBucketBoundary()
	for i := range 100 {
		boundary[i].delay = time.Duration(i) * 600 * ms
	}
	boundary[100].delay = 59 * sec
	return []timeline{
		{name: "boundary", p: boundaryParams, rows: boundary},
		{
			// T = 100ms, room for 3 units (300ms of queue).
			name: "queue",
			p:    Params{Limit: 10, Burst: 3, Period: uSec},
			rows: []row{
				{0, 1, true, 2, 0, 100 * ms, 0},
				{0, 1, true, 1, 0, 200 * ms, 100 * ms},
				{0, 1, true, 0, 0, 300 * ms, 200 * ms},
				{0, 1, false, 0, 100 * ms, 300 * ms, 0},       // a denied request has delay 0
				{50 * ms, 2, false, 0, 150 * ms, 250 * ms, 0}, // 250 + 200 − 300
				{150 * ms, 1, true, 0, 0, 250 * ms, 150 * ms}, // 2.5 units queued
				{400 * ms, 3, true, 0, 0, 300 * ms, 0},        // V = 400ms: empty again
				{450 * ms, 0, true, 0, 0, 250 * ms, 250 * ms}, // asking: would wait 250ms
				{1 * sec, 0, true, 3, 0, 0, 0},
				{1 * sec, 4, false, 3, Never, 0, 0},
			},
		},
		{
			// T = 142857.142857…us: delays are rounded up to the us, so
			// starts 0, 142858, 285715us are 142858 and 142857us apart;
			// the exact starts are T apart.
			name: "7 per second",
			p:    Params{Limit: 7, Burst: 7, Period: uSec},
			rows: []row{
				{0, 1, true, 6, 0, 143 * ms, 0},
				{0, 1, true, 5, 0, 286 * ms, 142858 * us},
				{0, 1, true, 4, 0, 429 * ms, 285715 * us},
				{0, 5, false, 4, 143 * ms, 429 * ms, 0},  // 3T + 5T − 7T = T
				{0, 4, true, 0, 0, 1 * sec, 428572 * us}, // exactly full: 7T = 1s
			},
		},
		{
			// T = 100ms; a caller that waits at most 250ms.
			name:     "max delay",
			p:        Params{Limit: 10, Burst: 10, Period: uSec},
			maxDelay: 250 * ms,
			rows: []row{
				{0, 1, true, 9, 0, 100 * ms, 0},
				{0, 1, true, 8, 0, 200 * ms, 100 * ms},
				{0, 1, true, 7, 0, 300 * ms, 200 * ms},
				// Would wait 300ms: refused, reports that wait, passes when
				// the queue is down to 250ms, 50ms later.
				{0, 1, false, 7, 50 * ms, 300 * ms, 300 * ms},
				{50 * ms, 1, true, 6, 0, 350 * ms, 250 * ms},
				{50 * ms, 11, false, 6, Never, 350 * ms, 0},
				// Room for 6.5 units, but 7 must also wait: room comes after
				// 50ms, a short enough queue only after 100ms.
				{50 * ms, 7, false, 6, 100 * ms, 350 * ms, 0},
				{150 * ms, 7, true, 0, 0, 950 * ms, 250 * ms},
			},
		},
	}
}

// fixedWindowTimelines check fixed windows aligned to multiples of P since
// the epoch.
func fixedWindowTimelines() []timeline {
	boundary := boundaryRows(
		func(i int64) row { return row{59 * sec, 1, true, 99 - i, 0, 1 * sec, 0} },
		func(i int64) row { return row{60 * sec, 1, true, 99 - i, 0, 60 * sec, 0} })
	boundary = append(boundary, row{60 * sec, 1, false, 0, 60 * sec, 60 * sec, 0})
	// 1773399999s = 7·253342857s: a window of 7s starts there.
	const w7 = 1_773_399_999 * uSec
	return []timeline{
		{name: "boundary", p: boundaryParams, rows: boundary},
		{
			name: "weighted costs",
			p:    Params{Limit: 5, Burst: 5, Period: uSec},
			rows: []row{
				{200 * ms, 2, true, 3, 0, 800 * ms, 0},
				{500 * ms, 3, true, 0, 0, 500 * ms, 0},
				{900 * ms, 1, false, 0, 100 * ms, 100 * ms, 0},
				{999999 * us, 1, false, 0, 1 * ms, 1 * ms, 0}, // 1us rounds up
				{1 * sec, 6, false, 5, Never, 0, 0},           // new window: initial
				{1 * sec, 5, true, 0, 0, 1 * sec, 0},
				{1 * sec, 6, false, 0, Never, 1 * sec, 0},
				{2500 * ms, 6, false, 5, Never, 0, 0},
				{2500 * ms, 0, true, 5, 0, 0, 0}, // the 6 took nothing
				{2500 * ms, 1, true, 4, 0, 500 * ms, 0},
				{2500*ms + 1*us, 4, true, 0, 0, 500 * ms, 0},
			},
		},
		{
			name:   "windows aligned to the epoch",
			p:      Params{Limit: 3, Burst: 3, Period: 7 * uSec},
			origin: w7 - uSec,
			rows: []row{
				{0, 3, true, 0, 0, 1 * sec, 0},
				{999999 * us, 1, false, 0, 1 * ms, 1 * ms, 0},
				{1 * sec, 3, true, 0, 0, 7 * sec, 0},
				{8*sec - 1*us, 1, false, 0, 1 * ms, 1 * ms, 0},
				{8 * sec, 1, true, 2, 0, 7 * sec, 0},
			},
		},
	}
}

// slidingLogTimelines check the log: an entry admitted at s counts at t iff
// t − s < P.
func slidingLogTimelines() []timeline {
	boundary := boundaryRows(
		func(i int64) row { return row{59 * sec, 1, true, 99 - i, 0, 60 * sec, 0} },
		func(i int64) row { return row{60 * sec, 1, false, 0, 59 * sec, 59 * sec, 0} })
	boundary = append(boundary, row{119 * sec, 1, true, 99, 0, 60 * sec, 0}) // 119 − 59 = P: gone
	return []timeline{
		{name: "boundary", p: boundaryParams, rows: boundary},
		{
			name: "weighted costs",
			p:    Params{Limit: 5, Burst: 5, Period: 10 * uSec},
			rows: []row{
				{0, 2, true, 3, 0, 10 * sec, 0},
				{3 * sec, 2, true, 1, 0, 10 * sec, 0},
				{3 * sec, 1, true, 0, 0, 10 * sec, 0},
				// 2 fits once the entry of 0s stops counting, at 10s.
				{6 * sec, 2, false, 0, 4 * sec, 7 * sec, 0},
				// 4 needs the entries of 3s gone too, at 13s.
				{6 * sec, 4, false, 0, 7 * sec, 7 * sec, 0},
				{10*sec - 1*us, 1, false, 0, 1 * ms, 3001 * ms, 0},
				{10 * sec, 2, true, 0, 0, 10 * sec, 0},
				{10 * sec, 6, false, 0, Never, 10 * sec, 0},
				{13 * sec, 1, true, 2, 0, 10 * sec, 0}, // counts 2 (at 10s) + 1
				{30 * sec, 0, true, 5, 0, 0, 0},
			},
		},
	}
}

// slidingWindowTimelines check the counter's estimate
// prev·(P − (t − windowStart))/P + curr, exact.
func slidingWindowTimelines() []timeline {
	boundary := boundaryRows(
		// Reset: the end of the next window, 12:02:00.
		func(i int64) row { return row{59 * sec, 1, true, 99 - i, 0, 61 * sec, 0} },
		// At 12:01:00 the estimate is 100·60/60 = 100; it is 99 at 0.6s,
		// and only prev is left: reset at the end of this window.
		func(i int64) row { return row{60 * sec, 1, false, 0, 600 * ms, 60 * sec, 0} })
	boundary = append(boundary, row{60600 * ms, 1, true, 0, 0, 119400 * ms, 0})
	return []timeline{
		{name: "boundary", p: boundaryParams, rows: boundary},
		{
			name: "previous window weighting",
			p:    Params{Limit: 10, Burst: 10, Period: 10 * uSec},
			rows: []row{
				{1 * sec, 4, true, 6, 0, 19 * sec, 0},
				{9 * sec, 4, true, 2, 0, 11 * sec, 0},
				// prev 8 weighs 8·8/10 = 6.4; 6.4 + 3 = 9.4.
				{12 * sec, 3, true, 0, 0, 18 * sec, 0},
				// 10.4 > 10; 8·(10 − x)/10 + 4 ≤ 10 from x = 2.5s.
				{12 * sec, 1, false, 0, 500 * ms, 18 * sec, 0},
				{12500 * ms, 1, true, 0, 0, 17500 * ms, 0}, // 6 + 3 + 1 = 10
				{15 * sec, 2, true, 0, 0, 15 * sec, 0},     // 4 + 4 + 2 = 10
				// 8·(10 − x)/10 + 6 + 1 ≤ 10 from x = 6.25s.
				{15 * sec, 1, false, 0, 1250 * ms, 15 * sec, 0},
				// 0.8 + 6 = 6.8: remaining 3, but 5 fits only in the next
				// window: 6·(10 − y)/10 ≤ 5 from y = 1666667us (rounded up).
				{19 * sec, 5, false, 3, 2667 * ms, 11 * sec, 0},
				{19 * sec, 3, true, 0, 0, 11 * sec, 0}, // 9.8
				{29 * sec, 0, true, 9, 0, 1 * sec, 0},  // 9·1/10: only prev left
				{30 * sec, 0, true, 10, 0, 0, 0},
			},
		},
		{
			name: "exact estimate",
			p:    Params{Limit: 10, Burst: 10, Period: 10 * uSec},
			rows: []row{
				{9 * sec, 10, true, 0, 0, 11 * sec, 0},
				// 10·(10^7 − 1)/10^7 = 9.999999: nothing left, and the
				// state is initial at 20s.
				{10*sec + 1*us, 0, true, 0, 0, 10 * sec, 0},
				// 10/10^7 + 9 ≤ 10: admitted; 9.000001 leaves 0.
				{20*sec - 1*us, 9, true, 0, 0, 10001 * ms, 0},
				// 10.000001 > 10; passes at 20s, when prev 9 weighs 9.
				{20*sec - 1*us, 1, false, 0, 1 * ms, 10001 * ms, 0},
				{20 * sec, 1, true, 0, 0, 20 * sec, 0},
				{20 * sec, 11, false, 0, Never, 20 * sec, 0},
				// 9·1/10 + 1 = 1.9: the 11 took nothing.
				{29 * sec, 0, true, 8, 0, 11 * sec, 0},
			},
		},
	}
}
