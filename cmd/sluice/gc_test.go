package main

import (
	"runtime/debug"
	"testing"
)

// TestSetServeGC: sluice serve runs with GOGC 200 unless the environment
// sets GOGC, whose value then stays.
func TestSetServeGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	if got, fromEnv := setServeGC(func(string) string { return "" }); got != 200 || fromEnv {
		t.Errorf("without GOGC: %d, %v; want 200, false", got, fromEnv)
	}
	if now := debug.SetGCPercent(77); now != 200 {
		t.Errorf("the collector's GOGC is %d, want 200", now)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "77"
		}
		return ""
	}
	if got, fromEnv := setServeGC(env); got != 77 || !fromEnv {
		t.Errorf("with GOGC=77: %d, %v; want 77, true", got, fromEnv)
	}
	if now := debug.SetGCPercent(100); now != 77 {
		t.Errorf("the collector's GOGC is %d after GOGC=77, want 77", now)
	}
}
