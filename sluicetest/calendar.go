package sluicetest

import (
	"testing"
	"time"
	// The calendar subtests and policies name zones; the suite must run
	// on machines without a system time zone database.
	_ "time/tzdata"

	"github.com/sluicehq/sluice"
)

// zone loads a time zone from the embedded database; the names used here
// are in every release of it.
func zone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic("sluicetest: " + err.Error())
	}
	return loc
}

// calendarCase is a timeline of a calendar policy, timed from origin.
type calendarCase struct {
	name   string
	policy sluice.Policy
	origin string // RFC 3339
	rows   []row
}

const hour, day = time.Hour, 24 * time.Hour

// calendarCases are timelines of calendar windows worked out by hand (the
// comments show the arithmetic). A request exactly on a boundary belongs
// to the new window.
func calendarCases() []calendarCase {
	berlin := zone("Europe/Berlin")
	return []calendarCase{
		{
			// March 2026 in Berlin ends at 2026-04-01T00:00+02:00; April
			// has 30 days.
			"fixed/berlin month end", sluice.FixedCalendarWindow(3, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin}),
			"2026-03-31T23:59:00+02:00", []row{
				{at: 0, cost: 2, allowed: true, remaining: 1, reset: 60 * sec},
				{at: 30 * sec, cost: 2, remaining: 1, retry: 30 * sec, reset: 30 * sec},
				{at: 60*sec - us, cost: 1, allowed: true, remaining: 0, reset: ms},
				{at: 60 * sec, cost: 3, allowed: true, remaining: 0, reset: 30 * day},
				{at: 60 * sec, cost: 1, peek: true, remaining: 0, retry: 30 * day, reset: 30 * day},
				{at: 60 * sec, cost: 4, remaining: 0, retry: never, reset: 30 * day},
			},
		},
		{
			// 2026-03-29 in Berlin is 23 hours long.
			"fixed/berlin day of 23 hours", sluice.FixedCalendarWindow(2, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}),
			"2026-03-28T23:30:00+01:00", []row{
				{at: 0, cost: 2, allowed: true, remaining: 0, reset: 30 * time.Minute},
				{at: 30 * time.Minute, cost: 1, allowed: true, remaining: 1, reset: 23 * hour},
				{at: 30*time.Minute + 22*hour, cost: 1, allowed: true, remaining: 0, reset: hour},
				{at: 30*time.Minute + 23*hour, cost: 2, allowed: true, remaining: 0, reset: 24 * hour},
			},
		},
		{
			"fixed/utc feb 29", sluice.FixedCalendarWindow(1, sluice.Calendar{Unit: sluice.CalendarDay}),
			"2028-02-28T23:00:00Z", []row{
				{at: 0, cost: 1, allowed: true, remaining: 0, reset: hour},
				{at: hour, cost: 1, allowed: true, remaining: 0, reset: 24 * hour},
				{at: 13 * hour, cost: 1, remaining: 0, retry: 12 * hour, reset: 12 * hour},
			},
		},
		{
			"fixed/utc year end", sluice.FixedCalendarWindow(2, sluice.Calendar{Unit: sluice.CalendarYear}),
			"2026-12-31T23:59:59Z", []row{
				{at: 0, cost: 2, allowed: true, remaining: 0, reset: sec},
				{at: sec, cost: 2, allowed: true, remaining: 0, reset: 365 * day},
			},
		},
		{
			// L = 10 per Berlin day across 2026-03-29 (23 hours, from
			// 2026-03-28T23:00Z to 2026-03-29T22:00Z).
			"sliding/berlin day of 23 hours", sluice.SlidingCalendarWindow(10, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}),
			"2026-03-28T22:00:00Z", []row{
				{at: 0, cost: 6, allowed: true, remaining: 4, reset: 24 * hour},
				// The 29th's first instant: prev 6 weighs 23h/23h.
				{at: hour, cost: 4, allowed: true, remaining: 0, reset: 47 * hour},
				// 10:30Z: 6·11.5/23 = 3; 3 + 4 + 4 > 10 until
				// 6·(E−t)/23h ≤ 2, at 14:20Z.
				{at: 12*hour + 30*time.Minute, cost: 4, remaining: 3, retry: 3*hour + 50*time.Minute, reset: 35*hour + 30*time.Minute},
				{at: 16*hour + 20*time.Minute, cost: 4, allowed: true, remaining: 0, reset: 31*hour + 40*time.Minute},
				// The 30th (24 hours): prev 8 weighs 1.
				{at: 24 * hour, cost: 1, allowed: true, remaining: 1, reset: 48 * hour},
			},
		},
		{
			// L = 100 per UTC month from January (31 days) into February
			// (28 days).
			"sliding/utc month end", sluice.SlidingCalendarWindow(100, sluice.Calendar{Unit: sluice.CalendarMonth}),
			"2026-01-31T00:00:00Z", []row{
				{at: 0, cost: 90, allowed: true, remaining: 10, reset: 29 * day},
				{at: day, cost: 10, allowed: true, remaining: 0, reset: 59 * day},
				// Feb 8: 90·21/28 = 67.5; + 10 + 20 = 97.5 ≤ 100.
				{at: 8 * day, cost: 20, allowed: true, remaining: 2, reset: 52 * day},
				// 97.5 + 3 > 100 until 90·(E−t)/28d ≤ 67, at 03:44Z.
				{at: 8 * day, cost: 3, remaining: 2, retry: 3*hour + 44*time.Minute, reset: 52 * day},
				{at: 8*day + 3*hour + 44*time.Minute, cost: 3, allowed: true, remaining: 0, reset: 52*day - 3*hour - 44*time.Minute},
			},
		},
	}
}

