package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// testNever sends requests that can never be admitted: one whose cost
// exceeds the limit's capacity, and one that two limits charge to the same
// (policy, key) (a PolicyFunc that picks one plan for both) with a summed
// cost above the capacity, each alone within it. Both are refused with
// 429 and neither Retry-After nor quota fields (no retry can pass), never
// answered as a store failure, and nothing is charged.
func testNever(t *testing.T, store sluice.Store) {
	plan := sluice.TokenBucket(20, time.Minute, 0).Named("plan")
	cost := func(r *http.Request) int64 {
		switch r.Header.Get("X-Case") {
		case "single":
			return 21
		case "summed":
			return 15
		}
		return 10
	}
	pick := func(*http.Request, string) (sluice.Policy, bool) { return plan, true }
	var events []Event
	m := mustNew(t, store, []Limit{
		{Policy: plan.Named("first"), PolicyFunc: pick, CostFunc: cost},
		{Policy: plan.Named("second"), PolicyFunc: pick, CostFunc: func(r *http.Request) int64 {
			if r.Header.Get("X-Case") == "single" {
				return 1
			}
			return cost(r)
		}},
	}, &Options{OnDecision: func(e *Event) { events = append(events, *e) }})
	h := m.Handler(okHandler)
	for _, c := range []string{"single", "summed"} {
		resp := serve(h, request("192.0.2.1:1", "X-Case", c))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s: status %d, want 429", c, resp.StatusCode)
		}
		for _, f := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
			if got := resp.Header.Get(f); got != "" {
				t.Errorf("%s: %s = %q, want none", c, f, got)
			}
		}
		if e := events[len(events)-1]; e.Err != nil || e.Decision.RetryAfter != sluice.Never {
			t.Errorf("%s: event Err %v RetryAfter %v, want no error and Never", c, e.Err, e.Decision.RetryAfter)
		}
	}
	// Nothing was charged: two requests of 10 fit in the 20.
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != `"plan";r=0;t=60` {
		t.Errorf("after the refusals: %d RateLimit %q, want 200 and 0 left", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

func TestNever(t *testing.T) { teststore.Each(t, testNever) }
