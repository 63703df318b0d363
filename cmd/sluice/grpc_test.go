package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit"
)

// envoyConfig gives api_key two limits (100 per second and dayLimit per
// day, as sliding logs so that no window edge can flip the test) and
// remote_address one.
func envoyConfig(dayLimit string) string {
	return `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
envoy:
  - domain: edge
    descriptors:
      - key: api_key
        algorithm: sliding_log
        rate_limits:
          - {unit: second, requests_per_unit: 100}
          - {unit: day, requests_per_unit: ` + dayLimit + `}
      - key: remote_address
        algorithm: sliding_log
        rate_limit: {unit: minute, requests_per_unit: 10}
`
}

// descriptor builds a descriptor from key, value pairs.
var descriptor = testkit.Descriptor

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestGRPCShouldRateLimit(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), envoyConfig("2"))
	in := startServe(t, "--config", path, "--watch", "20ms")
	if in.grpc == "" {
		t.Fatalf("the ready file names no gRPC address")
	}
	conn := dialGRPC(t, in.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check = %v, %v; want SERVING", hc, err)
	}

	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		descriptor("api_key", "k1"),
		descriptor("remote_address", "203.0.113.7"),
	}}
	type want struct {
		overall, apiCode, remoteCode  rlsv3.RateLimitResponse_Code
		apiUnit                       rlsv3.RateLimitResponse_RateLimit_Unit
		apiRemaining, remoteRemaining uint32
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	day := rlsv3.RateLimitResponse_RateLimit_DAY
	steps := []want{
		{overall: ok, apiCode: ok, apiUnit: day, apiRemaining: 1, remoteCode: ok, remoteRemaining: 9},
		{overall: ok, apiCode: ok, apiUnit: day, apiRemaining: 0, remoteCode: ok, remoteRemaining: 8},
		// The day limit is spent: OVER_LIMIT, and remote_address is not
		// charged (all-or-nothing).
		{overall: over, apiCode: over, apiUnit: day, apiRemaining: 0, remoteCode: ok, remoteRemaining: 8},
	}
	for i, w := range steps {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit %d: %v", i, err)
		}
		st := resp.GetStatuses()
		if len(st) != 2 {
			t.Fatalf("ShouldRateLimit %d: %d statuses, want 2", i, len(st))
		}
		api, remote := st[0], st[1]
		if resp.GetOverallCode() != w.overall || api.GetCode() != w.apiCode || api.GetCurrentLimit().GetUnit() != w.apiUnit ||
			api.GetCurrentLimit().GetRequestsPerUnit() != 2 || api.GetLimitRemaining() != w.apiRemaining ||
			remote.GetCode() != w.remoteCode || remote.GetLimitRemaining() != w.remoteRemaining {
			t.Errorf("ShouldRateLimit %d = %v, api %v, remote %v; want %+v", i, resp.GetOverallCode(), api, remote, w)
		}
		if w.apiCode == over && api.GetDurationUntilReset().AsDuration() <= 0 {
			t.Errorf("ShouldRateLimit %d: an over-limit status without duration_until_reset: %v", i, api)
		}
	}
	for series, want := range map[string]string{
		`sluice_rls_decisions_total{descriptor="api_key",domain="edge",outcome="allowed"}`:        "2",
		`sluice_rls_decisions_total{descriptor="api_key",domain="edge",outcome="denied"}`:         "1",
		`sluice_rls_decisions_total{descriptor="remote_address",domain="edge",outcome="allowed"}`: "3",
		// Envoy's decisions go through the metered store, as the HTTP
		// API's do: one all-or-nothing call per request.
		`sluice_store_duration_seconds_count{operation="allow_all"}`: "3",
	} {
		if got := in.metric(t, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}

	// A reload reaches the gRPC service: a day limit of 5 is a new policy,
	// with its own state.
	writeConfig(t, path, envoyConfig("5"))
	testkit.WaitFor(t, waitTimeout, "the new envoy section", func() bool {
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("api_key", "probe")}})
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})
	resp, err := client.ShouldRateLimit(ctx, req)
	if err != nil || resp.GetOverallCode() != ok {
		t.Errorf("ShouldRateLimit after raising the limit = %v, %v; want OK", resp, err)
	}

	// A file whose only problems are in formats that other packages own
	// (an envoy unit, a key source) is refused whole, each problem at its
	// line, and the running descriptors stay.
	bad := strings.Replace(envoyConfig("7"), "unit: minute", "unit: minutes", 1) +
		"limits: {x: {algorithm: gcra, limit: 1, period: 1s}}\nproxy: {rules: [{limits: [{limit: x, key: \"cookie:s\"}]}]}\n"
	writeConfig(t, path, bad)
	testkit.WaitFor(t, waitTimeout, "the file to be refused", func() bool { return strings.Contains(in.stderr.String(), "problems=2") })
	testkit.WantAll(t, "log", in.stderr.String(),
		`problem="`+path+`:12: envoy[0].descriptors[1].rate_limit.unit: unknown unit \"minutes\"`,
		`problem="`+path+`:14: proxy.rules[0].limits[0].key: key spec \"cookie:s\": unknown source \"cookie\"`,
	)
	resp, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("api_key", "probe")}})
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Errorf("ShouldRateLimit after the refused file = %v, %v; want the day limit of 5 still", resp, err)
	}

	// An unknown domain is let through; a request without a domain is an
	// error.
	resp, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "other", Descriptors: req.Descriptors})
	if err != nil || resp.GetOverallCode() != ok {
		t.Errorf("ShouldRateLimit of an unknown domain = %v, %v; want OK", resp, err)
	}
	if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Descriptors: req.Descriptors}); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("ShouldRateLimit without a domain: error %v, want InvalidArgument", err)
	}
}

