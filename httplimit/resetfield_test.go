package httplimit

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// TestSlidingWindowT checks the t of the RateLimit field for
// sliding_window on an admitted request: the seconds until the whole quota
// is back (docs/algorithms.md), which can exceed the window w, because a
// request admitted in this window still weighs on the estimate through
// the whole next window. The quota is whole again exactly then, and not
// 1 ms before.
func TestSlidingWindowT(t *testing.T) {
	c := teststore.NewClock(time.Date(2026, 3, 14, 12, 0, 20, 0, time.UTC)) // 20 s into a window
	store := newStore(c)
	p := sluice.SlidingWindow(10, time.Minute).Named("sw")
	h := mustNew(t, store, []Limit{{Policy: p}}, nil).Handler(okHandler)

	resp := serve(h, request("192.0.2.1:1"))
	// The window ends at 12:01:00; the request counts, weighted, until the
	// next one ends, at 12:02:00: 100 s.
	if got, want := resp.Header.Get("RateLimit"), `"sw";r=9;t=100`; resp.StatusCode != 200 || got != want {
		t.Fatalf("RateLimit = %q (status %d), want %q", got, resp.StatusCode, want)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"sw";q=10;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}

	whole := sluice.Request{Policy: &p, Key: "192.0.2.1", Cost: 10}
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{
		{c.Now().Add(60 * time.Second), false},                   // w later: the request still weighs 2/3
		{c.Now().Add(100*time.Second - time.Millisecond), false}, // 1 ms before t
		{c.Now().Add(100 * time.Second), true},                   // at t
	} {
		d, err := store.Peek(context.Background(), tt.at, whole)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tt.want {
			t.Errorf("the whole quota at %v: allowed %v, want %v", tt.at.Format("15:04:05.000"), d.Allowed, tt.want)
		}
	}
}
