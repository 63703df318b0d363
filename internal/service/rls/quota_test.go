package rls

import (
	"fmt"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// quotaYAML has two quota-mode descriptors, as Envoy AI Gateway's
// QuotaPolicy writes one per backend, each with the metadata that names
// it, and an enforced one.
const quotaYAML = `
domain: q
descriptors:
  - key: model
    value: a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {route: {backend: a}, tier: gold}
  - key: model
    value: b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
    metadata: {route: {backend: b, weight: 2}, tier: silver}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
`

// TestQuotaMode replays envoyproxy/ratelimit's quota mode
// (src/service/ratelimit.go shouldRateLimitWorker): a quota
// descriptor over its limit is OVER_LIMIT and the request is OK while
// another quota descriptor is not over; when every one is over, or a
// descriptor outside quota mode is, the request is OVER_LIMIT. Both
// countings give the same answers here.
func TestQuotaMode(t *testing.T) {
	for _, counting := range []bool{false, true} {
		t.Run(fmt.Sprintf("count-refused=%v", counting), func(t *testing.T) {
			eachUsageStore(t, func(t *testing.T, store sluice.Store) {
				h := startWith(t, store, compileSection(t, quotaYAML, Section{CountRefused: counting}))
				type step struct {
					descs   []*rlscommon.RateLimitDescriptor
					overall rlsv3.RateLimitResponse_Code
					want    []want
				}
				ab := []*rlscommon.RateLimitDescriptor{desc("model", "a"), desc("model", "b")}
				at := []*rlscommon.RateLimitDescriptor{desc("model", "a"), desc("tenant", "t")}
				abt := []*rlscommon.RateLimitDescriptor{desc("model", "a"), desc("model", "b"), desc("tenant", "u")}
				windows := [][]step{{
					{ab, ok, []want{{ok, 1, hour, 0, time.Hour}, {ok, 2, hour, 1, time.Hour}}},
					// a is over, b is not: OK, and a is reported over.
					{ab, ok, []want{{over, 1, hour, 0, -2}, {ok, 2, hour, 0, time.Hour}}},
					// Every quota descriptor is over.
					{ab, over, []want{{over, 1, hour, 0, -2}, {over, 2, hour, 0, -2}}},
				}, {
					{at, ok, []want{{ok, 1, hour, 0, time.Hour}, {ok, 2, hour, 1, time.Hour}}},
					// The only quota descriptor is over: all of them are.
					{at, over, []want{{over, 1, hour, 0, -2}, {ok, 2, hour, 0, time.Hour}}},
				}, {
					{abt, ok, []want{{ok, 1, hour, 0, time.Hour}, {ok, 2, hour, 1, time.Hour}, {ok, 2, hour, 1, time.Hour}}},
					{abt, ok, []want{{over, 1, hour, 0, -2}, {ok, 2, hour, 0, time.Hour}, {ok, 2, hour, 0, time.Hour}}},
					// The enforced descriptor is over: OVER_LIMIT whatever
					// the quotas say.
					{abt, over, []want{{over, 1, hour, 0, -2}, {over, 2, hour, 0, -2}, {over, 2, hour, 0, -2}}},
				}}
				for w, steps := range windows {
					h.clock.Set(t0.Add(time.Duration(w) * time.Hour))
					for i, s := range steps {
						resp := h.call(t, "q", s.descs...)
						if resp.OverallCode != s.overall {
							t.Errorf("window %d step %d: overall_code = %v, want %v", w, i, resp.OverallCode, s.overall)
						}
						for j, ws := range s.want {
							checkQuotaStatus(t, fmt.Sprintf("window %d step %d status %d", w, i, j), resp.Statuses[j], ws)
						}
					}
				}
			})
		})
	}
}

// checkQuotaStatus is checkStatus, where a reset of -2 accepts any
// duration_until_reset (an OVER_LIMIT status's wait differs between the
// countings).
func checkQuotaStatus(t *testing.T, what string, got *rlsv3.RateLimitResponse_DescriptorStatus, w want) {
	t.Helper()
	if w.reset == -2 {
		w.reset = got.GetDurationUntilReset().AsDuration()
	}
	checkStatus(t, what, got, w)
}

// TestDynamicMetadata replays envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA (src/service/ratelimit_test.go
// TestRatelimitToMetadata for the domain, descriptors and hitsAddend;
// test/service/ratelimit_test.go TestMetadataReturnedForAllPassedDescriptors
// for the metadata of the descriptors under their limit, merged).
func TestDynamicMetadata(t *testing.T) {
	eachUsageStore(t, func(t *testing.T, store sluice.Store) {
		h := startWith(t, store, compileSection(t, quotaYAML, Section{DynamicMetadata: true}))
		h.clock.Set(t0)
		steps := []struct {
			req  *rlsv3.RateLimitRequest
			want string
		}{
			{&rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*rlscommon.RateLimitDescriptor{desc("model", "a"), desc("model", "b")}},
				`{"domain": "q", "descriptors": [{"entries": ["model=a"]}, {"entries": ["model=b"]}],
				  "metadata": {"route": {"backend": "a", "weight": 2}, "tier": "gold"}}`},
			{&rlsv3.RateLimitRequest{Domain: "q", HitsAddend: 1, Descriptors: []*rlscommon.RateLimitDescriptor{desc("model", "a"), hitsDesc(1, "model", "b")}},
				`{"domain": "q", "hitsAddend": 1, "descriptors": [{"entries": ["model=a"]}, {"entries": ["model=b"], "hitsAddend": 1}],
				  "metadata": {"route": {"backend": "b", "weight": 2}, "tier": "silver"}}`},
			// Both over: no metadata.
			{&rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*rlscommon.RateLimitDescriptor{desc("model", "a"), desc("model", "b"), desc("free", "x"), desc("none", "x")}},
				`{"domain": "q", "descriptors": [{"entries": ["model=a"]}, {"entries": ["model=b"]}, {"entries": ["free=x"]}, {"entries": ["none=x"]}]}`},
		}
		for i, s := range steps {
			got := h.callReq(t, s.req).GetDynamicMetadata()
			want := &structpb.Struct{}
			if err := protojson.Unmarshal([]byte(s.want), want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("step %d: dynamic_metadata = %v, want %v", i, protojson.Format(got), protojson.Format(want))
			}
		}
		// Merging left the configured metadata as it was: a's alone is a's.
		h.clock.Set(t0.Add(time.Hour))
		h.call(t, "q", desc("model", "b"), desc("model", "b"))
		got := h.call(t, "q", desc("model", "a"), desc("model", "b")).GetDynamicMetadata().GetFields()["metadata"]
		want, _ := structpb.NewValue(map[string]any{"route": map[string]any{"backend": "a"}, "tier": "gold"})
		if !proto.Equal(got, want) {
			t.Errorf("a's metadata after merges = %v, want %v", got, want)
		}
	})
}

