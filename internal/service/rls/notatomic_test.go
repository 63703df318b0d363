package rls

import (
	"context"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/teststore"
)

// TestNotAtomic checks that descriptors the store can never decide
// together answer FailedPrecondition with what to change, not Unavailable
// (which clients retry), and that one descriptor is still decided.
func TestNotAtomic(t *testing.T) {
	const src = "domain: f\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	h := startWith(t, teststore.NewApart(), compile(t, src))
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "f", Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "1"), desc("b", "2")}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "retrying cannot help") {
		t.Errorf("two descriptors the store cannot decide together: %v, want FailedPrecondition saying retrying cannot help", err)
	}
	if resp := h.call(t, "f", desc("a", "1")); resp.OverallCode != ok {
		t.Errorf("one descriptor: %v, want OK", resp.OverallCode)
	}
}
