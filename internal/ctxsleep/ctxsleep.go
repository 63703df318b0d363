// Package ctxsleep holds the one context-aware sleep that Sluice's waits
// share (sluice.WaitAll, httplimit's Transport and Delay, grpclimit's
// Waiter).
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
