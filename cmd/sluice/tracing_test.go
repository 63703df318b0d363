package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit"
)

// receiver is an OTLP trace receiver: the collector's gRPC TraceService
// and its HTTP /v1/traces, keeping every span it is sent.
type receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.keep(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) keep(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
}

// startReceiver serves an OTLP receiver on loopback over protocol (grpc
// or http/protobuf) and returns it and its endpoint URL.
func startReceiver(t *testing.T, protocol string) (*receiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	if protocol == "grpc" {
		gs := grpc.NewServer()
		collectorpb.RegisterTraceServiceServer(gs, r)
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
	} else {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			b, _ := io.ReadAll(req.Body)
			var er collectorpb.ExportTraceServiceRequest
			if req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &er) != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			r.keep(&er)
			w.Header().Set("Content-Type", "application/x-protobuf")
			out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
			w.Write(out)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return r, "http://" + ln.Addr().String()
}

// stopSpans stops in, which flushes its spans, and returns every span r
// has received.
func (r *receiver) stopSpans(t *testing.T, in *instance) []*tracepb.Span {
	t.Helper()
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// traceparent is the traceparent header of a sampled call in the trace
// traceID, from the caller's span parent.
func traceparent(traceID, parent string) string { return "00-" + traceID + "-" + parent + "-01" }

// checkTraced posts body to in's /v1/check with the traceparent tp and
// fails t unless the answer is 200.
func checkTraced(t *testing.T, in *instance, tp, body string) {
	t.Helper()
	req, _ := http.NewRequest("POST", in.url("/v1/check"), strings.NewReader(body))
	req.Header.Set("traceparent", tp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("check %s under %s = %d", body, tp, resp.StatusCode)
	}
}

// rlsTraced asks in's rate limit service about the descriptor (key,
// value) of domain with the traceparent tp.
func rlsTraced(t *testing.T, in *instance, tp, domain, key, value string) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", tp)
	if _, err := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc)).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
		Descriptors: []*rlscommon.RateLimitDescriptor{descriptor(key, value)}}); err != nil {
		t.Fatal(err)
	}
}

// attrs returns a span's or an event's attributes as strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[kv.GetKey()] = v.GetStringValue()
		default:
			out[kv.GetKey()] = strings.TrimSpace(fmt.Sprint(v.GetIntValue(), " ", v.GetBoolValue()))
		}
	}
	return out
}

// TestTracing runs sluice serve with OTLP export to a receiver started
// here, over each protocol, and checks the spans: the decision API's and
// Envoy's rate limit service's continue the caller's trace, the store's
// are their children, and the attributes say which limit refused, with a
// key hash, the outcome and the retry-after.
func TestTracing(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		yaml           bool // configured by the tracing section, not the environment
	}{{"grpc", "grpc", false}, {"http-protobuf", "http/protobuf", false}, {"yaml-grpc", "grpc", true}, {"yaml-http", "http/protobuf", true}} {
		t.Run(tc.name, func(t *testing.T) {
			protocol := tc.protocol
			rec, endpoint := startReceiver(t, protocol)
			cfg := envoyConfig("1") + `limits:
  tiny: {algorithm: sliding_log, limit: 1, period: 1h}
`
			if tc.yaml {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
				cfg += fmt.Sprintf("tracing: {endpoint: %q, protocol: %s, sample_ratio: 1, keys: true}\n", endpoint, protocol)
			} else {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
				t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
			}
			path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), cfg)
			in := startServe(t, "--config", path)

			const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			parents := []string{"00f067aa0ba902b7", "00f067aa0ba902b8", "00f067aa0ba902b9"}
			for _, parent := range parents[:2] {
				checkTraced(t, in, traceparent(traceID, parent), `{"limit":"tiny","key":"alice"}`)
			}
			rlsTraced(t, in, traceparent(traceID, parents[2]), "edge", "api_key", "k")
			spans := rec.stopSpans(t, in)
			byParent := map[string][]*tracepb.Span{}
			for _, s := range spans {
				if hex.EncodeToString(s.GetTraceId()) != traceID {
					t.Errorf("span %s has trace %x, want the caller's %s", s.GetName(), s.GetTraceId(), traceID)
				}
				byParent[hex.EncodeToString(s.GetParentSpanId())] = append(byParent[hex.EncodeToString(s.GetParentSpanId())], s)
			}
			for i, parent := range parents {
				doors := byParent[parent]
				want := "sluice.check"
				if i == 2 {
					want = "sluice.rls"
				}
				if len(doors) != 1 || doors[0].GetName() != want {
					t.Fatalf("spans under the caller's span %s: %v, want one %s (all: %v)", parent, names(doors), want, names(spans))
				}
				door := doors[0]
				a := attrs(door.GetAttributes())
				children := byParent[hex.EncodeToString(door.GetSpanId())]
				if len(children) == 0 || !strings.HasPrefix(children[0].GetName(), "sluice.store.") || attrs(children[0].GetAttributes())["sluice.store.backend"] != "memory" {
					t.Errorf("%s has children %v, want a store span on the memory backend", want, names(children))
				}
				switch i {
				case 0:
					if a["sluice.allowed"] != "0 true" {
						t.Errorf("first check: attributes %v, want allowed", a)
					}
				case 1:
					if a["sluice.allowed"] != "0 false" || a["sluice.limit"] != "tiny" || a["sluice.retry_after_ms"] == "" {
						t.Errorf("second check: attributes %v, want refused by tiny with a retry-after", a)
					}
					ev := door.GetEvents()
					if len(ev) != 1 || ev[0].GetName() != "sluice.limit" {
						t.Fatalf("second check: events %v, want one sluice.limit", ev)
					}
					ea := attrs(ev[0].GetAttributes())
					switch {
					case ea["sluice.outcome"] != "denied":
						t.Errorf("the refusal's event: %v, want outcome denied", ea)
					case tc.yaml && (ea["sluice.key"] != "alice" || ea["sluice.key_hash"] != ""):
						t.Errorf("the refusal's event: %v, want the key in clear (tracing.keys)", ea)
					case !tc.yaml && (len(ea["sluice.key_hash"]) != 16 || ea["sluice.key"] != ""):
						t.Errorf("the refusal's event: %v, want a key hash and no key", ea)
					}
				case 2:
					if a["sluice.rls.domain"] != "edge" || a["sluice.rls.overall_code"] != "OK" {
						t.Errorf("rls span: attributes %v", a)
					}
				}
			}
		})
	}
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}

