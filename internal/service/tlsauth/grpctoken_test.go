package tlsauth_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestTokenUnary calls a real gRPC server on a loopback port, whose
// health service is behind TokenUnary: without a token, with a wrong one
// or one given twice the call is Unauthenticated, with one of the tokens
// it passes; with no tokens, or for a service the interceptor does not
// name, every call passes. The tokens are read at each call.
func TestTokenUnary(t *testing.T) {
	tok, err := tlsauth.ParseTokens([]byte("aaaaaaaaaaaaaaaa1\nbbbbbbbbbbbbbbbb2\n"))
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[tlsauth.Tokens]
	current.Store(tok)
	serve := func(service string) healthpb.HealthClient {
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tlsauth.TokenUnary(service, current.Load)))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		return healthpb.NewHealthClient(testkit.ServeGRPC(t, srv))
	}
	guarded, other := serve("grpc.health.v1.Health"), serve("envoy.service.ratelimit.v3.RateLimitService")
	call := func(c healthpb.HealthClient, auth ...string) codes.Code {
		ctx := context.Background()
		for _, a := range auth {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
		}
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	for _, tt := range []struct {
		name string
		auth []string
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []string{"Bearer cccccccccccccccc3"}, codes.Unauthenticated},
		{"no scheme", []string{"aaaaaaaaaaaaaaaa1"}, codes.Unauthenticated},
		{"token", []string{"Bearer aaaaaaaaaaaaaaaa1"}, codes.OK},
		{"other token, other case", []string{"bearer bbbbbbbbbbbbbbbb2"}, codes.OK},
		{"two tokens", []string{"Bearer aaaaaaaaaaaaaaaa1", "Bearer bbbbbbbbbbbbbbbb2"}, codes.Unauthenticated},
	} {
		if got := call(guarded, tt.auth...); got != tt.want {
			t.Errorf("%s: Check = %v, want %v", tt.name, got, tt.want)
		}
		if got := call(other); got != codes.OK {
			t.Errorf("%s: Check of a service the interceptor does not name = %v, want OK", tt.name, got)
		}
	}
	current.Store(nil)
	if got := call(guarded); got != codes.OK {
		t.Errorf("no tokens: Check = %v, want OK", got)
	}
}