// TestNoDynamicMetadata: without DynamicMetadata the answer has none.
func TestNoDynamicMetadata(t *testing.T) {
	h := startWith(t, memstore.New(memstore.Options{}), compileSection(t, quotaYAML, Section{}))
	h.clock.Set(t0)
	if md := h.call(t, "q", desc("model", "a")).GetDynamicMetadata(); md != nil {
		t.Errorf("dynamic_metadata = %v, want none", md)
	}
}

// TestQuotaModeProblems: quota_mode and metadata need a limit that counts,
// and metadata holds what JSON can.
func TestQuotaModeProblems(t *testing.T) {
	src := `
domain: bad
descriptors:
  - key: a
    quota_mode: true
  - key: b
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: c
    metadata: {x: 1}
  - key: d
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {at: 2026-01-02}
  - key: e
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: [1, 2]
`
	domains, ps := Parse([]byte(src), "envoy")
	ps = append(ps, Validate(domains, "envoy")...)
	got := problemLines(ps)
	testkit.WantAll(t, "problems", got,
		"envoy[0].descriptors[0].quota_mode: quota_mode is set but the descriptor has no rate_limit that counts",
		"envoy[0].descriptors[1].quota_mode: quota_mode is set but the descriptor has no rate_limit that counts",
		"envoy[0].descriptors[2].metadata: metadata is returned with a descriptor's limit",
		"envoy[0].descriptors[3].metadata: metadata must hold only what JSON can",
		"envoy[0].descriptors[4].metadata: want a mapping, got a list",
	)
}

// TestQuotaAll replays the reference's global QUOTA_MODE
// (test/service/ratelimit_test.go TestServiceGlobalQuotaMode: every
// descriptor over is OVER_LIMIT; TestMetadataReturnedForPassedDescriptors:
// one of two over is OK, with the metadata of the one not over) and its
// global SHADOW_MODE over quota descriptors (TestServiceQuotaModeWithShadowMode,
// TestServiceMixedModeWithShadowMode: OK, statuses OVER_LIMIT).
func TestQuotaAll(t *testing.T) {
	const src = `
domain: g
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {name: service_1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {name: service_2}
`
	eachUsageStore(t, func(t *testing.T, store sluice.Store) {
		h := startWith(t, store, compileSection(t, src, Section{QuotaAll: true, DynamicMetadata: true, CountRefused: true}))
		h.clock.Set(t0)
		h.call(t, "g", desc("quota", "x"))
		resp := h.call(t, "g", desc("regular", "x"), desc("quota", "x"))
		if resp.OverallCode != ok {
			t.Errorf("one of two over: overall_code = %v, want OK", resp.OverallCode)
		}
		checkQuotaStatus(t, "regular", resp.Statuses[0], want{ok, 1, minute, 0, -2})
		checkQuotaStatus(t, "quota", resp.Statuses[1], want{over, 1, minute, 0, -2})
		if got := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue(); got != "service_1" {
			t.Errorf("metadata name = %q, want service_1 (the descriptor not over)", got)
		}
		resp = h.call(t, "g", desc("regular", "x"), desc("quota", "x"))
		if resp.OverallCode != over {
			t.Errorf("both over: overall_code = %v, want OVER_LIMIT", resp.OverallCode)
		}
		// A descriptor without a limit is a quota descriptor not over.
		resp = h.call(t, "g", desc("regular", "x"), desc("nothing", "x"))
		if resp.OverallCode != ok {
			t.Errorf("over and no limit: overall_code = %v, want OK", resp.OverallCode)
		}
	})
	t.Run("shadow-all", func(t *testing.T) {
		h := startWith(t, memstore.New(memstore.Options{}), compileSection(t, src, Section{ShadowAll: true, CountRefused: true}))
		h.clock.Set(t0)
		h.call(t, "g", desc("regular", "x"), desc("quota", "x"))
		resp := h.call(t, "g", desc("regular", "x"), desc("quota", "x"))
		if resp.OverallCode != ok || resp.Statuses[0].Code != over || resp.Statuses[1].Code != over {
			t.Errorf("global shadow mode over quota descriptors: %v, want OK with both OVER_LIMIT", resp)
		}
	})
}
