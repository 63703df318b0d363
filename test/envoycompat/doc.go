// Package envoycompat is the compatibility suite of Sluice's Envoy rate
// limit service with envoyproxy/ratelimit, the reference implementation:
// call sequences and invalid configurations derived from the reference's
// own tests and README (each case names the reference test it comes
// from; the configurations and cases are written anew), run against
// `sluice serve` over gRPC, with the memory store and with a real Redis.
//
// The configurations are YAML files in testdata: the domain documents of
// the call sequences (domains/, in the reference's format), the invalid
// configurations (invalid/, one a mistake, as the reference's test/config
// has them) and the reload test's (reload/).
//
// Each case either expects the reference's answer or names the entry of
// docs/envoy.md's list of differences that explains Sluice's, and the
// suite checks that the entry is there. It has no code of its own.
//
// The Redis half needs redis-server on PATH; without it that half skips,
// unless SLUICE_REQUIRE_REDIS=1 (set by .ci/run) makes it a failure.
package envoycompat
