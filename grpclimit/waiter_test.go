package grpclimit

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// relay carries calls made inside a synctest bubble to a real gRPC server
// on loopback. A connection's goroutines wait on the network, which a
// bubble cannot tell from running, so the connection and the server live
// outside the bubble and a worker there makes each call. The caller in the
// bubble waits for the answer on a channel made outside it, which keeps
// the bubble's clock still until the answer comes; the server decides by
// the bubble's time, published by each call before it goes out.
type relay struct {
	conn  *grpc.ClientConn
	now   atomic.Int64 // the bubble's time when the call in flight left, in ns
	calls chan relayCall
	done  []chan error // one per caller
}

type relayCall struct {
	caller     int
	method     string
	req, reply any
}

// newRelay starts a server limited by limits (decided on the bubble's
// time) and a relay for callers callers. Call it outside the bubble.
func newRelay(t *testing.T, callers int, limits []Limit) *relay {
	t.Helper()
	r := &relay{calls: make(chan relayCall), done: make([]chan error, callers)}
	for i := range r.done {
		r.done[i] = make(chan error, 1)
	}
	clock := func() time.Time { return time.Unix(0, r.now.Load()) }
	l, err := New(memstore.New(memstore.Options{Now: clock}), limits, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	r.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for c := range r.calls {
			r.done[c.caller] <- r.conn.Invoke(context.Background(), c.method, c.req, c.reply)
		}
	})
	t.Cleanup(func() {
		close(r.calls)
		r.conn.Close()
		srv.Stop()
		wg.Wait()
	})
	return r
}

// invoker returns the invoker of caller i, for use in the bubble.
func (r *relay) invoker(i int) grpc.UnaryInvoker {
	return func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		r.now.Store(time.Now().UnixNano())
		r.calls <- relayCall{caller: i, method: method, req: req, reply: reply}
		return <-r.done[i]
	}
}

func TestWaiterHoldsWaitingCalls(t *testing.T) {
	// The server allows 5 calls in any second (an exact sliding log). The
	// client keeps to a token bucket of 5/s, whose burst of 5 and refill
	// let a sixth call go at 200ms: the server refuses it with a retry of
	// 1s (800ms rounded up). The calls already waiting for the client's
	// limit must then wait for that second too, and from 1.2s on the
	// client's 5/s fits the server's: one refusal in all.
	const n = 30
	r := newRelay(t, n, []Limit{{Policy: sluice.SlidingLog(5, time.Second)}})
	synctest.Test(t, func(t *testing.T) {
		w, err := NewWaiter(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.TokenBucket(5, time.Second, 0)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		call := w.Unary()
		start := time.Now()
		var mu sync.Mutex
		var refusals []time.Duration
		var sent []time.Duration // when each call reached the server
		var wg sync.WaitGroup
		for i := range n {
			invoke := r.invoker(i)
			wg.Go(func() {
				err := call(context.Background(), healthpb.Health_Check_FullMethodName, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, nil,
					func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
						mu.Lock()
						sent = append(sent, time.Since(start))
						mu.Unlock()
						return invoke(ctx, method, req, reply, cc, opts...)
					})
				switch status.Code(err) {
				case codes.OK:
				case codes.ResourceExhausted:
					mu.Lock()
					refusals = append(refusals, time.Since(start))
					mu.Unlock()
				default:
					t.Errorf("call %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if len(refusals) != 1 || refusals[0] != 200*time.Millisecond {
			t.Fatalf("refused at %v, want once, at 200ms", refusals)
		}
		for _, at := range sent {
			if at > 200*time.Millisecond && at < 1200*time.Millisecond {
				t.Errorf("a call reached the server at %v, within the server's retry time (200ms to 1.2s)", at)
			}
		}
	})
}
