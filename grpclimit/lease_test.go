package grpclimit

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// gated is the health service whose Check, for the service "block", says
// it entered and waits until it is let go or the call's context ends.
type gated struct {
	*health.Server
	inside, most atomic.Int64 // calls in the blocking Check, and their peak
	entered      chan struct{}
	letGo        chan struct{}
	left         chan struct{}
}

func newGated() *gated {
	return &gated{Server: health.NewServer(), entered: make(chan struct{}, 64), letGo: make(chan struct{}), left: make(chan struct{}, 64)}
}

func (g *gated) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "block" {
		n := g.inside.Add(1)
		for old := g.most.Load(); n > old && !g.most.CompareAndSwap(old, n); old = g.most.Load() {
		}
		defer func() {
			g.inside.Add(-1)
			g.left <- struct{}{}
		}()
		g.entered <- struct{}{}
		select {
		case <-g.letGo:
		case <-ctx.Done():
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveGated is serve with g as the health service.
func serveGated(t *testing.T, l *Limiter, g *gated) healthpb.HealthClient {
	t.Helper()
	return healthpb.NewHealthClient(serveHealth(t, l, g))
}

// eventually polls call until it succeeds, failing the test after a while.
func eventually(t *testing.T, what string, call func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v", what, err)
		}
		runtime.Gosched()
	}
}

func newConcLimiter(t *testing.T, limit int64) *Limiter {
	t.Helper()
	l, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.Concurrency(limit, time.Hour).Named("conc"), Key: Constant("all")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestUnaryHoldsLease(t *testing.T) {
	g := newGated()
	client := serveGated(t, newConcLimiter(t, 1), g)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "block"})
		errc <- err
	}()
	testkit.Receive(t, 10*time.Second, "the first call to enter", g.entered)
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("while the first runs: %v, want ResourceExhausted", err)
	}
	if d, ok := RetryDelay(err); !ok || d != time.Hour {
		t.Errorf("RetryDelay = %v, %v; want 1h (when the lease expires)", d, ok)
	}
	close(g.letGo)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("after the first returned: %v, want the lease released", err)
	}
}

func TestUnaryReleasesWhenClientGoes(t *testing.T) {
	g := newGated()
	client := serveGated(t, newConcLimiter(t, 1), g)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "block"})
		errc <- err
	}()
	testkit.Receive(t, 10*time.Second, "the call to enter", g.entered)
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	testkit.Receive(t, 10*time.Second, "the handler to return", g.left)
	eventually(t, "after the client went away", func() error {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	})
}

func TestUnaryReleasesOnPanic(t *testing.T) {
	l := newConcLimiter(t, 1)
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/M"}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		l.Unary()(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	if _, err := l.Unary()(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil }); err != nil {
		t.Errorf("after a panic: %v, want the lease released", err)
	}
}

func TestStreamHoldsLease(t *testing.T) {
	client := serveGated(t, newConcLimiter(t, 1), newGated())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	// The stream is open: a unary call under the same limit is refused.
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("while the stream is open: %v, want ResourceExhausted", err)
	}
	cancel()
	eventually(t, "after the stream ended", func() error {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	})
}

func TestNeverMoreThanLimit(t *testing.T) {
	const limit, clients = 3, 16
	g := newGated()
	client := serveGated(t, newConcLimiter(t, limit), g)
	refused := make(chan struct{})
	var refusedOnce sync.Once
	// The handlers stay until the limit has been reached (limit of them
	// entered, none left) and a call was refused.
	go func() {
		for range limit {
			<-g.entered
		}
		<-refused
		close(g.letGo)
	}()
	var wg sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "block"})
				if err == nil {
					return
				}
				if status.Code(err) != codes.ResourceExhausted {
					t.Errorf("call: %v", err)
					return
				}
				refusedOnce.Do(func() { close(refused) })
				runtime.Gosched()
			}
			t.Error("a client never got in")
		})
	}
	wg.Wait()
	if got := g.most.Load(); got != limit {
		t.Errorf("at most %d handlers ran at once, want exactly %d", got, limit)
	}
}

func TestConcurrencyRefusals(t *testing.T) {
	store := memstore.New(memstore.Options{})
	conc := sluice.Concurrency(1, time.Minute)
	if _, err := New(store, []Limit{{Policy: conc, Shadow: true}}, nil); err == nil || !strings.Contains(err.Error(), "cannot be a dry run") {
		t.Errorf("New with a dry-run concurrency limit = %v", err)
	}
	l, err := New(store, []Limit{{Policy: conc}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Check(context.Background(), "/svc/M"); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "Check cannot hold a lease") {
		t.Errorf("Check = %v, want Internal saying why", err)
	}
	w, err := NewWaiter(store, []Limit{{Policy: conc}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(context.Background(), "/svc/M"); !errors.Is(err, sluice.ErrNotSupported) {
		t.Errorf("Wait = %v, want ErrNotSupported", err)
	}
}

// fakeStream is a client stream whose RecvMsg waits for a message on
// msgs and returns io.EOF when msgs is closed.
type fakeStream struct {
	grpc.ClientStream
	msgs chan struct{}
}

func (s *fakeStream) RecvMsg(any) error {
	if _, ok := <-s.msgs; !ok {
		return io.EOF
	}
	return nil
}

func TestWaiterHoldsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := NewWaiter(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.Concurrency(1, time.Hour)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		unary, stream := w.Unary(), w.Stream()
		// call makes a unary call that runs until its invoker returns,
		// and reports how long it waited to start.
		call := func(ctx context.Context, run func()) (time.Duration, error) {
			start := time.Now()
			var waited time.Duration
			err := unary(ctx, "/svc/M", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				waited = time.Since(start)
				run()
				return nil
			})
			return waited, err
		}
		letGo := make(chan struct{})
		go call(context.Background(), func() { <-letGo })
		synctest.Wait() // the first call runs its invoker
		short, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := call(short, func() {}); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("while a call runs: %v, want DeadlineExceeded", err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			close(letGo)
		}()
		waited, err := call(context.Background(), func() {})
		if err != nil || waited <= 100*time.Millisecond || waited > 100*time.Millisecond+sluice.LeasePoll {
			t.Fatalf("a waiting call: %v after %v, want to start within %v of the release at 100ms", err, waited, sluice.LeasePoll)
		}

		// A stream holds its slot until RecvMsg reaches the end.
		desc := &grpc.StreamDesc{ServerStreams: true}
		fs := &fakeStream{msgs: make(chan struct{}, 1)}
		cs, err := stream(context.Background(), desc, nil, "/svc/S", func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return fs, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		fs.msgs <- struct{}{}
		if err := cs.RecvMsg(nil); err != nil {
			t.Fatal(err)
		}
		if _, err := call(short, func() {}); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("while a stream is open: %v, want DeadlineExceeded", err)
		}
		close(fs.msgs)
		if err := cs.RecvMsg(nil); err != io.EOF {
			t.Fatalf("RecvMsg at the end = %v", err)
		}
		if waited, err := call(context.Background(), func() {}); err != nil || waited != 0 {
			t.Fatalf("after the stream ended: %v after %v, want at once", err, waited)
		}

		// A stream whose context ends releases its slot.
		sctx, scancel := context.WithCancel(context.Background())
		if _, err := stream(sctx, desc, nil, "/svc/S", func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeStream{msgs: make(chan struct{})}, nil
		}); err != nil {
			t.Fatal(err)
		}
		scancel()
		synctest.Wait()
		if waited, err := call(context.Background(), func() {}); err != nil || waited != 0 {
			t.Fatalf("after the stream's context ended: %v after %v, want at once", err, waited)
		}
	})
}
