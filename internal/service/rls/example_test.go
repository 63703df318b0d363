package rls_test

import (
	"context"
	"fmt"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/memstore"
)

func Example() {
	// A file written for envoyproxy/ratelimit, with one Sluice extension:
	// two limits on one descriptor.
	domains, problems := rls.Parse([]byte(`
domain: edge
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 1000}
`), "envoy")
	if len(problems) > 0 {
		fmt.Println(problems)
		return
	}
	cfg, err := rls.Compile(domains)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	svc := rls.New(memstore.New(memstore.Options{}), cfg, rls.Options{Now: func() time.Time { return now }})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit, st.LimitRemaining, st.DurationUntilReset.AsDuration())
	}
	// Output:
	// OK 2 SECOND 1 1s
	// OK 2 SECOND 0 1s
	// OVER_LIMIT 2 SECOND 0 1s
}
