package rls

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// calls returns how many calls the store has had.
func (c *countingStore) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allow + c.allowAll + c.peek
}

// descriptors returns n descriptors (k, v0), (k, v1), ...
func descriptors(n int) []*rlscommon.RateLimitDescriptor {
	ds := make([]*rlscommon.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("k", "v"+strconv.Itoa(i))
	}
	return ds
}

// deep returns a descriptor of n entries (k0, v), (k1, v), ...
func deep(n int) *rlscommon.RateLimitDescriptor {
	kv := make([]string, 0, 2*n)
	for i := range n {
		kv = append(kv, "k"+strconv.Itoa(i), "v")
	}
	return desc(kv...)
}

// TestRequestBounds: a request of more than MaxDescriptors descriptors,
// or with a descriptor of more than MaxEntries entries, is refused with
// InvalidArgument over gRPC and charges nothing; one at the bounds is
// decided.
func TestRequestBounds(t *testing.T) {
	cs := &countingStore{Store: memstore.New(memstore.Options{})}
	h := startWith(t, cs, compile(t, `
domain: b
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000}
`))
	tests := []struct {
		name string
		ds   []*rlscommon.RateLimitDescriptor
		want codes.Code
	}{
		{"MaxDescriptors", descriptors(MaxDescriptors), codes.OK},
		{"one descriptor too many", descriptors(MaxDescriptors + 1), codes.InvalidArgument},
		{"16000 descriptors", descriptors(16000), codes.InvalidArgument},
		{"MaxEntries", []*rlscommon.RateLimitDescriptor{desc("k", "v"), deep(MaxEntries)}, codes.OK},
		{"one entry too many", []*rlscommon.RateLimitDescriptor{desc("k", "v"), deep(MaxEntries + 1)}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cs.calls()
			resp, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "b", Descriptors: tt.ds})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("ShouldRateLimit(%d descriptors) = %v, want %v", len(tt.ds), err, tt.want)
			}
			if tt.want != codes.OK {
				if calls := cs.calls() - before; calls != 0 {
					t.Errorf("a refused request made %d store calls, want 0", calls)
				}
				return
			}
			if len(resp.Statuses) != len(tt.ds) || resp.OverallCode != ok {
				t.Errorf("ShouldRateLimit = %s with %d statuses, want OK with %d", resp.OverallCode, len(resp.Statuses), len(tt.ds))
			}
		})
	}
	// The unknown domain is refused the same way.
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "unknown", Descriptors: descriptors(MaxDescriptors + 1)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ShouldRateLimit(unknown domain, %d descriptors) = %v, want InvalidArgument", MaxDescriptors+1, err)
	}
}

// rawCodec sends the bytes it is given as a call's message, and receives
// a reply as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestMalformedRequest: bytes that are not a RateLimitRequest, sent on a
// real gRPC connection, are answered InvalidArgument by a server with
// ServerOptions; a well-formed request is decided on it, and on a server
// without those options.
func TestMalformedRequest(t *testing.T) {
	h := start(t, "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tests := []struct {
		name string
		msg  []byte
	}{
		{"truncated field", []byte{0x0a, 0x05, 'e'}},                  // domain: 5 bytes announced, 1 sent
		{"invalid wire type", []byte{0x0f}},                           // field 1, wire type 7
		{"invalid UTF-8 domain", []byte{0x0a, 0x02, 0xff, 0xfe}},      // a proto3 string must be UTF-8
		{"truncated varint", []byte{0x18, 0xff}},                      // hits_addend's varint cut short
		{"truncated descriptor", []byte{0x0a, 0x01, 'm', 0x12, 0x04}}, // descriptors: 4 bytes announced, none sent
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reply []byte
			err := conn.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, tt.msg, &reply, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("ShouldRateLimit(% x) = %v, want InvalidArgument", tt.msg, err)
			}
		})
	}
	resp := h.call(t, "m", desc("k", "v"))
	if resp.OverallCode != ok || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Errorf("a well-formed request: %v, want OK under 5 per minute", resp)
	}

	// Without ServerOptions the handler still decodes requests.
	srv := grpc.NewServer()
	New(memstore.New(memstore.Options{}), compile(t, "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), Options{}).Register(srv)
	plain := testkit.ServeGRPC(t, srv)
	resp, err = rlsv3.NewRateLimitServiceClient(plain).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "m", Descriptors: descriptors(1)})
	if err != nil || resp.OverallCode != ok || resp.Statuses[0].GetLimitRemaining() != 4 {
		t.Errorf("ShouldRateLimit on a server without ServerOptions = %v, %v; want OK with 4 left", resp, err)
	}
}