// TestRecoverUnary checks that a panicking gRPC method becomes an Internal
// error and a log line, not the end of the process.
func TestRecoverUnary(t *testing.T) {
	t.Parallel()
	var logs testkit.Log
	ic := recoverUnary(slog.New(slog.NewTextHandler(&logs, nil)))
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	resp, err := ic(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	if resp != nil || status.Code(err) != codes.Internal {
		t.Errorf("a panicking method = %v, %v; want nil, Internal", resp, err)
	}
	if !strings.Contains(logs.String(), `msg="grpc: a method panicked" method=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit panic=boom`) {
		t.Errorf("log = %s", logs.String())
	}
	resp, err = ic(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	if resp != "ok" || err != nil {
		t.Errorf("a method that returns = %v, %v; want ok, nil", resp, err)
	}
}

// TestGRPCTokens serves Envoy's rate limit service with listen.tokens_file
// and calls it over a loopback connection: without a token, or with one
// not in the file, ShouldRateLimit is Unauthenticated, with one of the
// file's tokens in the authorization metadata it is decided, and the
// health service needs none. A reload with another tokens file applies at
// once.
func TestGRPCTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "tokens.txt"), "# Envoy\nenvoy-0123456789abcdef\n")
	yaml := strings.Replace(envoyConfig("100"), "listen: {", "listen: {tokens_file: tokens.txt, ", 1)
	path := writeConfig(t, filepath.Join(dir, "sluice.yaml"), yaml)
	in := startServe(t, "--config", path, "--watch", "20ms")
	conn := dialGRPC(t, in.grpc)
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	call := func(auth string) codes.Code {
		c := ctx
		if auth != "" {
			c = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		_, err := client.ShouldRateLimit(c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("api_key", "k1")}})
		return status.Code(err)
	}
	for _, tt := range []struct {
		name, auth string
		want       codes.Code
	}{
		{"no token", "", codes.Unauthenticated},
		{"wrong token", "Bearer envoy-0123456789abcdeX", codes.Unauthenticated},
		{"token", "Bearer envoy-0123456789abcdef", codes.OK},
	} {
		if got := call(tt.auth); got != tt.want {
			t.Errorf("%s: ShouldRateLimit = %v, want %v", tt.name, got, tt.want)
		}
	}
	if hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check without a token = %v, %v; want SERVING", hc, err)
	}

	// Another tokens file, named by a changed configuration.
	writeConfig(t, filepath.Join(dir, "tokens-2.txt"), "envoy-fedcba9876543210\n")
	writeConfig(t, path, strings.Replace(yaml, "tokens.txt", "tokens-2.txt", 1))
	testkit.WaitFor(t, waitTimeout, "the new tokens", func() bool { return call("Bearer envoy-fedcba9876543210") == codes.OK })
	if got := call("Bearer envoy-0123456789abcdef"); got != codes.Unauthenticated {
		t.Errorf("the old token after the reload: ShouldRateLimit = %v, want Unauthenticated", got)
	}
}

// TestGRPCPenaltyMetrics: Envoy's decisions under a limit with a penalty
// feed sluice_penalty_blocks_total and sluice_penalty_blocked_total under
// the limit's name, as the HTTP doors' do.
func TestGRPCPenaltyMetrics(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
envoy:
  - domain: login
    descriptors:
      - key: account
        rate_limit:
          unit: hour
          requests_per_unit: 1
          penalty: {block_for: 1h}
`)
	in := startServe(t, "--config", path)
	client := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "login", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("account", "alice")}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("ShouldRateLimit %d = %v, %v; want %v", i, resp.GetOverallCode(), err, want)
		}
	}
	for series, want := range map[string]string{
		`sluice_penalty_blocks_total{limit="envoy:login.account"}`:  "1",
		`sluice_penalty_blocked_total{limit="envoy:login.account"}`: "2",
	} {
		if got := in.metric(t, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
}
