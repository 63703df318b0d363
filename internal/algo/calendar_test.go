package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the zones must load on machines without a tz database
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// at parses an RFC 3339 time into µs since the epoch.
func at(t testing.TB, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMicro()
}

// TestCalendarBounds checks the windows around instants, worked out by hand
// from the calendar and the zones' rules: Berlin's days of 23 hours (last
// Sunday of March) and 25 hours (last Sunday of October), months of 28 to
// 31 days, Feb 29, year ends, weeks from Monday and from Sunday, Santiago's
// change at midnight (the clock skips 00:00, or reads it twice) and Samoa's
// skipped day.
func TestCalendarBounds(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	santiago := mustZone(t, "America/Santiago")
	apia := mustZone(t, "Pacific/Apia")
	ny := mustZone(t, "America/New_York")
	tests := []struct {
		name                    string
		c                       *Calendar
		t                       string
		prev, start, end, after string
	}{
		{"utc day", NewCalendar(Day, nil, false), "2026-03-14T12:00:00Z",
			"2026-03-13T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z"},
		{"utc day on its first instant", NewCalendar(Day, nil, false), "2026-03-14T00:00:00Z",
			"2026-03-13T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z"},
		{"utc day on its last µs", NewCalendar(Day, nil, false), "2026-03-14T23:59:59.999999Z",
			"2026-03-13T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z"},
		{"berlin day of 23 hours", NewCalendar(Day, berlin, false), "2026-03-29T12:00:00+02:00",
			"2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"},
		{"berlin day of 25 hours", NewCalendar(Day, berlin, false), "2026-10-25T02:30:00+01:00",
			"2026-10-24T00:00:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", "2026-10-27T00:00:00+01:00"},
		{"berlin day, the instant before midnight in UTC terms", NewCalendar(Day, berlin, false), "2026-03-28T23:30:00Z",
			"2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"},
		{"utc week from monday", NewCalendar(Week, nil, false), "2026-03-14T12:00:00Z", // a Saturday
			"2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z", "2026-03-16T00:00:00Z", "2026-03-23T00:00:00Z"},
		{"utc week from sunday", NewCalendar(Week, nil, true), "2026-03-14T12:00:00Z",
			"2026-03-01T00:00:00Z", "2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-22T00:00:00Z"},
		{"utc week from sunday on a sunday", NewCalendar(Week, nil, true), "2026-03-15T00:00:00Z",
			"2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-22T00:00:00Z", "2026-03-29T00:00:00Z"},
		{"berlin week with the spring change", NewCalendar(Week, berlin, false), "2026-03-29T12:00:00+02:00",
			"2026-03-16T00:00:00+01:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", "2026-04-06T00:00:00+02:00"},
		{"utc month end of january", NewCalendar(Month, nil, false), "2026-01-31T23:59:59Z",
			"2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"utc february of a leap year", NewCalendar(Month, nil, false), "2028-02-29T12:00:00Z",
			"2028-01-01T00:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", "2028-04-01T00:00:00Z"},
		{"utc feb 29", NewCalendar(Day, nil, false), "2028-02-29T23:00:00Z",
			"2028-02-28T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z", "2028-03-02T00:00:00Z"},
		{"berlin march", NewCalendar(Month, berlin, false), "2026-03-31T23:59:00+02:00",
			"2026-02-01T00:00:00+01:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00"},
		{"new york month", NewCalendar(Month, ny, false), "2026-03-31T23:00:00-04:00",
			"2026-02-01T00:00:00-05:00", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00", "2026-05-01T00:00:00-04:00"},
		{"utc year end", NewCalendar(Year, nil, false), "2026-12-31T23:59:59.999999Z",
			"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"berlin new year", NewCalendar(Year, berlin, false), "2027-01-01T00:00:00+01:00",
			"2026-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00", "2029-01-01T00:00:00+01:00"},
		// Santiago, 2022-09-11: clocks go from 00:00 to 01:00, so the day
		// starts at 01:00 (04:00 UTC).
		{"santiago day whose midnight is skipped", NewCalendar(Day, santiago, false), "2022-09-11T12:00:00-03:00",
			"2022-09-10T00:00:00-04:00", "2022-09-11T01:00:00-03:00", "2022-09-12T00:00:00-03:00", "2022-09-13T00:00:00-03:00"},
		// Santiago, 2022-04-03 03:00 UTC: clocks reach 24:00 of the 2nd and
		// go back to 23:00; the hour is read twice, midnight once (04:00
		// UTC), and the 2nd is 25 hours long.
		{"santiago day of 25 hours, its last hour read twice", NewCalendar(Day, santiago, false), "2022-04-03T03:30:00Z",
			"2022-04-01T00:00:00-03:00", "2022-04-02T00:00:00-03:00", "2022-04-03T00:00:00-04:00", "2022-04-04T00:00:00-04:00"},
		// Samoa skipped 2011-12-30: the 29th is followed by the 31st.
		{"apia around its skipped day", NewCalendar(Day, apia, false), "2011-12-29T12:00:00-10:00",
			"2011-12-28T00:00:00-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c.Bounds(at(t, tt.t))
			want := Bounds{Prev: at(t, tt.prev), Start: at(t, tt.start), End: at(t, tt.end), After: at(t, tt.after)}
			if got != want {
				t.Errorf("Bounds(%s) = %s, want %s", tt.t, fmtBounds(got, tt.c.Loc), fmtBounds(want, tt.c.Loc))
			}
			// The cached answer is the same.
			if again := tt.c.Bounds(at(t, tt.t)); again != want {
				t.Errorf("Bounds(%s) again = %s, want %s", tt.t, fmtBounds(again, tt.c.Loc), fmtBounds(want, tt.c.Loc))
			}
		})
	}
}