// TestContextDone: a call whose context has ended before the store is
// asked charges nothing and fails with the context's gRPC code.
func TestContextDone(t *testing.T) {
	cs := &countingStore{Store: memstore.New(memstore.Options{})}
	cfg := compile(t, "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	svc := New(cs, cfg, Options{})
	req := &rlsv3.RateLimitRequest{Domain: "c", Descriptors: descriptors(MaxDescriptors)}

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"canceled", canceled, codes.Canceled},
		{"deadline exceeded", expired, codes.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.ShouldRateLimit(tt.ctx, req)
			if status.Code(err) != tt.want {
				t.Errorf("ShouldRateLimit = %v, want %v", err, tt.want)
			}
		})
	}
	if calls := cs.calls(); calls != 0 {
		t.Errorf("the store was called %d times, want 0", calls)
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "c", Descriptors: descriptors(1)})
	if err != nil || resp.Statuses[0].GetLimitRemaining() != 4 {
		t.Errorf("the next call = %v, %v; want 4 left (nothing charged before)", resp, err)
	}
}

// TestBoundsInDocs: docs/envoy.md states the bounds the service applies.
func TestBoundsInDocs(t *testing.T) {
	data, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(data)), " ")
	for _, s := range []string{
		"more than " + strconv.Itoa(MaxDescriptors) + " descriptors",
		"more than " + strconv.Itoa(MaxEntries) + " entries",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/envoy.md does not say %q", s)
		}
	}
}

// barrierStore is a memory store whose decisions each wait until n of
// them have begun, or until the deadline.
type barrierStore struct {
	sluice.Store
	mu       sync.Mutex
	n, begun int
	all      chan struct{}
	deadline time.Duration
}

func (b *barrierStore) wait(ctx context.Context) error {
	b.mu.Lock()
	b.begun++
	if b.begun == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	t := time.NewTimer(b.deadline)
	defer t.Stop()
	select {
	case <-b.all:
		return nil
	case <-t.C:
		return context.DeadlineExceeded
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *barrierStore) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	if err := b.wait(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return b.Store.Allow(ctx, now, req)
}

func (b *barrierStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if err := b.wait(ctx); err != nil {
		return sluice.Decision{}, err
	}
	return b.Store.AllowAll(ctx, now, reqs, out)
}

// TestServerOptionsNoCallWaitsForAWorker: with ServerOptions, more calls
// than StreamWorkers run at once (a call finds no idle worker and runs on
// a goroutine of its own), so a call never waits for another to end: here
// every call's decision waits until all of them have begun.
func TestServerOptionsNoCallWaitsForAWorker(t *testing.T) {
	n := StreamWorkers + 16
	st := &barrierStore{Store: memstore.New(memstore.Options{}), n: n, all: make(chan struct{}), deadline: 20 * time.Second}
	h := startWith(t, st, compile(t, `
- domain: edge
  descriptors:
    - key: user
      rate_limit: {unit: second, requests_per_unit: 1000}
`))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "u"+string(rune('a'+i%26)))}}
			resp, err := h.client.ShouldRateLimit(context.Background(), req)
			if err == nil && resp.OverallCode != ok {
				t.Errorf("call %d: %v, want OK", i, resp.OverallCode)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed (%v): %d calls at once did not all run", err, n)
		}
	}
}

// TestStreamWorkersInDocs: docs/envoy.md names StreamWorkers's number.
func TestStreamWorkersInDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "calls run on " + strconv.Itoa(StreamWorkers) + " goroutines"
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), want) {
		t.Errorf("docs/envoy.md does not say %q (rls.StreamWorkers)", want)
	}
}
