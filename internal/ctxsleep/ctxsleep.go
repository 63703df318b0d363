// Package ctxsleep holds the one context-aware sleep that Sluice's waits
// share (sluice.WaitAll, httplimit's Transport and Delay, grpclimit's
// Waiter), and the one context-aware ticker loop of its background work
// (the TLS certificate watch, the Redis overrides' poll, cmd/sluice's
// retry of a Redis connection).
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's error in the second case. A d of zero or less returns at once
// (with ctx's error, if it has ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every calls f every d until ctx ends or f returns false; the first call
// is d after Every starts. d must be positive.
func Every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}
