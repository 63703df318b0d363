package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestSimulateCalendar replays four requests a minute apart, 30 s apart,
// across the end of March in New York (2026-04-01T04:00:00Z): the fourth
// is refused until midnight, the first of April starts a 30-day window.
func TestSimulateCalendar(t *testing.T) {
	trace := "t_ms,key\n"
	for i := range 8 {
		trace += strings.Join([]string{strconv.FormatInt(1775015880000+int64(i)*30000, 10), "client-1"}, ",") + "\n"
	}
	r := runOK(t, strings.NewReader(trace), "simulate", "--algorithm", "fixed_window", "--limit", "3",
		"--period", "calendar_month", "--time-zone", "America/New_York", "--format", "jsonl")
	want := `{"t":1775015880000,"key":"client-1","cost":1,"allowed":true,"remaining":2,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":120000}
{"t":1775015910000,"key":"client-1","cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":90000}
{"t":1775015940000,"key":"client-1","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":60000}
{"t":1775015970000,"key":"client-1","cost":1,"allowed":false,"remaining":0,"retry_after_ms":30000,"delay_ms":0,"reset_after_ms":30000}
{"t":1775016000000,"key":"client-1","cost":1,"allowed":true,"remaining":2,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":2592000000}
{"t":1775016030000,"key":"client-1","cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":2591970000}
{"t":1775016060000,"key":"client-1","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":2591940000}
{"t":1775016090000,"key":"client-1","cost":1,"allowed":false,"remaining":0,"retry_after_ms":2591910000,"delay_ms":0,"reset_after_ms":2591910000}
`
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "token_bucket", "--period", "calendar_month"}, "token_bucket cannot use calendar windows"},
		{[]string{"--algorithm", "fixed_window", "--period", "calendar_month", "--time-zone", "Mars/Olympus"}, `unknown time zone "Mars/Olympus"`},
		{[]string{"--algorithm", "fixed_window", "--period", "1h", "--time-zone", "UTC"}, "apply only to a calendar --period"},
		{[]string{"--algorithm", "fixed_window", "--period", "calendar_day", "--week-starts", "sunday"}, "week_starts applies to calendar_week only"},
		{[]string{"--algorithm", "fixed_window", "--period", "calendar_day", "--pattern", "burst", "--rate", "1", "--duration", "1h"}, "needs a duration as --period"},
	} {
		args := append([]string{"simulate", "--limit", "3"}, tt.args...)
		if !strings.Contains(tt.want, "--period") {
			args = append(args, "--trace", "-")
		}
		r := runSluice(t, strings.NewReader(trace), args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}
