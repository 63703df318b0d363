package overrides

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones must load on machines without a tz database

	"github.com/sluicehq/sluice"
)

// TestCalendarRecord checks that a calendar override survives its Redis
// record: unit, zone and week start.
func TestCalendarRecord(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
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
