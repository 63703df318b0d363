package config

import (
	"testing"

	"github.com/sluicehq/sluice"
)

// TestCalendarLimits checks the calendar limits of testdata/good/calendar.yaml
// and that plans take them as any other limit.
func TestCalendarLimits(t *testing.T) {
	c := loadGood(t, "calendar")
	for _, tt := range []struct {
		limit, period string
		alg           sluice.Algorithm
	}{
		{"daily", "calendar_day America/New_York", sluice.FixedWindowAlgorithm},
		{"weekly", "calendar_week UTC (weeks from sunday)", sluice.SlidingWindowAlgorithm},
		{"monthly", "calendar_month Europe/Berlin", sluice.FixedWindowAlgorithm},
		{"yearly", "calendar_year UTC", sluice.FixedWindowAlgorithm},
	} {
		l, ok := c.Limit(tt.limit)
		if !ok {
			t.Fatalf("no limit %s", tt.limit)
		}
		if got := FormatPeriod(l.Policy); got != tt.period || l.Policy.Algorithm != tt.alg || l.Policy.Period != 0 {
			t.Errorf("limit %s: %v period %q (Period %v), want %v %q", tt.limit, l.Policy.Algorithm, got, l.Policy.Period, tt.alg, tt.period)
		}
		if err := l.Policy.Validate(); err != nil {
			t.Errorf("limit %s: %v", tt.limit, err)
		}
	}
	var free *Plan
	for _, p := range c.Plans() {
		if p.Name == "free" {
			free = &p
		}
	}
	if free == nil || len(free.Limits) != 1 || free.Limits[0] != "free-monthly" {
		t.Fatalf("plan free = %+v, want [free-monthly]", free)
	}
}

func TestParseCalendar(t *testing.T) {
	for _, tt := range []struct {
		period, zone, week string
		want               string // the calendar, or the error
	}{
		{"calendar_month", "", "", "calendar_month UTC"},
		{"calendar_day", "Asia/Kolkata", "monday", "calendar_day Asia/Kolkata"},
		{"calendar_week", "America/New_York", "sunday", "calendar_week America/New_York (weeks from sunday)"},
		{"calendar_fortnight", "", "", `unknown calendar period "calendar_fortnight" (want calendar_day, calendar_week, calendar_month or calendar_year)`},
		{"calendar_day", "Mars/Olympus", "", `unknown time zone "Mars/Olympus": want an IANA name such as Europe/Berlin, America/New_York or UTC`},
		{"calendar_day", "Local", "", `time zone "Local" depends on the machine; name an IANA zone such as Europe/Berlin, or UTC`},
		{"calendar_year", "", "sunday", "week_starts applies to calendar_week only, not calendar_year"},
	} {
		c, err := ParseCalendar(tt.period, tt.zone, tt.week)
		got := c.String()
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ParseCalendar(%q, %q, %q) = %q, want %q", tt.period, tt.zone, tt.week, got, tt.want)
		}
	}
}