// calendar replays the calendar timelines and checks every field of every
// decision.
func (s *suite) calendar(t *testing.T) {
	s.needCallerTime(t)
	for _, tc := range calendarCases() {
		t.Run(tc.name, func(t *testing.T) {
			origin, err := time.Parse(time.RFC3339, tc.origin)
			if err != nil {
				t.Fatal(err)
			}
			runRowsFrom(t, s.newStore(t), tc.policy, "calendar", origin, tc.rows)
		})
	}
}

// CalendarTracePolicies returns calendar policies for RandomTrace: fixed
// and sliding windows of every unit, in UTC and in zones with daylight
// saving (Europe/Berlin, America/New_York, and Australia/Lord_Howe, whose
// clocks change by half an hour), with weeks from Monday and from Sunday.
func CalendarTracePolicies() []sluice.Policy {
	berlin, ny, lh := zone("Europe/Berlin"), zone("America/New_York"), zone("Australia/Lord_Howe")
	cal := func(u sluice.CalendarUnit, loc *time.Location) sluice.Calendar {
		return sluice.Calendar{Unit: u, Zone: loc}
	}
	return []sluice.Policy{
		sluice.FixedCalendarWindow(7, cal(sluice.CalendarDay, berlin)).Named("day-berlin"),
		sluice.SlidingCalendarWindow(9, cal(sluice.CalendarDay, berlin)).Named("sliding-day-berlin"),
		sluice.SlidingCalendarWindow(999_999_937, cal(sluice.CalendarDay, lh)).Named("sliding-day-lord-howe"),
		sluice.FixedCalendarWindow(20, cal(sluice.CalendarWeek, ny)).Named("week-ny"),
		sluice.SlidingCalendarWindow(20, sluice.Calendar{Unit: sluice.CalendarWeek, Zone: ny, WeekStartsSunday: true}).Named("sliding-week-ny-sunday"),
		sluice.FixedCalendarWindow(40, cal(sluice.CalendarMonth, nil)).Named("month-utc"),
		sluice.SlidingCalendarWindow(40, cal(sluice.CalendarMonth, berlin)).Named("sliding-month-berlin"),
		sluice.SlidingCalendarWindow(sluice.MaxLimit, cal(sluice.CalendarMonth, ny)).Named("sliding-month-huge"),
		sluice.FixedCalendarWindow(100, cal(sluice.CalendarYear, berlin)).Named("year-berlin"),
		sluice.SlidingCalendarWindow(100, cal(sluice.CalendarYear, nil)).Named("sliding-year-utc"),
	}
}

// CalendarTraceStarts returns start times for RandomTrace with calendar
// policies, each a few days before an edge of the calendar: Berlin's
// change to summer time (a day of 23 hours), New York's and Berlin's
// change back (25 hours), the end of a 31-day month, Feb 29 and a year
// end. With the default gaps (up to 6 hours) a trace of 2000 steps spans
// about three weeks.
func CalendarTraceStarts() []time.Time {
	return []time.Time{
		time.Date(2026, 3, 25, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 12, 27, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 2, 24, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 10, 25, 0, 0, 0, 0, time.UTC),
	}
}