func fmtBounds(b Bounds, loc *time.Location) string {
	f := func(us int64) string { return time.UnixMicro(us).In(loc).Format(time.RFC3339Nano) }
	return fmt.Sprintf("{%s %s %s %s}", f(b.Prev), f(b.Start), f(b.End), f(b.After))
}

// TestCalendarBoundsProperties checks, at random instants from 1970 to
// 2100 in zones with and without daylight saving, that the windows are
// consecutive calendar starts: Prev < Start ≤ t < End < After, every
// instant of a window maps to that window, each start is the first instant
// at which the wall clock reads midnight of the first date of a unit, and
// neighbouring windows agree on their shared boundaries.
func TestCalendarBoundsProperties(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "America/Santiago", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata", "America/St_Johns"}
	rng := rand.New(rand.NewPCG(16, 1))
	lo, hi := at(t, "1970-01-02T00:00:00Z"), at(t, "2100-01-01T00:00:00Z")
	for _, z := range zones {
		loc := mustZone(t, z)
		for _, u := range []Unit{Day, Week, Month, Year} {
			for _, sunday := range []bool{false, true} {
				if sunday && u != Week {
					continue
				}
				c := NewCalendar(u, loc, sunday)
				for range 300 {
					ts := lo + rng.Int64N(hi-lo)
					checkBounds(t, c, ts)
				}
			}
		}
	}
}

func checkBounds(t *testing.T, c *Calendar, ts int64) {
	t.Helper()
	b := c.Bounds(ts)
	if !(b.Prev < b.Start && b.Start <= ts && ts < b.End && b.End < b.After) {
		t.Fatalf("%v %v: Bounds(%d) = %s: not ordered around t", c.Unit, c.Loc, ts, fmtBounds(b, c.Loc))
	}
	for _, s := range []int64{b.Prev, b.Start, b.End, b.After} {
		if !calendarStart(c, s) {
			t.Fatalf("%v %v: Bounds(%d) = %s: %s is not the start of a unit", c.Unit, c.Loc, ts, fmtBounds(b, c.Loc), time.UnixMicro(s).In(c.Loc))
		}
	}
	// Fresh calendars, so that the cache plays no part.
	f := NewCalendar(c.Unit, c.Loc, c.Sunday)
	for _, probe := range []struct {
		t    int64
		want Bounds
	}{
		{b.Start, b},
		{b.End - 1, b},
		{b.End, Bounds{b.Start, b.End, b.After, 0}},
		{b.Start - 1, Bounds{0, b.Prev, b.Start, b.End}},
	} {
		got := f.bounds(probe.t)
		if probe.want.Prev == 0 {
			got.Prev = 0
		}
		if probe.want.After == 0 {
			got.After = 0
		}
		if got != probe.want {
			t.Fatalf("%v %v: bounds(%d) = %s, want %s (from Bounds(%d) = %s)", c.Unit, c.Loc, probe.t,
				fmtBounds(got, c.Loc), fmtBounds(probe.want, c.Loc), ts, fmtBounds(b, c.Loc))
		}
	}
}

