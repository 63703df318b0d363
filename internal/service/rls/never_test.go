package rls

import (
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

const neverYAML = `
domain: n
descriptors:
  - key: a
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 20}
`

// testNever sends requests that can never be admitted: one descriptor
// whose hits exceed the limit, and two identical descriptors whose summed
// hits do (each alone would fit). Both are answered OVER_LIMIT, never an
// error (which Envoy's failure_mode_deny: false would let through), and
// nothing is charged.
func testNever(t *testing.T, store sluice.Store) {
	h := startWith(t, store, compile(t, neverYAML))
	hits := func(n uint64) *rlscommon.RateLimitDescriptor {
		d := desc("a", "x")
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	for _, tt := range []struct {
		name  string
		descs []*rlscommon.RateLimitDescriptor
	}{
		{"single", []*rlscommon.RateLimitDescriptor{hits(21)}},
		{"summed", []*rlscommon.RateLimitDescriptor{hits(15), hits(15)}},
	} {
		resp := h.call(t, "n", tt.descs...)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: overall_code = %v, want OVER_LIMIT", tt.name, resp.OverallCode)
		}
		for i, st := range resp.Statuses {
			if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetDurationUntilReset() != nil {
				t.Errorf("%s: status %d = %v, want OVER_LIMIT with no duration_until_reset", tt.name, i, st)
			}
		}
	}
	// Nothing was charged: all 20 still fit.
	resp := h.call(t, "n", hits(20))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("20 hits after the refusals = %v, want OK with 0 remaining", resp)
	}
}

func TestNever(t *testing.T) { teststore.Each(t, testNever) }
