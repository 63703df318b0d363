package sluice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

func TestCalendarPolicyValidate(t *testing.T) {
	berlin := teststore.Zone(t, "Europe/Berlin")
	month := sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin}
	tests := []struct {
		name string
		p    sluice.Policy
		want string // "" for valid
	}{
		{"fixed month", sluice.FixedCalendarWindow(10_000, month), ""},
		{"sliding day in utc", sluice.SlidingCalendarWindow(500, sluice.Calendar{Unit: sluice.CalendarDay}), ""},
		{"sunday weeks", sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarWeek, WeekStartsSunday: true}), ""},
		{"burst equal to limit", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Burst: 5, Calendar: month}, ""},
		{"token bucket", sluice.Policy{Algorithm: sluice.TokenBucketAlgorithm, Limit: 5, Calendar: month}, "token_bucket cannot use calendar windows"},
		{"sliding log", sluice.Policy{Algorithm: sluice.SlidingLogAlgorithm, Limit: 5, Calendar: month}, "sliding_log cannot use calendar windows"},
		{"with a period", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Period: time.Hour, Calendar: month}, "remove period"},
		{"zone without a unit", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Period: time.Hour, Calendar: sluice.Calendar{Zone: berlin}}, "needs a calendar unit"},
		{"unknown unit", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Calendar: sluice.Calendar{Unit: 9}}, "unknown calendar unit 9"},
		{"sunday months", sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarMonth, WeekStartsSunday: true}), "week_starts applies to calendar_week only"},
		{"burst", sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 5, Burst: 6, Calendar: month}, "has no burst"},
		{"limit 0", sluice.FixedCalendarWindow(0, month), "limit must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, sluice.ErrInvalidPolicy)):
				t.Errorf("Validate() = %v, want an ErrInvalidPolicy containing %q", err, tt.want)
			}
		})
	}
}

func TestCalendarPolicyWindow(t *testing.T) {
	berlin := teststore.Zone(t, "Europe/Berlin")
	p := sluice.FixedCalendarWindow(10_000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin}).Named("monthly")
	if got, want := p.String(), "monthly: fixed_window 10000/calendar_month Europe/Berlin"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, tt := range []struct{ at, start, end string }{
		{"2026-03-31T23:59:59+02:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00"},
		{"2026-04-01T00:00:00+02:00", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00"},
	} {
		at, _ := time.Parse(time.RFC3339, tt.at)
		start, end, ok := p.Window(at)
		if !ok || start.Format(time.RFC3339) != tt.start || end.Format(time.RFC3339) != tt.end {
			t.Errorf("Window(%s) = %s, %s, %v; want %s, %s", tt.at, start.Format(time.RFC3339), end.Format(time.RFC3339), ok, tt.start, tt.end)
		}
	}
	start, end, ok := sluice.FixedWindow(5, time.Hour).Window(time.Date(2026, 3, 14, 12, 30, 0, 0, time.UTC))
	if !ok || !start.Equal(time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)) || end.Sub(start) != time.Hour {
		t.Errorf("FixedWindow(5, 1h).Window(12:30) = %v, %v, %v", start, end, ok)
	}
	if _, _, ok := sluice.TokenBucket(5, time.Hour, 0).Window(time.Now()); ok {
		t.Error("TokenBucket.Window: ok, want false")
	}
}
