package xdsconfig

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 10 * time.Second, Max: 60 * time.Second}
	var d time.Duration
	var got []time.Duration
	for range 5 {
		d = b.next(d)
		got = append(got, d)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 60 * time.Second, 60 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits = %v, want %v", got, want)
		}
	}
	if j := b.jittered(40 * time.Second); j != 40*time.Second {
		t.Errorf("without Jitter, jittered(40s) = %v, want 40s", j)
	}
	b.Jitter, b.RandomFactor = true, 0.5
	for range 100 {
		if j := b.jittered(40 * time.Second); j < 20*time.Second || j > 60*time.Second {
			t.Fatalf("jittered(40s) with factor 0.5 = %v, want 20s to 60s", j)
		}
	}
}
