package envoycompat

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/testkit"
)

// metadataCall is one request of the dynamic metadata sequence and the
// dynamic_metadata its answer must carry, in JSON, with DOMAIN for the
// domain.
type metadataCall struct {
	hits  uint32
	descs []*rlscommon.RateLimitDescriptor
	want  string
}

// metadataCalls replay the reference's RESPONSE_DYNAMIC_METADATA with
// the limits of its test/config/metadata.yaml (a nested default with
// metadata, a specific value without, a top-level key with nested
// metadata): src/service/ratelimit_test.go TestRatelimitToMetadata for
// domain, descriptors and hitsAddend; test/service/ratelimit_test.go
// TestMetadataReturnedForPassedDescriptors,
// TestMetadataReturnedForAllPassedDescriptors and
// TestOverlappingMetadataReturnsTheFirstValue for the metadata of the
// descriptors under their limit, merged, the first value winning.
var metadataCalls = []metadataCall{
	{descs: ds(d("app", "web", "route", "x")),
		want: `{"domain": "DOMAIN", "descriptors": [{"entries": ["app=web", "route=x"]}], "metadata": {"name": "service_1"}}`},
	{descs: ds(d("app", "web", "route", "admin")),
		want: `{"domain": "DOMAIN", "descriptors": [{"entries": ["app=web", "route=admin"]}]}`},
	{hits: 1, descs: ds(d("app", "web", "route", "x"), d("tier", "gold")),
		want: `{"domain": "DOMAIN", "hitsAddend": 1, "descriptors": [{"entries": ["app=web", "route=x"]}, {"entries": ["tier=gold"]}],
		        "metadata": {"name": "service_1", "service_with_quota": {"name": "service_2"}}}`},
	{descs: ds(d("tier", "gold"), d("app", "web", "route", "y")),
		want: `{"domain": "DOMAIN", "descriptors": [{"entries": ["tier=gold"]}, {"entries": ["app=web", "route=y"]}],
		        "metadata": {"service_with_quota": {"name": "service_2"}, "name": "service_1"}}`},
	// tier is over: only route's metadata.
	{descs: ds(d("tier", "gold"), d("app", "web", "route", "y")),
		want: `{"domain": "DOMAIN", "descriptors": [{"entries": ["tier=gold"]}, {"entries": ["app=web", "route=y"]}], "metadata": {"name": "service_1"}}`},
	{descs: ds(d("none", "x")),
		want: `{"domain": "DOMAIN", "descriptors": [{"entries": ["none=x"]}]}`},
}

// runMetadata asks metadataCalls of s in domain and reports where the
// dynamic metadata differs. The calls start early in a minute, so that
// the per-minute windows they count in do not end among them.
func runMetadata(t *testing.T, s *server, domain string) {
	t.Helper()
	waitEarlyInWindow(time.Minute)
	for i, c := range metadataCalls {
		resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: domain, HitsAddend: c.hits, Descriptors: c.descs})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(strings.ReplaceAll(c.want, "DOMAIN", domain)), want); err != nil {
			t.Fatal(err)
		}
		if got := resp.GetDynamicMetadata(); !proto.Equal(got, want) {
			t.Errorf("call %d: dynamic_metadata = %s, want %s", i, protojson.Format(got), protojson.Format(want))
		}
	}
}

// TestCompatibilityDynamicMetadata runs the dynamic metadata sequence on
// each store, configured in sluice.yaml (dynamic_metadata: true), and
// with the reference's environment (RESPONSE_DYNAMIC_METADATA) in FILE
// mode. Over xDS Sluice does not read a descriptor's metadata: its field
// number is not in the message Sluice is built with (TestXDSNewerFields).
func TestCompatibilityDynamicMetadata(t *testing.T) {
	doc := fixture(t, "domains", "metadata")
	t.Run("sluice.yaml", func(t *testing.T) {
		stores(t, func(t *testing.T, storeYAML string) {
			var b strings.Builder
			b.WriteString("envoy:\n  dynamic_metadata: true\n  domains:\n")
			for i, l := range strings.Split(strings.Trim(strings.ReplaceAll(doc, "DOMAIN", "md"), "\n"), "\n") {
				if i == 0 {
					b.WriteString("    - " + l + "\n")
				} else {
					b.WriteString("      " + l + "\n")
				}
			}
			s := startServer(t, "sluice serve", serverConfig(storeYAML, b.String()))
			runMetadata(t, s, "md")
		})
	})
	t.Run("envoy-env", func(t *testing.T) {
		envStores(t, func(t *testing.T, storeEnv []string) {
			root := t.TempDir()
			configMapDir(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"md.yaml": strings.ReplaceAll(doc, "DOMAIN", "md")})
			env := append(referenceEnv(root), "RESPONSE_DYNAMIC_METADATA=true")
			s := startEnvServer(t, "sluice serve --envoy-env", append(env, storeEnv...))
			runMetadata(t, s, "md")
		})
	})
}

// TestEnvoyEnvQuotaMode: QUOTA_MODE=true puts every descriptor in quota
// mode (test/service/ratelimit_test.go TestServiceGlobalQuotaMode: all
// over is OVER_LIMIT; TestMetadataReturnedForPassedDescriptors: one of
// two over is OK).
func TestEnvoyEnvQuotaMode(t *testing.T) {
	envStores(t, func(t *testing.T, storeEnv []string) {
		root := t.TempDir()
		configMapDir(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"q.yaml": "domain: q\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: hello\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"})
		s := startEnvServer(t, "sluice serve --envoy-env", append(append(referenceEnv(root), "QUOTA_MODE=true"), storeEnv...))
		waitEarlyInWindow(time.Minute) // the calls count in one window of each limit
		for i, c := range []call{
			req(OK, ds(d("foo", "bar"), d("hello", "world")), ok(1, minute, 0), ok(2, minute, 1)),
			req(OK, ds(d("foo", "bar"), d("hello", "world")), over(1, minute), ok(2, minute, 0)),
			req(OVER, ds(d("foo", "bar"), d("hello", "world")), over(1, minute), over(2, minute)),
		} {
			resp, before, after, err := s.ask(&rlsv3.RateLimitRequest{Domain: "q", Descriptors: c.descs})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.check(resp, before, after) {
				t.Errorf("call %d: %s", i, p)
			}
		}
	})
}

