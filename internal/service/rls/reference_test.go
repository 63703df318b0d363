package rls

import (
	"fmt"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// refYAML has the limits of the reference's
// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig
// (test/redis/fixed_cache_impl_test.go): 15 and 14 an hour.
const refYAML = `
domain: domain
descriptors:
  - key: key4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    rate_limit: {unit: hour, requests_per_unit: 14}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// hitsDesc is a descriptor with its own hits_addend.
func hitsDesc(n uint64, kv ...string) *rlscommon.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestCountRefused replays the reference's default counting
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset): every hit of every
// descriptor is counted, a refused request included, so a descriptor
// that fits in a refused request is charged, and the one over stays over
// for the window. The steps follow the reference's fixed_cache_impl
// tests (TestOverLimit, and the counts of
// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig without the
// setting).
func TestCountRefused(t *testing.T) {
	eachUsageStore(t, func(t *testing.T, store sluice.Store) {
		h := startWith(t, store, compileSection(t, refYAML, Section{CountRefused: true}))
		h.clock.Set(t0)
		type step struct {
			hits    uint64
			overall rlsv3.RateLimitResponse_Code
			want    []want
		}
		steps := []step{
			{11, ok, []want{{ok, 15, hour, 4, time.Hour}, {ok, 14, hour, 3, time.Hour}}},
			{2, ok, []want{{ok, 15, hour, 2, time.Hour}, {ok, 14, hour, 1, time.Hour}}},
			// key5 goes past 14: the request is refused, and both
			// descriptors count it (key4 at 15 of 15, key5 at 15 of 14).
			{2, over, []want{{ok, 15, hour, 0, time.Hour}, {over, 14, hour, 0, time.Hour}}},
			// Both are over now: a hit of 1 is refused by both.
			{1, over, []want{{over, 15, hour, 0, time.Hour}, {over, 14, hour, 0, time.Hour}}},
		}
		for i, s := range steps {
			resp := h.call(t, "domain", hitsDesc(s.hits, "key4", "value4"), hitsDesc(s.hits, "key5", "value5"))
			if resp.OverallCode != s.overall {
				t.Errorf("step %d: overall_code = %v, want %v", i, resp.OverallCode, s.overall)
			}
			for j, w := range s.want {
				checkStatus(t, fmt.Sprintf("step %d status %d", i, j), resp.Statuses[j], w)
			}
		}
		// The next window starts afresh, however far over the last one went.
		h.clock.Set(t0.Add(time.Hour))
		resp := h.call(t, "domain", hitsDesc(1, "key5", "value5"))
		checkStatus(t, "next window", resp.Statuses[0], want{ok, 14, hour, 13, time.Hour})
		// A shadow descriptor counts and never refuses.
		for range 2 {
			resp = h.call(t, "domain", desc("shadow", "x"))
		}
		if resp.OverallCode != ok {
			t.Errorf("shadow over its limit: overall_code = %v, want OK", resp.OverallCode)
		}
	})
}

// TestShadowAll is the reference's global SHADOW_MODE
// (ratelimit_test.go's TestServiceGlobalShadowMode): the descriptors are
// decided and reported, OVER_LIMIT included, and the answer is OK.
func TestShadowAll(t *testing.T) {
	h := startWith(t, memstore.New(memstore.Options{}), compileSection(t, refYAML, Section{ShadowAll: true, ResponseHeaders: ResponseHeadersReference}))
	h.clock.Set(t0)
	h.call(t, "domain", hitsDesc(14, "key5", "v"))
	resp := h.call(t, "domain", hitsDesc(1, "key5", "v"))
	if resp.OverallCode != ok {
		t.Errorf("overall_code = %v, want OK (global shadow mode)", resp.OverallCode)
	}
	checkStatus(t, "key5", resp.Statuses[0], want{over, 14, hour, 0, time.Hour})
	for _, hv := range resp.ResponseHeadersToAdd {
		if hv.Key == "Retry-After" {
			t.Errorf("headers %v: a Retry-After on an answer that lets the request through", resp.ResponseHeadersToAdd)
		}
	}
}

// TestHeaderNames: LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER rename the reference style's headers
// (ratelimit_test.go's TestServiceWithCustomRatelimitHeaders).
func TestHeaderNames(t *testing.T) {
	h := startWith(t, memstore.New(memstore.Options{}), compileSection(t, refYAML, Section{ResponseHeaders: ResponseHeadersReference,
		HeaderNames: HeaderNames{Limit: "A-Limit", Remaining: "A-Remaining", Reset: "A-Reset"}}))
	h.clock.Set(t0.Add(30 * time.Minute))
	resp := h.call(t, "domain", desc("key4", "v"))
	got := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		got[hv.Key] = hv.Value
	}
	if got["A-Limit"] != "15" || got["A-Remaining"] != "14" || got["A-Reset"] != "1800" || len(got) != 3 {
		t.Errorf("headers = %v, want A-Limit 15, A-Remaining 14, A-Reset 1800", got)
	}
}
