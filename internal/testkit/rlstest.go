// This file builds the requests of Envoy's rate limit service for
// the tests that call it: internal/service/rls's own, the Envoy compatibility
// suite (test/envoycompat) and cmd/sluice's gRPC tests.

package testkit

import (
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Descriptor builds a descriptor from key, value pairs, in order; a last
// key without a value is left out.
func Descriptor(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
