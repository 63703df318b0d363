package algo

import (
	"testing"
	"time"
)

// debtRow is one operation of a documented timeline: at t (relative to
// the trace's start), a check, an admission, a debit or a refund (of a
// charge made at the relative instant at), and the verdict it must get.
type debtRow struct {
	t         time.Duration
	op        string // "check", "allow", "debit", "refund"
	cost      int64
	at        time.Duration // refunds: the charge's instant
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// TestDebtTimelines checks the worked timelines of docs/algorithms.md,
// "Debt, refunds and checks", row by row.
func TestDebtTimelines(t *testing.T) {
	const s, h = time.Second, time.Hour
	for _, tl := range []struct {
		name string
		a    algorithm
		p    Params
		rows []debtRow
	}{
		{"fixed window, the usage pattern of Envoy", fixedWindow, Params{Limit: 100, Period: uHour}, []debtRow{
			{0, "check", 0, 0, true, 100, 0, 0},
			{10 * s, "debit", 60, 0, true, 40, 0, h - 10*s},
			{20 * s, "check", 0, 0, true, 40, 0, h - 20*s},
			{30 * s, "debit", 60, 0, false, 0, h - 30*s, h - 30*s},
			{40 * s, "check", 0, 0, false, 0, h - 40*s, h - 40*s},
			{40 * s, "allow", 1, 0, false, 0, h - 40*s, h - 40*s},
			{50 * s, "refund", 30, 50 * s, true, 10, 0, h - 50*s},
			{60 * s, "check", 0, 0, true, 10, 0, h - 60*s},
			{h, "check", 0, 0, true, 100, 0, 0},
			{h, "refund", 30, 50 * s, true, 100, 0, 0},
		}},
		{"token bucket", tokenBucket, Params{Limit: 10, Burst: 10, Period: 10 * uSec}, []debtRow{
			{0, "debit", 15, 0, false, 0, 6 * s, 15 * s},
			{3 * s, "allow", 1, 0, false, 0, 3 * s, 12 * s},
			{6 * s, "check", 0, 0, true, 1, 0, 9 * s},
			{6 * s, "refund", 4, 6 * s, true, 5, 0, 5 * s},
			{6 * s, "refund", 20, 6 * s, true, 10, 0, 0},
		}},
		{"sliding log", slidingLog, Params{Limit: 5, Period: 60 * uSec}, []debtRow{
			{0, "allow", 2, 0, true, 3, 0, 60 * s},
			{10 * s, "debit", 6, 0, false, 0, 60 * s, 60 * s},
			{20 * s, "refund", 3, 0, true, 0, 0, 50 * s},
			{20 * s, "refund", 2, 20 * s, true, 1, 0, 50 * s},
			{30 * s, "allow", 1, 0, true, 0, 0, 60 * s},
		}},
	} {
		t.Run(tl.name, func(t *testing.T) {
			lim := newLimiter(tl.a, tl.p, 0)
			for i, r := range tl.rows {
				now := origin2026 + micros(r.t)
				var got Verdict
				switch r.op {
				case "check":
					got = lim.check(now)
				case "allow":
					got = lim.decide(now, r.cost)
				case "debit":
					got = lim.debit(now, r.cost)
				case "refund":
					got = lim.refund(now, origin2026+micros(r.at), r.cost)
				}
				want := Verdict{Allowed: r.allowed, Remaining: r.remaining, RetryAfter: r.retry, ResetAfter: r.reset}
				if got != want {
					t.Errorf("row %d, %v %s %d: %+v, want %+v", i, r.t, r.op, r.cost, got, want)
				}
			}
		})
	}
}
