package rls

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestOverrideKey checks the key that admin overrides find a descriptor
// under: the values joined by "|", escaped so that no two descriptors of
// one limit share it, and a shared wildcard's pattern for its entry.
func TestOverrideKey(t *testing.T) {
	for _, tt := range []struct {
		entries  []entry
		patterns []string
		want     string
	}{
		{[]entry{{"api_key", "k-1234"}}, nil, "k-1234"},
		{[]entry{{"database", "users"}, {"op", "get"}}, nil, "users|get"},
		{[]entry{{"a", "x|y"}, {"b", "z"}}, nil, `x\|y|z`},
		{[]entry{{"a", "x"}, {"b", "y|z"}}, nil, `x|y\|z`},
		{[]entry{{"a", `x\`}, {"b", "z"}}, nil, `x\\|z`},
		{[]entry{{"a", "x"}, {"b", `\|z`}}, nil, `x|\\\|z`},
		{[]entry{{"path", "foo-12"}, {"op", "get"}}, []string{"foo*", ""}, "foo*|get"},
		{[]entry{{"a", ""}}, nil, ""},
		{[]entry{{"a", "x|y"}}, nil, `x\|y`},
		{[]entry{{"a", `x\`}}, nil, `x\\`},
		{[]entry{{"path", "foo-12"}}, []string{"foo*"}, "foo*"},
	} {
		if got := overrideKey(tt.entries, tt.patterns); got != tt.want {
			t.Errorf("overrideKey(%v, %q) = %q, want %q", tt.entries, tt.patterns, got, tt.want)
		}
	}
}

// TestUnitOf checks how an override's period is reported to Envoy: the
// largest unit that divides it, times a multiplier.
func TestUnitOf(t *testing.T) {
	day := 24 * time.Hour
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip(err)
	}
	for _, tt := range []struct {
		p    sluice.Policy
		unit unitCode
		mult uint32
	}{
		{sluice.FixedWindow(1, time.Second), unitSecond, 1},
		{sluice.FixedWindow(1, 90*time.Second), unitSecond, 90},
		{sluice.FixedWindow(1, 2*time.Hour), unitHour, 2},
		{sluice.FixedWindow(1, 14*day), unitWeek, 2},
		{sluice.FixedWindow(1, 30*day), unitMonth, 1},
		{sluice.FixedWindow(1, 730*day), unitYear, 2},
		{sluice.FixedWindow(1, 500*time.Millisecond), unitMinute, 3}, // none fits: the configured one
		{sluice.FixedCalendarWindow(1, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin}), unitMonth, 1},
	} {
		if u, m := unitOf(tt.p, unitMinute, 3); u != tt.unit || m != tt.mult {
			t.Errorf("unitOf(%v) = %v × %d, want %v × %d", tt.p, u, m, tt.unit, tt.mult)
		}
	}
}
