package testkit

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// XDSServer is an xDS management server built on go-control-plane's
// server and snapshot cache, as Envoy Gateway's is, serving
// RateLimitConfig resources over the aggregated discovery service on a
// loopback port. It records what its clients acknowledge and refuse.
type XDSServer struct {
	Addr  string
	cache cachev3.SnapshotCache
	srv   *grpc.Server
	done  chan struct{}

	mu       sync.Mutex
	requests int
	acked    []string // versions acknowledged, in order
	nacked   []string // error details of refusals, in order
}

// StartXDS starts a management server on a free loopback port; it stops
// when the test ends.
func StartXDS(t testing.TB) *XDSServer {
	return StartXDSAt(t, "127.0.0.1:0")
}

// StartXDSAt starts a management server on addr (a restart on the port
// of one stopped), with the gRPC server's options opts (its TLS).
func StartXDSAt(t testing.TB, addr string, opts ...grpc.ServerOption) *XDSServer {
	t.Helper()
	x := &XDSServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), done: make(chan struct{})}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.requests++
		switch {
		case r.GetErrorDetail() != nil:
			x.nacked = append(x.nacked, r.GetErrorDetail().GetMessage())
		case r.GetResponseNonce() != "":
			x.acked = append(x.acked, r.GetVersionInfo())
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	xs := serverv3.NewServer(ctx, x.cache, cb)
	var ln net.Listener
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A port just freed by a stopped server may take a moment.
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		cancel()
		t.Fatalf("xDS server: %v", err)
	}
	x.Addr = ln.Addr().String()
	x.srv = grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(x.srv, xs)
	go func() {
		x.srv.Serve(ln)
		cancel()
		close(x.done)
	}()
	t.Cleanup(x.Stop)
	return x
}

// Stop ends the server and every stream at once.
func (x *XDSServer) Stop() {
	x.srv.Stop()
	<-x.done
}

// Set makes version, holding cfgs, the snapshot of node.
func (x *XDSServer) Set(t testing.TB, node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Requests returns how many discovery requests the server has received.
func (x *XDSServer) Requests() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.requests
}

// Acked returns the versions acknowledged so far.
func (x *XDSServer) Acked() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.acked...)
}

// Nacked returns the error details of the refusals so far.
func (x *XDSServer) Nacked() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.nacked...)
}
