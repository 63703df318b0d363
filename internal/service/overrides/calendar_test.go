package overrides

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// TestCalendarRecord checks that a calendar override survives its Redis
// record: unit, zone and week start.
func TestCalendarRecord(t *testing.T) {
	ny := teststore.Zone(t, "America/New_York")
	for _, c := range []sluice.Calendar{
		{Unit: sluice.CalendarMonth, Zone: ny},
		{Unit: sluice.CalendarWeek, Zone: time.UTC, WeekStartsSunday: true},
	} {
		o := Override{Limit: "monthly", Key: "k", Policy: sluice.FixedCalendarWindow(1000, c).Named("monthly")}
		got, err := decode(field(o.Limit, o.Key), encode(o))
		if err != nil {
			t.Fatal(err)
		}
		if g := got.Policy; g.Calendar.String() != c.String() || g.Calendar.Unit != c.Unit || g.Limit != 1000 || g.Period != 0 || g.Validate() != nil {
			t.Errorf("decode(encode(%v)) = %v", o.Policy, g)
		}
	}
}
