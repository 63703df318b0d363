package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// serve starts a real gRPC server with the health service on a loopback
// port, limited by l, and returns a client connection to it.
func serve(t *testing.T, l *Limiter, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return serveHealth(t, l, health.NewServer(), dial...)
}

// serveHealth is serve with hs as the health service. The server stops
// and the connection closes when t ends.
func serveHealth(t *testing.T, l *Limiter, hs healthpb.HealthServer, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.Unary()), grpc.StreamInterceptor(l.Stream()))
	healthpb.RegisterHealthServer(srv, hs)
	return testkit.ServeGRPC(t, srv, dial...)
}

func check(ctx context.Context, conn *grpc.ClientConn, trailer *metadata.MD) error {
	opts := []grpc.CallOption{}
	if trailer != nil {
		opts = append(opts, grpc.Trailer(trailer))
	}
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

func TestUnaryDenied(t *testing.T) {
	l, err := New(memstore.New(memstore.Options{}), []Limit{
		{Policy: sluice.SlidingLog(2, time.Hour).Named("per-peer")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	ctx := context.Background()
	for i := range 2 {
		if err := check(ctx, conn, nil); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	var trailer metadata.MD
	err = check(ctx, conn, &trailer)
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code = %v, want ResourceExhausted (%v)", st.Code(), err)
	}
	if !strings.Contains(st.Message(), `"per-peer"`) {
		t.Errorf("message = %q, want the limit's name", st.Message())
	}
	ra := trailer.Get(RetryAfterKey)
	if len(ra) != 1 {
		t.Fatalf("trailer %s = %q, want one value", RetryAfterKey, ra)
	}
	d, ok := RetryDelay(err)
	if secs, err := strconv.Atoi(ra[0]); !ok || err != nil || d != time.Duration(secs)*time.Second || d < time.Second || d > time.Hour {
		t.Errorf("RetryInfo = %v, %v; trailer %q: want the same whole seconds, within the hour", d, ok, ra[0])
	}
	if got := l.Stats()[0].Denied; got != 1 {
		t.Errorf("Denied = %d, want 1", got)
	}
}

func TestRetryInfoMatchesTrailer(t *testing.T) {
	// 1 per 90s: the second call may retry in 90s (rounded up); the trailer
	// and the RetryInfo detail agree.
	l, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.GCRA(1, 90*time.Second, 0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	check(context.Background(), conn, nil)
	var trailer metadata.MD
	err = check(context.Background(), conn, &trailer)
	d, ok := RetryDelay(err)
	if !ok || d != 90*time.Second || strings.Join(trailer.Get(RetryAfterKey), ",") != "90" {
		t.Errorf("RetryDelay = %v, %v; trailer %q; want 90s and \"90\"", d, ok, trailer.Get(RetryAfterKey))
	}
}

func TestStreamDenied(t *testing.T) {
	l, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.SlidingLog(1, time.Hour), Key: Method}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s1, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	s2, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	if got := s2.Trailer().Get(RetryAfterKey); len(got) != 1 {
		t.Errorf("stream trailer = %v, want retry-after", s2.Trailer())
	}
	// The unary method is a different key.
	if err := check(context.Background(), conn, nil); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestMetadataKeyAllOrNothing(t *testing.T) {
	store := memstore.New(memstore.Options{})
	var events []Event
	l, err := New(store, []Limit{
		{Policy: sluice.SlidingLog(2, time.Hour).Named("per-key"), Key: Metadata("X-API-Key")},
		{Policy: sluice.SlidingLog(3, time.Hour).Named("per-method"), Key: Method},
		{Policy: sluice.SlidingLog(1, time.Hour).Named("trial"), Key: Method, Shadow: true},
	}, &Options{OnDecision: func(e *Event) {
		cp := *e
		cp.Results = append([]LimitResult(nil), e.Results...)
		events = append(events, cp)
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	call := func(key string) codes.Code {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		return status.Code(check(ctx, conn, nil))
	}
	steps := []struct {
		key  string
		want codes.Code
	}{
		{"a", codes.OK},
		{"a", codes.OK},
		{"a", codes.ResourceExhausted}, // per-key refuses: per-method not charged
		{"b", codes.OK},                // per-method: 3rd
		{"", codes.ResourceExhausted},  // no key: only per-method applies, spent
	}
	for i, s := range steps {
		if got := call(s.key); got != s.want {
			t.Errorf("step %d (%q): %v, want %v", i+1, s.key, got, s.want)
		}
	}
	if n := l.Stats()[2].DryRunDenied; n != 4 {
		t.Errorf("trial DryRunDenied = %d, want 4 (every call after the first)", n)
	}
	if e := events[2]; e.Allowed || e.Code != codes.ResourceExhausted || e.Results[0].Decision.Allowed || !e.Results[1].Decision.Allowed {
		t.Errorf("event 3 = %+v", e)
	}
	if e := events[4]; e.Results[0].Applied {
		t.Errorf("event 5: per-key applied without a key")
	}
}

func TestStoreFailure(t *testing.T) {
	// The store's errors name a backend and a detail that must not reach
	// the client.
	down := errors.New("redis 10.0.0.9:6379: secret-detail")
	apart := fmt.Errorf("redis 10.0.0.9:6379: secret-detail: %w", sluice.ErrNotAtomic)
	for _, tt := range []struct {
		name     string
		store    teststore.Failing
		failOpen bool
		want     codes.Code
		retry    string
	}{
		{"error", teststore.Failing{Err: down}, false, codes.Unavailable, "1"},
		{"error fail open", teststore.Failing{Err: down}, true, codes.OK, ""},
		{"degraded deny", teststore.Failing{Degraded: &sluice.Decision{Degraded: true, RetryAfter: 1500 * time.Millisecond}}, false, codes.Unavailable, "2"},
		// Never to be decided: no retry information, and not let through.
		{"keys apart", teststore.Failing{Err: apart}, true, codes.Internal, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var evErr error
			l, err := New(tt.store, []Limit{{Policy: sluice.GCRA(1, time.Second, 0)}}, &Options{FailOpen: tt.failOpen, OnDecision: func(e *Event) { evErr = e.Err }})
			if err != nil {
				t.Fatal(err)
			}
			conn := serve(t, l)
			var trailer metadata.MD
			err = check(context.Background(), conn, &trailer)
			if status.Code(err) != tt.want {
				t.Fatalf("code = %v, want %v", status.Code(err), tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("the status leaks the store error: %v", err)
			}
			if got := strings.Join(trailer.Get(RetryAfterKey), ","); got != tt.retry {
				t.Errorf("retry-after = %q, want %q", got, tt.retry)
			}
			if tt.store.Err != nil && evErr == nil {
				t.Error("OnDecision did not get the store error")
			}
		})
	}
}

func TestPeerIP(t *testing.T) {
	tests := []struct {
		addr net.Addr
		bits int
		want string
		ok   bool
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5}, 0, "192.0.2.1", true},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 5}, 0, "192.0.2.1", true},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3::1"), Port: 5}, 0, "2001:db8:1:2::/64", true},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3::1"), Port: 5}, 48, "2001:db8:1::/48", true},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3::1"), Port: 5}, 128, "2001:db8:1:2:3::1", true},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, 0, "/tmp/s", true},
	}
	for _, tt := range tests {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tt.addr})
		got, ok := PeerIP(tt.bits)(ctx, "/x")
		if got != tt.want || ok != tt.ok {
			t.Errorf("PeerIP(%d) of %v = %q, %v, want %q, %v", tt.bits, tt.addr, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := PeerIP(0)(context.Background(), "/x"); ok {
		t.Error("PeerIP without a peer reported a key")
	}
}

func TestParseKey(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k|1"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}})
	for _, tt := range []struct{ spec, want string }{
		{"peer", "192.0.2.7"},
		{"method", "/pkg.Svc/Do"},
		{"metadata:X-API-Key", "k|1"},
		{"const:all", "all"},
		{"metadata:x-api-key+method", `k\|1|/pkg.Svc/Do`},
	} {
		fn, err := ParseKey(tt.spec)
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", tt.spec, err)
		}
		if got, _ := fn(ctx, "/pkg.Svc/Do"); got != tt.want {
			t.Errorf("ParseKey(%q) = %q, want %q", tt.spec, got, tt.want)
		}
	}
	for _, bad := range []string{"", "ip", "metadata", "metadata:", "peer:x", "peer+"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded, want an error", bad)
		}
	}
}

