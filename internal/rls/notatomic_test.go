package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// apartStore is a memory store whose AllowAll refuses requests on
// different keys, as the Redis store on a cluster refuses keys in
// different hash slots.
type apartStore struct{ *memstore.Store }

func (s apartStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	for _, r := range reqs[1:] {
		if r.Key != reqs[0].Key {
			return sluice.Decision{}, fmt.Errorf("apart: %w", sluice.ErrNotAtomic)
		}
	}
	return s.Store.AllowAll(ctx, now, reqs, out)
}

// TestNotAtomic checks that descriptors the store can never decide
// together answer FailedPrecondition with what to change, not Unavailable
// (which clients retry), and that one descriptor is still decided.
func TestNotAtomic(t *testing.T) {
	const src = "domain: f\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	h := startWith(t, apartStore{memstore.New(memstore.Options{})}, compile(t, src))
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "f", Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "1"), desc("b", "2")}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "retrying cannot help") {
		t.Errorf("two descriptors the store cannot decide together: %v, want FailedPrecondition saying retrying cannot help", err)
	}
	if resp := h.call(t, "f", desc("a", "1")); resp.OverallCode != ok {
		t.Errorf("one descriptor: %v, want OK", resp.OverallCode)
	}
}