// TestAIGatewayEnv starts the service with the environment of Envoy AI
// Gateway's quota rate limit deployment (its chart runs /bin/ratelimit
// with rateLimiter.env; the deployments written for it set the variables
// below, Redis behind Sentinel and xDS from the controller's port 18002
// to node envoy-ai-gateway-ratelimit), with loopback addresses for its
// hosts and ports. It serves a RateLimitConfig with dynamic metadata,
// then one whose descriptors carry quota_mode (field 7 of a newer
// RateLimitDescriptor, which go-control-plane's released module lacks)
// with the quota answers of the reference, and refuses (NACK) one
// carrying a field that the message does not have.
func TestAIGatewayEnv(t *testing.T) {
	testkit.RequirePrograms(t, "redis-server")
	const node = "envoy-ai-gateway-ratelimit"
	master := testkit.StartRedis(t)
	sentinel := testkit.StartRedisSentinel(t, master, "mymaster")
	x := testkit.StartXDS(t)
	plain := &rlsconfv3.RateLimitConfig{Name: "quota", Domain: "ai-gateway-quota", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "backend_name", Value: "gpt-a", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 2},
	}}}
	x.Set(t, node, "1", plain)
	env := []string{
		// The deployment's variables.
		"LOG_LEVEL=debug", "REDIS_TYPE=sentinel", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=mymaster," + sentinel.Addr,
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID=" + node, "CONFIG_GRPC_XDS_SERVER_URL=" + x.Addr, "GRPC_PORT=0", "RESPONSE_DYNAMIC_METADATA=true",
		// Loopback in place of the pod's 0.0.0.0 and fixed ports.
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
	}
	s := startEnvServer(t, "sluice serve --envoy-env (AI Gateway)", env)
	ask := func(descs []*rlscommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: "ai-gateway-quota", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := ask(ds(d("backend_name", "gpt-a")))
	if st := resp.Statuses[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 2 || st.GetLimitRemaining() != 1 {
		t.Errorf("status = %v, want 1 left of 2 a minute", st)
	}
	if got := resp.GetDynamicMetadata().GetFields()["domain"].GetStringValue(); got != "ai-gateway-quota" {
		t.Errorf("dynamic_metadata = %v, want the domain in it", resp.GetDynamicMetadata())
	}
	if warn := s.log.String(); strings.Contains(warn, "problem in the environment") {
		t.Errorf("the environment was refused:\n%s", warn)
	}

	// Version 2: two backends in quota mode, as the gateway's translator
	// builds them (quota_mode on every leaf with a limit).
	quota := &rlsconfv3.RateLimitConfig{Name: "quota", Domain: "ai-gateway-quota"}
	for _, b := range []struct {
		name string
		rpu  uint32
	}{{"gpt-b", 1}, {"gpt-c", 2}} {
		desc := &rlsconfv3.RateLimitDescriptor{Key: "backend_name", Value: b.name,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: b.rpu}}
		desc.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
		quota.Descriptors = append(quota.Descriptors, desc)
	}
	x.Set(t, node, "2", quota)
	testkit.WaitFor(t, waitTimeout, "version 2 acknowledged", func() bool { return slices.Contains(x.Acked(), "2") })
	if n := x.Nacked(); len(n) > 0 {
		t.Fatalf("NACKs: %q", n)
	}
	both := ds(d("backend_name", "gpt-b"), d("backend_name", "gpt-c"))
	waitEarlyInWindow(time.Minute) // the calls count in one window of each limit
	for i, c := range []call{
		req(OK, both, ok(1, minute, 0), ok(2, minute, 1)),
		// gpt-b is over, gpt-c still has quota: OK.
		req(OK, both, over(1, minute), ok(2, minute, 0)),
		// Every quota descriptor is over.
		req(OVER, both, over(1, minute), over(2, minute)),
	} {
		resp, before, after, err := s.ask(&rlsv3.RateLimitRequest{Domain: "ai-gateway-quota", Descriptors: c.descs})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.check(resp, before, after) {
			t.Errorf("call %d: %s", i, p)
		}
	}

	// Version 3 carries field 9, which no RateLimitDescriptor has:
	// refused with its number, and version 2 keeps serving.
	unknown := proto.Clone(quota).(*rlsconfv3.RateLimitConfig)
	d0 := unknown.Descriptors[0].ProtoReflect()
	d0.SetUnknown(protowire.AppendVarint(protowire.AppendTag(d0.GetUnknown(), 9, protowire.VarintType), 1))
	x.Set(t, node, "3", unknown)
	testkit.WaitFor(t, waitTimeout, "the NACK of version 3", func() bool {
		return slices.ContainsFunc(x.Nacked(), func(s string) bool { return strings.Contains(s, "descriptors[0]: field 9 of RateLimitDescriptor") })
	})
	if st := ask(ds(d("backend_name", "gpt-c"))).Statuses[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Errorf("after the refused update: %v, want version 2's limit", st)
	}
	t.Logf("NACKs: %q", x.Nacked())
}
