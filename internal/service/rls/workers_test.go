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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

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