func TestNewErrors(t *testing.T) {
	store := memstore.New(memstore.Options{})
	ok := sluice.GCRA(1, time.Second, 0)
	for _, tt := range []struct {
		name   string
		store  sluice.Store
		limits []Limit
		want   string
	}{
		{"nil store", nil, []Limit{{Policy: ok}}, "store is nil"},
		{"no limits", store, nil, "no limits"},
		{"invalid", store, []Limit{{Policy: sluice.GCRA(0, time.Second, 0)}}, "invalid policy"},
		{"duplicate", store, []Limit{{Policy: ok.Named("a")}, {Policy: ok.Named("a")}}, "already used by limit 1"},
		{"cost", store, []Limit{{Policy: ok, Cost: 2}}, "exceeds the policy's capacity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.store, tt.limits, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestWaiter(t *testing.T) {
	// The server allows 100/s; the client keeps itself to 10 per 100ms
	// with a burst of 2, so the 4 calls take about 100ms and none is
	// refused.
	server, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.TokenBucket(100, time.Second, 0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWaiter(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.TokenBucket(20, time.Second, 2)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, server, grpc.WithUnaryInterceptor(w.Unary()), grpc.WithStreamInterceptor(w.Stream()))
	start := time.Now()
	for i := range 4 {
		if err := check(context.Background(), conn, nil); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if el := time.Since(start); el < 95*time.Millisecond {
		t.Errorf("4 calls took %v, want at least 100ms (2 at once, then 1 per 50ms)", el)
	}
	// A deadline the wait would pass fails at once with DeadlineExceeded.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	check(context.Background(), conn, nil)
	check(context.Background(), conn, nil)
	if err := check(ctx, conn, nil); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("with a short deadline: %v, want DeadlineExceeded", err)
	}
}

func TestWaiterHonoursServerRetry(t *testing.T) {
	// The server allows 1 per 2s; the client has no limit of its own worth
	// speaking of, so its second call is refused with a retry of 2s (the
	// rest of the 2s, rounded up), and the Waiter holds the third call
	// until then.
	server, err := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.GCRA(1, 2*time.Second, 0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWaiter(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.TokenBucket(1000, time.Second, 0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, server, grpc.WithUnaryInterceptor(w.Unary()))
	if err := check(context.Background(), conn, nil); err != nil {
		t.Fatal(err)
	}
	if err := check(context.Background(), conn, nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	start := time.Now()
	if err := check(context.Background(), conn, nil); err != nil {
		t.Fatalf("third call: %v", err)
	}
	if el := time.Since(start); el < 1900*time.Millisecond {
		t.Errorf("third call went after %v, want the server's retry time (2s)", el)
	}
}

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
	r.conn = serve(t, l)
	var wg sync.WaitGroup
	wg.Go(func() {
		for c := range r.calls {
			r.done[c.caller] <- r.conn.Invoke(context.Background(), c.method, c.req, c.reply)
		}
	})
	// Before serve's clean-up closes the connection and stops the server.
	t.Cleanup(func() {
		close(r.calls)
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

// TestPenalty: a policy with a penalty blocks a caller that went over it;
// the retry-after trailer and RetryInfo say when the block ends.
func TestPenalty(t *testing.T) {
	c := teststore.NewClock(time.Unix(1_699_999_200, 0))
	p := sluice.GCRA(1, time.Second, 0).Named("guarded")
	p.Penalty = sluice.Penalty{BlockFor: time.Hour}
	l, err := New(memstore.New(memstore.Options{Now: c.Now}), []Limit{{Policy: p}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	ctx := context.Background()
	if err := check(ctx, conn, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		var trailer metadata.MD
		err := check(ctx, conn, &trailer)
		d, ok := RetryDelay(err)
		if status.Code(err) != codes.ResourceExhausted || !ok || d != time.Hour || strings.Join(trailer.Get(RetryAfterKey), ",") != "3600" {
			t.Fatalf("call %d: %v, RetryDelay %v; trailer %q; want ResourceExhausted for the block of an hour", i+2, err, d, trailer.Get(RetryAfterKey))
		}
	}
	c.Advance(time.Hour)
	if err := check(ctx, conn, nil); err != nil {
		t.Errorf("after the block: %v, want admitted", err)
	}
}
