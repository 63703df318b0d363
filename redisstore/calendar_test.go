package redisstore

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones must load on machines without a tz database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestCalendarWindowByRedisTime checks that the script, not the
// application, picks a calendar window: the Go side sends the window
// starts around its own clock, and the script places its own time among
// them. With the script's clock at 23:59:59 on Berlin's day of 23 hours
// (2026-03-29), the window ends a second later whatever the application's
// clock says, as long as the two clocks are less than a window apart; a
// larger skew is an error, never a decision in the wrong window.
func TestCalendarWindowByRedisTime(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	p := sluice.FixedCalendarWindow(1, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin})
	redisNow := time.Date(2026, 3, 29, 23, 59, 59, 0, berlin)
	nowArg, err := st.timeArg(redisNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, skew := range []time.Duration{-20 * time.Hour, -time.Hour, 0, time.Second, time.Hour, 20 * time.Hour} {
		req := sluice.Request{Policy: &p, Key: "skew" + skew.String(), Cost: 1}
		c, err := st.check(&req)
		if err != nil {
			t.Fatal(err)
		}
		keys, args, wire, err := st.oneArgs(c, c.key(st.prefix, req.Key), &req, opAllow, nowArg, redisNow.Add(skew), "")
		if err != nil {
			t.Fatal(err)
		}
		vals, err := st.eval(t.Context(), st.single[p.Algorithm], keys, args, wire)
		if err != nil {
			t.Fatalf("skew %v: %v", skew, err)
		}
		v, _, _, err := st.oneReply(vals)
		if err != nil {
			t.Fatal(err)
		}
		d, err := parseDecision(&p, v[:])
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.ResetAfter != time.Second {
			t.Errorf("skew %v: %+v, want allowed with ResetAfter 1s (the end of the day on the script's clock)", skew, d)
		}
	}
	for _, skew := range []time.Duration{-72 * time.Hour, 72 * time.Hour} {
		req := sluice.Request{Policy: &p, Key: "far", Cost: 1}
		c, _ := st.check(&req)
		keys, args, wire, err := st.oneArgs(c, c.key(st.prefix, req.Key), &req, opAllow, nowArg, redisNow.Add(skew), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.eval(t.Context(), st.single[p.Algorithm], keys, args, wire)
		if err == nil || !strings.Contains(err.Error(), "outside the calendar windows") {
			t.Errorf("skew %v: error %v, want one about the calendar windows", skew, err)
		}
	}
}

// TestCalendarKeys checks that calendar policies keep their own state:
// their units, zones and week starts are part of the key.
func TestCalendarKeys(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]sluice.Policy{}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(5, 24*time.Hour),
		sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarDay}),
		sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}),
		sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarWeek}),
		sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarWeek, WeekStartsSunday: true}),
		sluice.SlidingCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarWeek}),
	} {
		c := compile(p)
		if c.err != nil {
			t.Fatal(c.err)
		}
		k := c.key("", "k")
		if q, dup := seen[k]; dup {
			t.Errorf("%v and %v share key %q", q, p, k)
		}
		seen[k] = p
	}
	if got, want := compile(sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin})).key("", "k"), "{k:k}:fw:5:calendar_month@Europe/Berlin:0"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
}
