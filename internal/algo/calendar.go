package algo

import (
	"sync/atomic"
	"time"
)

// Unit is the length of a calendar window.
type Unit uint8

// The calendar units. The zero Unit means no calendar.
const (
	Day Unit = iota + 1
	Week
	Month
	Year
)

// Longest is the longest window of unit u in any zone, in microseconds: a
// day of 25 hours, a week, month or year with such a day in it. Params of a
// calendar policy carry it as their Period, which Check bounds; the
// decisions never read it.
func (u Unit) Longest() int64 {
	const day, hour = 24 * 3600 * 1_000_000, 3600 * 1_000_000
	switch u {
	case Week:
		return 7*day + hour
	case Month:
		return 31*day + hour
	case Year:
		return 366*day + hour
	}
	return day + hour
}

// Bounds are four consecutive window starts around an instant t: the window
// holding t is [Start, End), the one before it [Prev, Start) and the one
// after it [End, After). Prev < Start ≤ t < End < After.
type Bounds struct {
	Prev, Start, End, After int64
}

// periodic returns the Bounds of now among windows of length period
// aligned to multiples of it since the Unix epoch.
func periodic(now, period int64) Bounds {
	ws := WindowStart(now, period)
	return Bounds{Prev: ws - period, Start: ws, End: ws + period, After: ws + 2*period}
}

// Calendar places windows on the civil calendar of a time zone: a window
// runs from the start of a day, week (Monday or Sunday), month or year in
// Loc to the start of the next one.
//
// The start of a civil date is the first instant at which the zone's wall
// clock reads midnight of that date or later: usually 00:00 of the date,
// and the end of the gap when a daylight-saving change skips midnight.
// A date the zone skips entirely (Samoa skipped 30 December 2011) has no
// window of its own. Windows are therefore 23, 24 or 25 hours long for a
// day in a zone with daylight saving, 28 to 31 days (± an hour) for a
// month, and whole seconds long in every case.
//
// A Calendar must not be copied after first use (it caches the last
// window it computed, which makes repeated decisions in one window cheap);
// it is safe for concurrent use.
type Calendar struct {
	Unit Unit
	// Loc is the zone; nil means UTC.
	Loc *time.Location
	// Sunday makes weeks start on Sunday instead of Monday (ISO 8601).
	Sunday bool

	last atomic.Pointer[Bounds]
}

// NewCalendar returns a calendar of unit u in loc (nil means UTC), with
// weeks starting on Sunday when sunday is set.
func NewCalendar(u Unit, loc *time.Location, sunday bool) *Calendar {
	if loc == nil {
		loc = time.UTC
	}
	return &Calendar{Unit: u, Loc: loc, Sunday: sunday}
}

// Bounds returns the windows around t, an instant in µs since the Unix
// epoch.
func (c *Calendar) Bounds(t int64) Bounds {
	if b := c.last.Load(); b != nil && b.Start <= t && t < b.End {
		return *b
	}
	b := c.bounds(t)
	c.last.Store(&b)
	return b
}

// date is a civil date.
type date struct {
	y int
	m time.Month
	d int
}

// add returns the date n units after (or before, for negative n) d, for a
// d that starts a unit.
func (c *Calendar) add(d date, n int) date {
	switch c.Unit {
	case Week:
		d.d += 7 * n
	case Month:
		d.m += time.Month(n)
	case Year:
		d.y += n
	default:
		d.d += n
	}
	t := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC)
	return date{t.Year(), t.Month(), t.Day()}
}

// unitStart returns the first date of the unit that holds d.
func (c *Calendar) unitStart(d date) date {
	switch c.Unit {
	case Week:
		first := time.Monday
		if c.Sunday {
			first = time.Sunday
		}
		wd := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Weekday()
		back := (int(wd) - int(first) + 7) % 7
		t := time.Date(d.y, d.m, d.d-back, 0, 0, 0, 0, time.UTC)
		return date{t.Year(), t.Month(), t.Day()}
	case Month:
		return date{d.y, d.m, 1}
	case Year:
		return date{d.y, time.January, 1}
	}
	return d
}

// start returns the first instant, in µs, at which the wall clock reads
// midnight of d or later.
func (c *Calendar) start(d date) int64 {
	wall := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Unix()
	return reach(c.Loc, wall) * 1_000_000
}

// bounds computes Bounds without the cache. Each loop moves by one unit
// and ends within a few steps: t's local date is within a day of the
// window that holds t, and no zone skips more than a day.
func (c *Calendar) bounds(t int64) Bounds {
	local := time.UnixMicro(t).In(c.Loc)
	d := c.unitStart(date{local.Year(), local.Month(), local.Day()})
	s := c.start(d)
	for i := 0; s > t && i < 4; i++ {
		d = c.add(d, -1)
		s = c.start(d)
	}
	e := c.start(c.add(d, 1))
	for i := 0; e <= t && i < 4; i++ {
		d = c.add(d, 1)
		s, e = e, c.start(c.add(d, 1))
	}
	b := Bounds{Start: s, End: e}
	p := c.add(d, -1)
	b.Prev = c.start(p)
	for i := 0; b.Prev >= s && i < 4; i++ {
		p = c.add(p, -1)
		b.Prev = c.start(p)
	}
	n := c.add(d, 2)
	b.After = c.start(n)
	for i := 0; b.After <= e && i < 4; i++ {
		n = c.add(n, 1)
		b.After = c.start(n)
	}
	return b
}

// reach returns the first instant, in seconds since the Unix epoch, at
// which loc's wall clock reads wall (a civil time in seconds, counted as if
// it were UTC) or later.
//
// It starts more than a day before wall, where no offset (they stay within
// ±26 hours) can have reached it, and follows the offsets forward: under
// offset o the clock reads wall at wall − o, unless the offset changes
// before then; the change is found by bisection, and a change that jumps
// the clock past wall makes its first instant the answer. It assumes, as
// every zone's rules do, that the offset changes at most once between two
// instants 41 hours apart and back again (time.Time.ZoneBounds is not used:
// for instants past a zone's last listed transition it can report bounds
// at which the offset does not change).
func reach(loc *time.Location, wall int64) int64 {
	offset := func(u int64) int64 {
		_, o := time.Unix(u, 0).In(loc).Zone()
		return int64(o)
	}
	u := wall - 27*3600
	for range 8 {
		o := offset(u)
		c := wall - o
		if c <= u {
			return u // a change carried the clock past wall at u
		}
		if offset(c) == o {
			return c
		}
		// The first instant in (u, c] whose offset is not o.
		lo, hi := u, c
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if offset(mid) == o {
				lo = mid
			} else {
				hi = mid
			}
		}
		u = hi
	}
	return u
}
