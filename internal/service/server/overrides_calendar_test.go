package server

import (
	"strings"
	"testing"
	"time"
)

// TestOverrideCalendar sets a calendar override through the admin API: a
// key of a per-minute limit gets 1000 per calendar month in Berlin.
func TestOverrideCalendar(t *testing.T) {
	f, _ := ovFixture(t, "", nil)
	rec := f.do("PUT", "/v1/overrides/tiny/k1", `{"limit":1000,"period":"calendar_month","time_zone":"Europe/Berlin"}`)
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"limit":1000,"period":"calendar_month","period_ms":0,"time_zone":"Europe/Berlin"`) {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Date(2026, 3, 31, 23, 59, 0, 0, berlin).Sub(start))
	want := `{"allowed":true,"limit":1000,"remaining":999,"retry_after_ms":0,"reset_after_ms":60000,"window_start":"2026-03-01T00:00:00+01:00","window_end":"2026-04-01T00:00:00+02:00","override":true}`
	f.wantCheck(t, `{"limit":"tiny","key":"k1"}`, want, "check")
	for body, msg := range map[string]string{
		`{"limit":5,"period":"calendar_month","time_zone":"Mars/Olympus"}`: `unknown time zone \"Mars/Olympus\"`,
		`{"limit":5,"period":"1h","time_zone":"UTC"}`:                      "apply only to a calendar period",
		`{"limit":5,"period":"calendar_week","week_starts":"friday"}`:      `unknown week start \"friday\"`,
		`{"limit":5,"period":"calendar_month","algorithm":"gcra"}`:         "gcra cannot use calendar windows",
	} {
		if rec := f.do("PUT", "/v1/overrides/tiny/k2", body); rec.Code != 400 || !strings.Contains(rec.Body.String(), msg) {
			t.Errorf("PUT %s = %d %s, want 400 with %q", body, rec.Code, rec.Body, msg)
		}
	}
}
