package grpclimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// testNever sends a call whose cost exceeds its limit's capacity: it is
// refused with ResourceExhausted and neither a retry-after trailer nor
// RetryInfo (no retry can pass), never Unavailable, and nothing is
// charged. (The summed case, two limits of one call charging the same
// counter, cannot arise here: limit names are unique and name the
// counter; the engine's own tests cover it.)
func testNever(t *testing.T, store sluice.Store) {
	var events []Event
	l, err := New(store, []Limit{
		{Policy: sluice.TokenBucket(5, time.Minute, 0).Named("per-peer"), Key: Constant("k"), Cost: 1},
		{Policy: sluice.TokenBucket(20, time.Minute, 0).Named("heavy"), Key: Constant("k"), CostFunc: func(_ context.Context, m string) int64 {
			if m == "/big" {
				return 21
			}
			return 20
		}},
	}, &Options{OnDecision: func(e *Event) { events = append(events, *e) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	md, err := l.Check(ctx, "/big")
	if status.Code(err) != codes.ResourceExhausted || md != nil {
		t.Errorf("Check(/big) = %v, %v; want ResourceExhausted without trailer", md, err)
	}
	if d, ok := RetryDelay(err); ok {
		t.Errorf("RetryDelay = %v, want none", d)
	}
	if e := events[0]; e.Err != nil || e.Decision.RetryAfter != sluice.Never || e.Results[1].Decision.Allowed {
		t.Errorf("event = Err %v, RetryAfter %v, heavy %+v; want no error, Never, heavy refused", e.Err, e.Decision.RetryAfter, e.Results[1].Decision)
	}
	// Nothing was charged: 20 still fit, and per-peer has all 5.
	if _, err := l.Check(ctx, "/small"); err != nil {
		t.Errorf("Check(/small) after the refusal = %v", err)
	}
	if got := events[1].Results[0].Decision.Remaining; got != 4 {
		t.Errorf("per-peer remaining = %d, want 4", got)
	}
}

func TestNever(t *testing.T) { teststore.Each(t, testNever) }
