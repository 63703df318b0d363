package ctxsleep

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(t.Context(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Errorf("Sleep(1s) = %v after %v, want nil after 1s", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("Sleep(1h) under a 1s deadline = %v after %v, want DeadlineExceeded after 1s", err, time.Since(start))
		}
		if err := Sleep(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Sleep(0) on an ended context = %v, want its error", err)
		}
		if err := Sleep(t.Context(), -time.Second); err != nil {
			t.Errorf("Sleep(-1s) = %v, want nil", err)
		}
	})
}

func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		Every(t.Context(), time.Second, func() bool {
			at = append(at, time.Since(start))
			return len(at) < 3
		})
		if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(at, want) {
			t.Errorf("calls at %v, want %v (until f returns false)", at, want)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		start, calls := time.Now(), 0
		Every(ctx, time.Second, func() bool { calls++; return true })
		if calls != 2 || time.Since(start) != 2500*time.Millisecond {
			t.Errorf("under a 2.5s deadline: %d calls, returned after %v; want 2 calls and the deadline", calls, time.Since(start))
		}
	})
}
