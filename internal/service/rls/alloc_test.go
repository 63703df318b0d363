package rls

import (
	"context"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestShouldRateLimitAllocs bounds the allocations of the commonest call,
// one descriptor with one limit, allowed: the response with its status
// slot and the status with its limit and duration (one allocation), and
// the descriptor's store key; its decisions stay on the stack. The
// service benchmark's server CPU per decision depends on it
// (docs/BENCHMARKS.md).
func TestShouldRateLimitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector are not those of a normal build")
	}
	cfg := compile(t, `
- domain: edge
  descriptors:
    - key: user
      rate_limit: {unit: second, requests_per_unit: 1000000000}
`)
	svc := New(memstore.New(memstore.Options{}), cfg, Options{OnDecision: func(Event) {}, OnPenalty: func(string, sluice.Decision) {}})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "u1")}}
	ctx := context.Background()
	call := func() {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != ok || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1000000000 {
			t.Fatalf("ShouldRateLimit = %v, %v, want OK under the limit", resp, err)
		}
	}
	call()
	if n := testing.AllocsPerRun(200, call); n > 2 {
		t.Errorf("ShouldRateLimit: %v allocations per call, want at most 2", n)
	}
}

// TestShouldRateLimitManyChecks decides more descriptors and limits than
// the service keeps on the stack (2 descriptors, 4 checks): 3 descriptors
// of 2 limits each, all or nothing, each status with its own limit and
// wait.
func TestShouldRateLimitManyChecks(t *testing.T) {
	cfg := compile(t, `
- domain: edge
  descriptors:
    - key: user
      rate_limits:
        - {unit: minute, requests_per_unit: 2}
        - {unit: hour, requests_per_unit: 3}
`)
	now := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	svc := New(memstore.New(memstore.Options{}), cfg, Options{Now: func() time.Time { return now }})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("user", "a"), desc("user", "b"), desc("user", "c"),
	}}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != want || len(resp.Statuses) != 3 {
			t.Fatalf("call %d: overall %v with %d statuses, want %v with 3", i, resp.OverallCode, len(resp.Statuses), want)
		}
		for j, st := range resp.Statuses {
			// The deciding limit is the minute's: fewest left, then the
			// first to refuse; its window ends 30 s after now.
			if got := st.GetCurrentLimit().GetUnit(); got != minute {
				t.Errorf("call %d, status %d: unit %v, want MINUTE", i, j, got)
			}
			if got := st.GetDurationUntilReset().AsDuration(); got != 30*time.Second {
				t.Errorf("call %d, status %d: duration_until_reset %v, want 30s", i, j, got)
			}
			if got, wantRemaining := st.GetLimitRemaining(), uint32(1-i); want == ok && got != wantRemaining {
				t.Errorf("call %d, status %d: limit_remaining %d, want %d", i, j, got, wantRemaining)
			}
		}
	}
}
