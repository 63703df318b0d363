package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

// rlsOverrideConfig limits each api_key to 1 a minute, and each op of the
// users database to 1 a minute, on the given store.
func rlsOverrideConfig(store string) string {
	return `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
` + store + `
envoy:
  - domain: edge
    descriptors:
      - key: api_key
        algorithm: sliding_log
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: database
        value: users
        descriptors:
          - key: op
            algorithm: sliding_log
            rate_limit: {unit: minute, requests_per_unit: 1}
`
}

// TestRLSAdminOverride sets overrides through the admin API of sluice
// serve and checks that Envoy's rate limit service decides under them:
// the overridden key gets the override's numbers (a fresh count, as any
// new policy), other keys keep the configured limit, and removing the
// override brings the key back to its own count. It runs on the memory
// store and on a real Redis, where overrides are shared through Redis.
func TestRLSAdminOverride(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			store := "store: {backend: memory}"
			if backend == "redis" {
				srv := testkit.StartRedis(t)
				store = fmt.Sprintf("store: {backend: redis, redis: {addrs: [%q], prefix: \"rlsov:\"}, timeout: 2s, on_error: error}", srv.Addr)
			}
			const token = "rls-override-admin-token-0123456789"
			path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), rlsOverrideConfig(store)+"admin: {token: "+token+"}\n")
			in := startServe(t, "--config", path)
			in.auth = "Bearer " + token
			testRLSAdminOverride(t, in)
		})
	}
}

func testRLSAdminOverride(t *testing.T, in *instance) {
	client := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ask := func(d *rlscommon.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetStatuses()[0]
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	expect := func(what string, d *rlscommon.RateLimitDescriptor, codes ...rlsv3.RateLimitResponse_Code) {
		t.Helper()
		for i, want := range codes {
			if got := ask(d).GetCode(); got != want {
				t.Fatalf("%s: answer %d = %v, want %v", what, i, got, want)
			}
		}
	}
	put := func(limit, key, body string, want int) {
		t.Helper()
		code, _, resp := in.do(t, "PUT", "/v1/overrides/"+url.PathEscape(limit)+"/"+url.PathEscape(key), body)
		if code != want {
			t.Fatalf("PUT override of %s %q = %d %s, want %d", limit, key, code, resp, want)
		}
	}
	k1, k2 := descriptor("api_key", "k1"), descriptor("api_key", "k2")
	expect("k1 under its configured limit", k1, ok, over)

	put("envoy:edge.api_key", "k1", `{"limit":3,"period":"2h"}`, 201)
	st := ask(k1)
	if cl := st.GetCurrentLimit(); st.GetCode() != ok || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
		cl.GetUnitMultiplier().GetValue() != 2 || st.GetLimitRemaining() != 2 {
		t.Fatalf("k1 under the override = %v, want OK, 3 per 2 hours, 2 left", st)
	}
	expect("k1 under the override", k1, ok, ok, over)
	expect("k2 under its configured limit", k2, ok, over)

	// A nested descriptor's key is its values joined by "|".
	users := descriptor("database", "users", "op", "get")
	put("envoy:edge.database_users.op", "users|get", `{"limit":2,"period":"1h"}`, 201)
	expect("users|get under the override", users, ok, ok, over)
	if got := ask(descriptor("database", "users", "op", "put")).GetCurrentLimit().GetRequestsPerUnit(); got != 1 {
		t.Errorf("another op's current limit = %d, want the configured 1", got)
	}

	put("envoy:edge.nope", "k1", `{"limit":3,"period":"1m"}`, 404)
	if code, _, body := in.do(t, "DELETE", "/v1/overrides/envoy:edge.api_key/k1", ""); code != 200 {
		t.Fatalf("DELETE override = %d %s", code, body)
	}
	expect("k1 back under its configured limit, with its count there", k1, over)
}
