package httplimit

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// TestAppendPolicyCalendar checks RateLimit-Policy's w for calendar
// policies: the length of the window that holds now, in seconds.
func TestAppendPolicyCalendar(t *testing.T) {
	berlin := teststore.Zone(t, "Europe/Berlin")
	month := sluice.FixedCalendarWindow(1000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin}).Named("monthly")
	day := sluice.SlidingCalendarWindow(10, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}).Named("daily")
	for _, tt := range []struct {
		p    sluice.Policy
		now  time.Time
		want string
	}{
		{month, time.Date(2026, 3, 31, 23, 59, 0, 0, berlin), `"monthly";q=1000;w=2674800`}, // 31 days less an hour
		{month, time.Date(2026, 4, 1, 0, 0, 0, 0, berlin), `"monthly";q=1000;w=2592000`},    // 30 days
		{month, time.Date(2026, 10, 31, 12, 0, 0, 0, berlin), `"monthly";q=1000;w=2682000`}, // 31 days and an hour
		{day, time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), `"daily";q=10;w=82800`},          // 23 hours
		{day, time.Date(2026, 3, 30, 0, 0, 0, 0, berlin), `"daily";q=10;w=86400`},
		{month, time.Time{}, `"monthly";q=1000`},
	} {
		if got := string(AppendPolicyAt(nil, tt.p, tt.now)); got != tt.want {
			t.Errorf("AppendPolicyAt(%v, %v) = %s, want %s", tt.p, tt.now, got, tt.want)
		}
	}
	if got, want := string(AppendPolicy(nil, month)), `"monthly";q=1000`; got != want {
		t.Errorf("AppendPolicy = %s, want %s", got, want)
	}
}
