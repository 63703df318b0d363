package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// calendarNames are the calendar periods, as configuration files write
// them.
var calendarNames = []string{"calendar_day", "calendar_week", "calendar_month", "calendar_year"}

// IsCalendarPeriod reports whether a period as written (in a limit, an
// override or a flag) names a calendar period rather than a duration:
// whether it starts with "calendar_".
func IsCalendarPeriod(s string) bool { return strings.HasPrefix(s, "calendar_") }

// ParseCalendar returns the calendar of a period written as
// calendar_day, calendar_week, calendar_month or calendar_year, in the
// zone named zone (an IANA name; empty means UTC), with weeks starting on
// weekStarts ("monday", the default when empty, or "sunday"; only for
// calendar_week).
func ParseCalendar(period, zone, weekStarts string) (sluice.Calendar, error) {
	var c sluice.Calendar
	u, ok := sluice.ParseCalendarUnit(period)
	if !ok {
		return c, fmt.Errorf("unknown calendar period %q (want %s)%s", period, list(calendarNames), suggest(period, calendarNames))
	}
	c.Unit = u
	if zone != "" {
		loc, err := LoadZone(zone)
		if err != nil {
			return c, err
		}
		c.Zone = loc
	}
	switch weekStarts {
	case "", "monday":
	case "sunday":
		if u != sluice.CalendarWeek {
			return c, fmt.Errorf("week_starts applies to calendar_week only, not %s", period)
		}
		c.WeekStartsSunday = true
	default:
		return c, fmt.Errorf("unknown week start %q (want monday or sunday)", weekStarts)
	}
	return c, nil
}

// LoadZone loads the time zone with the given IANA name, such as
// Europe/Berlin, from the system's time zone database or, where there is
// none, from the one built into sluice. It refuses "Local" and the empty
// name, whose meaning depends on the machine.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("time zone %q depends on the machine; name an IANA zone such as Europe/Berlin, or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: want an IANA name such as Europe/Berlin, America/New_York or UTC", name)
	}
	return loc, nil
}

// FormatPeriod writes a policy's period as configuration files do: a
// duration such as 1h or 30d, or for a calendar policy its unit, zone and
// week start, such as "calendar_month Europe/Berlin".
func FormatPeriod(p sluice.Policy) string {
	if p.Calendar.Unit != sluice.NoCalendar {
		return p.Calendar.String()
	}
	return formatDuration(p.Period)
}
