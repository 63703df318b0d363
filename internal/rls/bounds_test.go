package rls

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	data, err := os.ReadFile("../../docs/envoy.md")
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