// calendarStart reports whether s (µs) is whole seconds and the first
// instant at which c's wall clock reads midnight of the first date of a
// unit or later: at s the clock reads a time of such a date D at or past
// midnight, within the first day, and one second before it, a time before
// D's midnight.
func calendarStart(c *Calendar, s int64) bool {
	if s%1_000_000 != 0 {
		return false
	}
	wall := func(u int64) int64 {
		tm := time.Unix(u, 0).In(c.Loc)
		return time.Date(tm.Year(), tm.Month(), tm.Day(), tm.Hour(), tm.Minute(), tm.Second(), 0, time.UTC).Unix()
	}
	w := wall(s / 1_000_000)
	tm := time.Unix(w, 0).UTC()
	d := date{tm.Year(), tm.Month(), tm.Day()}
	if c.unitStart(d) != d {
		// A gap may carry the start past the first date, never past
		// its first day: the date must follow a unit start.
		y := time.Unix(w-24*3600, 0).UTC()
		d = date{y.Year(), y.Month(), y.Day()}
		if c.unitStart(d) != d {
			return false
		}
	}
	midnight := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Unix()
	return w >= midnight && wall(s/1_000_000-1) < midnight
}

// TestCalendarUTCDayIsPeriodic runs both window algorithms over random
// traces with UTC calendar days and with a Period of 24 hours, which are
// the same windows (UTC days are multiples of 86,400 s since the epoch):
// every decision must be the same.
func TestCalendarUTCDayIsPeriodic(t *testing.T) {
	for _, a := range []algorithm{fixedWindow, slidingWindow} {
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, 16))
			limit := logUniform(rng, 1, 1_000_000)
			p := Params{Limit: limit, Burst: limit, Period: uDay}
			cal := Params{Limit: limit, Burst: limit, Period: Day.Longest(), Cal: NewCalendar(Day, time.UTC, false)}
			periodic, calendar := newLimiter(a, p, 0), newLimiter(a, cal, 0)
			shape := traceShape{n: 2000, start: origin2026 + rng.Int64N(uDay), maxGap: 3 * uDay}
			for i, e := range randomTrace(rng, p, limit, shape) {
				want, got := periodic.decide(e.t, e.cost), calendar.decide(e.t, e.cost)
				if got != want {
					t.Fatalf("%v seed %d L=%d event %d (t=%d cost %d): calendar %+v, periodic %+v", a, seed, limit, i, e.t, e.cost, got, want)
				}
				if calendar.win != periodic.win {
					t.Fatalf("%v seed %d event %d: calendar state %+v, periodic %+v", a, seed, i, calendar.win, periodic.win)
				}
			}
		}
	}
}

// TestCalendarFixedWindowNeverExceeds checks, over random traces in zones
// with daylight saving, that a calendar fixed window never admits more
// than L between two consecutive boundaries.
func TestCalendarFixedWindowNeverExceeds(t *testing.T) {
	for _, z := range []string{"Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"} {
		loc := mustZone(t, z)
		for _, u := range []Unit{Day, Week, Month} {
			rng := rand.New(rand.NewPCG(uint64(u), 99))
			limit := logUniform(rng, 1, 50)
			cal := NewCalendar(u, loc, false)
			p := Params{Limit: limit, Burst: limit, Period: u.Longest(), Cal: cal}
			l := newLimiter(fixedWindow, p, 0)
			shape := traceShape{n: 3000, start: at(t, "2026-01-01T00:00:00Z") + rng.Int64N(uDay), maxGap: u.Longest() / 5}
			trace := randomTrace(rng, Params{Limit: limit, Period: u.Longest() / 20}, limit, shape)
			sums := map[int64]int64{}
			for _, a := range run(l, trace) {
				b := NewCalendar(u, loc, false).bounds(a.t)
				sums[b.Start] += a.cost
				if sums[b.Start] > limit {
					t.Fatalf("%s %v: admitted %d in the window starting %v, more than L = %d", z, u, sums[b.Start], time.UnixMicro(b.Start).In(loc), limit)
				}
			}
			if len(sums) < 3 {
				t.Fatalf("%s %v: the trace spans %d windows; it should span several", z, u, len(sums))
			}
		}
	}
}

