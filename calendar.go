package sluice

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// CalendarUnit is the length of a calendar window. The zero value,
// NoCalendar, means windows of Policy.Period.
type CalendarUnit uint8

// The calendar units.
const (
	NoCalendar CalendarUnit = iota
	// CalendarDay: from midnight to midnight; 23 or 25 hours across a
	// daylight-saving change.
	CalendarDay
	// CalendarWeek: from the start of a Monday (or a Sunday, with
	// Calendar.WeekStartsSunday) to the start of the next.
	CalendarWeek
	// CalendarMonth: from the start of the 1st to the start of the 1st of
	// the next month (28 to 31 days).
	CalendarMonth
	// CalendarYear: from the start of 1 January to the start of the next
	// (365 or 366 days).
	CalendarYear
	numCalendarUnits
)

var calendarUnitNames = [numCalendarUnits]string{"", "calendar_day", "calendar_week", "calendar_month", "calendar_year"}

// String returns the unit's name as configuration files write it:
// calendar_day, calendar_week, calendar_month or calendar_year ("" for
// NoCalendar).
func (u CalendarUnit) String() string {
	if u < numCalendarUnits {
		return calendarUnitNames[u]
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// ParseCalendarUnit returns the unit with the given name (calendar_day,
// calendar_week, calendar_month or calendar_year); ok is false for any
// other name.
func ParseCalendarUnit(name string) (u CalendarUnit, ok bool) {
	for i := CalendarDay; i < numCalendarUnits; i++ {
		if calendarUnitNames[i] == name {
			return i, true
		}
	}
	return NoCalendar, false
}

// Calendar places a window policy's windows on the civil calendar of a time
// zone, so that a quota resets when the customers' calendars say it does:
// at midnight, on Mondays, on the 1st of the month, on 1 January.
//
// A window runs from the start of a day, week, month or year in Zone to the
// start of the next one. The start of a date is the first instant at which
// the zone's clock reads its midnight or later (after a daylight-saving
// gap that skips midnight, the end of the gap). An instant exactly on a
// boundary belongs to the window it starts.
type Calendar struct {
	// Unit is the length of the windows; NoCalendar means none.
	Unit CalendarUnit
	// Zone is the time zone whose calendar counts; nil means UTC.
	Zone *time.Location
	// WeekStartsSunday makes CalendarWeek windows start on Sunday instead
	// of Monday (ISO 8601). Only weeks may set it.
	WeekStartsSunday bool
}

// IsZero reports whether c is the zero Calendar: no calendar windows.
func (c Calendar) IsZero() bool { return c == Calendar{} }

// Location returns c's zone: Zone, or UTC when it is nil.
func (c Calendar) Location() *time.Location {
	if c.Zone == nil {
		return time.UTC
	}
	return c.Zone
}

// String returns c as "calendar_month Europe/Berlin", with
// "(weeks from sunday)" for weeks that start on Sunday.
func (c Calendar) String() string {
	s := c.Unit.String() + " " + c.Location().String()
	if c.WeekStartsSunday {
		s += " (weeks from sunday)"
	}
	return s
}

// FixedCalendarWindow returns a fixed-window policy of limit units per
// calendar window of c: "10,000 per calendar month in Europe/Berlin" is
//
//	sluice.FixedCalendarWindow(10_000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin})
func FixedCalendarWindow(limit int64, c Calendar) Policy {
	return Policy{Algorithm: FixedWindowAlgorithm, Limit: limit, Calendar: c}
}

// SlidingCalendarWindow returns a sliding-window-counter policy over
// calendar windows of c: the previous window's count is weighted by the
// fraction of the current window still to come (see docs/algorithms.md).
func SlidingCalendarWindow(limit int64, c Calendar) Policy {
	return Policy{Algorithm: SlidingWindowAlgorithm, Limit: limit, Calendar: c}
}

// calendarProblem returns what is wrong with p's calendar, or "" when it
// is valid or p has none.
func (p Policy) calendarProblem() string {
	c := p.Calendar
	switch {
	case c.IsZero():
		return ""
	case c.Unit == NoCalendar:
		return "a calendar zone or week start needs a calendar unit (calendar_day, calendar_week, calendar_month or calendar_year)"
	case c.Unit >= numCalendarUnits:
		return fmt.Sprintf("unknown calendar unit %d", uint8(c.Unit))
	case p.Algorithm != FixedWindowAlgorithm && p.Algorithm != SlidingWindowAlgorithm:
		return fmt.Sprintf("%s cannot use calendar windows (only fixed_window and sliding_window can); give it a period such as 720h instead", p.Algorithm)
	case p.Period != 0:
		return fmt.Sprintf("a %s policy takes its windows from the calendar; remove period (got %v)", c.Unit, p.Period)
	case c.WeekStartsSunday && c.Unit != CalendarWeek:
		return fmt.Sprintf("week_starts applies to calendar_week only, not %s", c.Unit)
	}
	return ""
}

// Window returns the window of p that holds t, [start, end), for the
// window algorithms (fixed_window and sliding_window): the calendar window
// in p's zone, with start and end in that zone, or the Period-long window
// aligned to a multiple of Period since the Unix epoch, in UTC. ok is false
// for the other algorithms and for an invalid p.
func (p Policy) Window(t time.Time) (start, end time.Time, ok bool) {
	if (p.Algorithm != FixedWindowAlgorithm && p.Algorithm != SlidingWindowAlgorithm) || p.Validate() != nil {
		return time.Time{}, time.Time{}, false
	}
	us := t.UnixMicro()
	if p.Calendar.Unit != NoCalendar {
		loc := p.Calendar.Location()
		b := p.calendar().Bounds(us)
		return time.UnixMicro(b.Start).In(loc), time.UnixMicro(b.End).In(loc), true
	}
	period := int64(p.Period / time.Microsecond)
	ws := algo.WindowStart(us, period)
	return time.UnixMicro(ws).UTC(), time.UnixMicro(ws + period).UTC(), true
}

// calendar returns p's calendar in the algorithms' terms, or nil for a
// policy without one. Each call returns a new one (with an empty cache).
func (p Policy) calendar() *algo.Calendar {
	if p.Calendar.Unit == NoCalendar {
		return nil
	}
	return algo.NewCalendar(algo.Unit(p.Calendar.Unit), p.Calendar.Location(), p.Calendar.WeekStartsSunday)
}