// TestTracingRedis: on Redis, each store call's span has a child span per
// script call to Redis, with the script and the call's error.
func TestTracingRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	rec, endpoint := startReceiver(t, "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	cfg := redisConfig(srv.Addr, "deny") + fmt.Sprintf("tracing: {endpoint: %q, protocol: http/protobuf, sample_ratio: 1}\n", endpoint)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), cfg)
	in := startServe(t, "--config", path)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	checkTraced(t, in, traceparent(traceID, "00f067aa0ba902b7"), `{"limit":"tiny","key":"alice"}`)
	spans := rec.stopSpans(t, in)
	var store, call *tracepb.Span
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.GetName(), "sluice.store."):
			store = s
		case strings.HasPrefix(s.GetName(), "sluice.redis "):
			call = s
		}
	}
	if store == nil || call == nil {
		t.Fatalf("spans %v, want a store span and a Redis call's", names(spans))
	}
	a := attrs(call.GetAttributes())
	if !bytes.Equal(call.GetParentSpanId(), store.GetSpanId()) || call.GetName() != "sluice.redis single" || a["sluice.redis.script"] != "single" || a["db.system.name"] != "redis" {
		t.Errorf("the Redis call's span %s (attributes %v) is not the store span's child for script single", call.GetName(), a)
	}
	if attrs(store.GetAttributes())["sluice.store.backend"] != "redis" {
		t.Errorf("store span attributes %v, want backend redis", attrs(store.GetAttributes()))
	}
}

// TestTracingEnvoyEnv: under --envoy-env, the reference's TRACING_*
// settings trace the rate limit calls to OTEL_EXPORTER_OTLP_ENDPOINT.
func TestTracingEnvoyEnv(t *testing.T) {
	rec, endpoint := startReceiver(t, "http/protobuf")
	root, _ := runtimeRoot(t, "rl", map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
	in := startEnvoyEnv(t, fileEnv(root, "RUNTIME_SUBDIRECTORY=rl",
		"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=http", "TRACING_SAMPLING_RATE=1", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint)...)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	rlsTraced(t, in, traceparent(traceID, "00f067aa0ba902b9"), "a", "k", "v")
	spans := rec.stopSpans(t, in)
	if !slices.ContainsFunc(spans, func(s *tracepb.Span) bool {
		return s.GetName() == "sluice.rls" && hex.EncodeToString(s.GetTraceId()) == traceID
	}) {
		t.Errorf("spans %v, want sluice.rls in the caller's trace", names(spans))
	}
}