// calParams returns the Params of a calendar window policy of limit L.
func calParams(limit int64, u Unit, loc *time.Location, sunday bool) Params {
	return Params{Limit: limit, Burst: limit, Period: u.Longest(), Cal: NewCalendar(u, loc, sunday)}
}

// TestCalendarTimelines replays timelines worked out by hand for calendar
// windows (the comments show the arithmetic; times are in the zone of the
// policy unless they end in Z). A request exactly on a boundary belongs to
// the new window.
func TestCalendarTimelines(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	const h, d = time.Hour, 24 * time.Hour
	fixed := []timeline{
		{
			// March 2026 in Berlin ends at 2026-04-01T00:00+02:00; April
			// has 30 days and no change of offset.
			name: "berlin month end", p: calParams(3, Month, berlin, false),
			origin: at(t, "2026-03-31T23:59:00+02:00"),
			rows: []row{
				{t: 0, cost: 2, allowed: true, remaining: 1, resetAfter: 60 * sec},
				{t: 30 * sec, cost: 2, remaining: 1, retryAfter: 30 * sec, resetAfter: 30 * sec},
				{t: 60*sec - us, cost: 1, allowed: true, remaining: 0, resetAfter: ms}, // 1µs left, rounded up
				{t: 60 * sec, cost: 3, allowed: true, remaining: 0, resetAfter: 30 * d},
				{t: 60 * sec, cost: 1, remaining: 0, retryAfter: 30 * d, resetAfter: 30 * d},
			},
		},
		{
			// 2026-03-29 in Berlin has 23 hours: 00:00+01:00 to 00:00+02:00.
			name: "berlin day of 23 hours", p: calParams(2, Day, berlin, false),
			origin: at(t, "2026-03-28T23:30:00+01:00"),
			rows: []row{
				{t: 0, cost: 2, allowed: true, remaining: 0, resetAfter: 30 * time.Minute},
				{t: 30 * time.Minute, cost: 1, allowed: true, remaining: 1, resetAfter: 23 * h}, // 00:00+01:00
				{t: 30*time.Minute + 22*h, cost: 1, allowed: true, remaining: 0, resetAfter: h}, // 23:00+02:00
				{t: 30*time.Minute + 22*h, cost: 1, remaining: 0, retryAfter: h, resetAfter: h},
				{t: 30*time.Minute + 23*h, cost: 2, allowed: true, remaining: 0, resetAfter: 24 * h},
			},
		},
		{
			// 2026-10-25 in Berlin has 25 hours.
			name: "berlin day of 25 hours", p: calParams(1, Day, berlin, false),
			origin: at(t, "2026-10-25T00:00:00+02:00"),
			rows: []row{
				{t: 0, cost: 1, allowed: true, remaining: 0, resetAfter: 25 * h},
				{t: 24 * h, cost: 1, remaining: 0, retryAfter: h, resetAfter: h}, // 23:00+01:00
				{t: 25 * h, cost: 1, allowed: true, remaining: 0, resetAfter: 24 * h},
			},
		},
		{
			name: "utc year end", p: calParams(2, Year, time.UTC, false),
			origin: at(t, "2026-12-31T23:59:59Z"),
			rows: []row{
				{t: 0, cost: 2, allowed: true, remaining: 0, resetAfter: sec},
				{t: sec, cost: 2, allowed: true, remaining: 0, resetAfter: 365 * d},
			},
		},
		{
			name: "utc feb 29", p: calParams(1, Day, time.UTC, false),
			origin: at(t, "2028-02-28T23:00:00Z"),
			rows: []row{
				{t: 0, cost: 1, allowed: true, remaining: 0, resetAfter: h},
				{t: h, cost: 1, allowed: true, remaining: 0, resetAfter: 24 * h},           // Feb 29 00:00
				{t: 13 * h, cost: 1, remaining: 0, retryAfter: 12 * h, resetAfter: 12 * h}, // Feb 29 12:00
			},
		},
		{
			name: "utc leap february", p: calParams(5, Month, time.UTC, false),
			origin: at(t, "2028-02-29T12:00:00Z"),
			rows: []row{
				{t: 0, cost: 5, allowed: true, remaining: 0, resetAfter: 12 * h},
				{t: 12 * h, cost: 5, allowed: true, remaining: 0, resetAfter: 31 * d}, // March
			},
		},
		{
			// 2026-03-14 is a Saturday: the Monday week ends on the 16th,
			// the Sunday week on the 15th.
			name: "utc week from monday", p: calParams(1, Week, time.UTC, false),
			origin: at(t, "2026-03-14T12:00:00Z"),
			rows: []row{
				{t: 0, cost: 1, allowed: true, remaining: 0, resetAfter: 36 * h},
				{t: 12 * h, cost: 1, remaining: 0, retryAfter: 24 * h, resetAfter: 24 * h},
				{t: 36 * h, cost: 1, allowed: true, remaining: 0, resetAfter: 7 * d},
			},
		},
		{
			name: "utc week from sunday", p: calParams(1, Week, time.UTC, true),
			origin: at(t, "2026-03-14T12:00:00Z"),
			rows: []row{
				{t: 0, cost: 1, allowed: true, remaining: 0, resetAfter: 12 * h},
				{t: 12 * h, cost: 1, allowed: true, remaining: 0, resetAfter: 7 * d},
			},
		},
	}
	sliding := []timeline{
		{
			// L = 10 per day in Berlin across the day of 23 hours
			// (2026-03-29: 2026-03-28T23:00Z to 2026-03-29T22:00Z).
			name: "berlin day of 23 hours", p: calParams(10, Day, berlin, false),
			origin: at(t, "2026-03-28T22:00:00Z"),
			rows: []row{
				// The 28th: prev 0. After: the 30th starts at 22:00Z on the 29th.
				{t: 0, cost: 6, allowed: true, remaining: 4, resetAfter: 24 * h},
				// 23:00Z, the 29th's first instant: prev 6 weighs 23h/23h:
				// 6 + 0 + 4 = 10 ≤ 10. Reset: the 31st's start, 47h on.
				{t: h, cost: 4, allowed: true, remaining: 0, resetAfter: 47 * h},
				// 10:30Z: 11.5h of 23 to come: 6·1/2 = 3; 3 + 4 + 4 > 10.
				// Retry: 6·(E−t) ≤ (10−4−4)·23h ⇔ E−t ≤ 7h40m: 14:20Z.
				{t: 12*h + 30*time.Minute, cost: 4, remaining: 3, retryAfter: 3*h + 50*time.Minute, resetAfter: 35*h + 30*time.Minute},
				// 14:20Z: 6·(7h40m/23h) = 2; 2 + 4 + 4 = 10 ≤ 10.
				{t: 16*h + 20*time.Minute, cost: 4, allowed: true, remaining: 0, resetAfter: 31*h + 40*time.Minute},
				// 22:00Z, the 30th (24h): prev 8 weighs 1: 8 + 1 ≤ 10.
				{t: 24 * h, cost: 1, allowed: true, remaining: 1, resetAfter: 48 * h},
			},
		},
		{
			// L = 100 per UTC month from January (31 days) into
			// February (28 days).
			name: "utc month end", p: calParams(100, Month, time.UTC, false),
			origin: at(t, "2026-01-31T00:00:00Z"),
			rows: []row{
				{t: 0, cost: 90, allowed: true, remaining: 10, resetAfter: 29 * d},
				// Feb 1, first instant: prev 90 weighs 28d/28d: 90 + 10 ≤ 100.
				{t: d, cost: 10, allowed: true, remaining: 0, resetAfter: 59 * d},
				// Feb 8: 21 of 28 days to come: 90·3/4 = 67.5;
				// 67.5 + 10 + 20 = 97.5 ≤ 100; remaining floor(2.5) = 2.
				{t: 8 * d, cost: 20, allowed: true, remaining: 2, resetAfter: 52 * d},
				// 97.5 + 3 > 100. Retry: 90·(E−t) ≤ (100−3−30)·28d ⇔
				// E−t ≤ 67·28d/90 = 20d 20h 16m: Feb 8 03:44Z.
				{t: 8 * d, cost: 3, remaining: 2, retryAfter: 3*h + 44*time.Minute, resetAfter: 52 * d},
				{t: 8*d + 3*h + 44*time.Minute, cost: 3, allowed: true, remaining: 0, resetAfter: 52*d - 3*h - 44*time.Minute},
			},
		},
	}
	runTimelines(t, []algorithm{fixedWindow}, fixed)
	runTimelines(t, []algorithm{slidingWindow}, sliding)
}
