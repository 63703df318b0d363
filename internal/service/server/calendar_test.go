package server

import (
	"net/http"
	"testing"
	"time"
)

const calendarYAML = `
limits:
  monthly:
    algorithm: fixed_window
    limit: 3
    period: calendar_month
    time_zone: Europe/Berlin
  daily:
    algorithm: sliding_window
    limit: 10
    period: calendar_day
    time_zone: Europe/Berlin
`

// TestCheckCalendar checks a monthly quota in Berlin on the 31st at 23:59
// and on the 1st at 00:00: reset_after_ms counts down to midnight in
// Berlin, the window's start and end are in the zone, and RateLimit-Policy's
// w is the current month's length.
func TestCheckCalendar(t *testing.T) {
	f := newFixture(t, calendarYAML)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Date(2026, 3, 31, 23, 59, 0, 0, berlin).Sub(start))
	for i, want := range []struct {
		body, policy, limit string
	}{
		{`{"allowed":true,"limit":3,"remaining":2,"retry_after_ms":0,"reset_after_ms":60000,"window_start":"2026-03-01T00:00:00+01:00","window_end":"2026-04-01T00:00:00+02:00"}` + "\n",
			// March 2026 in Berlin: 31 days less the hour of the change.
			`"monthly";q=3;w=2674800`, `"monthly";r=2;t=60`},
		{`{"allowed":true,"limit":3,"remaining":2,"retry_after_ms":0,"reset_after_ms":2592000000,"window_start":"2026-04-01T00:00:00+02:00","window_end":"2026-05-01T00:00:00+02:00"}` + "\n",
			`"monthly";q=3;w=2592000`, `"monthly";r=2;t=2592000`},
	} {
		if i == 1 {
			f.clock.Advance(time.Minute) // 2026-04-01T00:00:00+02:00
		}
		rec := f.check(`{"limit":"monthly","key":"k","cost":1}`)
		if rec.Code != http.StatusOK || rec.Body.String() != want.body {
			t.Errorf("check %d: %d %s, want 200 %s", i, rec.Code, rec.Body, want.body)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != want.policy {
			t.Errorf("check %d: RateLimit-Policy = %q, want %q", i, got, want.policy)
		}
		if got := rec.Header().Get("RateLimit"); got != want.limit {
			t.Errorf("check %d: RateLimit = %q, want %q", i, got, want.limit)
		}
	}
}

// TestExplainCalendar explains a sliding calendar day in Berlin on the day
// of 23 hours (2026-03-29): 6 spent on the 28th, 4 at 10:30 UTC on the
// 29th, with 11.5 of its 23 hours to come: the estimate is 6·11.5/23 + 4.
func TestExplainCalendar(t *testing.T) {
	f := newFixture(t, calendarYAML)
	f.clock.Advance(time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC).Sub(start))
	if rec := f.check(`{"limit":"daily","key":"k","cost":6}`); rec.Code != http.StatusOK {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	f.clock.Advance(12*time.Hour + 30*time.Minute)
	if rec := f.check(`{"limit":"daily","key":"k","cost":4}`); rec.Code != http.StatusOK {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	code, body := f.explain(t, "limit=daily&key=k")
	if code != http.StatusOK {
		t.Fatalf("explain: %d %v", code, body)
	}
	state := body["state"].(map[string]any)
	policy := body["policy"].(map[string]any)
	for k, want := range map[string]any{
		"window_start": "2026-03-29T00:00:00.000000+01:00",
		"window_end":   "2026-03-30T00:00:00.000000+02:00",
		"estimate":     "7",
		"previous":     6.0,
		"current":      4.0,
	} {
		if state[k] != want {
			t.Errorf("state.%s = %v, want %v", k, state[k], want)
		}
	}
	if policy["period"] != "calendar_day" || policy["time_zone"] != "Europe/Berlin" || policy["period_ms"] != 0.0 {
		t.Errorf("policy = %v, want calendar_day in Europe/Berlin, period_ms 0", policy)
	}
	const summary = "The estimate is 7 of 10: 6 in the previous window, weighted by the fraction of this day still to come (11h30m of 23h), plus 4 in the current one. A request of cost 1 would be allowed, leaving 2."
	if body["summary"] != summary {
		t.Errorf("summary = %q\nwant      %q", body["summary"], summary)
	}
}
