// Package simulate runs traffic through Sluice's algorithms, as the
// `sluice simulate` command does: it reads traces (TraceReader), replays
// them against policies at the trace's own times (Run), and reports the
// decisions one by one (JSONLWriter), per key (KeySummary), or as a
// comparison of several algorithms (Comparison).
//
// A simulation streams: Run holds one request at a time (and, under a
// concurrency policy, the leases of the admitted requests still running),
// and the reports keep what they need per key, not per request (see each
// type's doc for its memory). Every decision is the in-memory store's, so it is exactly
// what a Limiter would decide at those instants.
package simulate

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Source yields the requests of a simulation, in non-decreasing time order.
// A TraceReader is a Source.
type Source interface {
	// Next returns the next request, or io.EOF after the last one.
	Next() (Request, error)
}

var _ Source = (*TraceReader)(nil)

// ctxCheckEvery is how many requests Run decides between checks of ctx.
const ctxCheckEvery = 1024

// Run replays every request of src, in order, against each of policies at
// the request's time (T milliseconds since the Unix epoch, so windows align
// to multiples of the period from the epoch), and passes each request with
// its decisions to observe: ds[i] is the decision of policies[i]. ds is
// reused between calls; observe must copy what it keeps.
//
// Each policy keeps its own state, starting empty (buckets full, windows
// empty, nothing held). A request whose cost exceeds a policy's capacity
// is a decision: denied, with RetryAfter sluice.Never. Run returns the
// first error of src (other than io.EOF) or of observe, an error when a
// request's time is before the previous one's, and ctx's error when ctx
// ends.
//
// Under a concurrency policy a request runs for its Duration: the one
// admitted at T holds its cost until T + Duration, when Run releases its
// lease (Store.Release at that instant). Before deciding a request at T,
// Run releases, in order of their ends, every lease that ends at or
// before T; a request of Duration 0 is released at T right after its
// decision; after the last request, the leases still held are released
// at their ends. A request that runs as long as the policy's lease
// (Period) or longer loses its units when the lease expires, since Run
// does not renew leases. The rate policies ignore Duration. Run keeps one
// entry per admitted request that still holds units, at most the limit
// per key and concurrency policy.
func Run(ctx context.Context, src Source, policies []sluice.Policy, observe func(req Request, ds []sluice.Decision) error) error {
	return run(ctx, src, policies, observe, nil)
}

// run is Run, and calls released, when not nil, after each release of a
// lease with the policy's index, the time (ms) and whether it freed units.
func run(ctx context.Context, src Source, policies []sluice.Policy, observe func(req Request, ds []sluice.Decision) error,
	released func(policy int, t int64, freed bool)) error {
	if len(policies) == 0 {
		return errors.New("simulate: no policy")
	}
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	// One store per policy: each policy keeps its own state, and a store
	// that serves one policy never has to look up another's parameters.
	stores := make([]*memstore.Store, len(policies))
	for i := range stores {
		stores[i] = memstore.New(memstore.Options{})
		defer stores[i].Close()
	}
	var holds holdHeap
	release := func(h hold) error {
		freed, err := stores[h.policy].Release(ctx, time.UnixMilli(h.end), h.lease, nil)
		if err != nil {
			return fmt.Errorf("simulate: release at %d ms: %w", h.end, err)
		}
		if released != nil {
			released(h.policy, h.end, freed)
		}
		return nil
	}
	// releaseUntil releases, in order of their ends, the holds that end
	// at or before t.
	releaseUntil := func(t int64) error {
		for len(holds) > 0 && holds[0].end <= t {
			if err := release(heap.Pop(&holds).(hold)); err != nil {
				return err
			}
		}
		return nil
	}
	ds := make([]sluice.Decision, len(policies))
	var prev, seq int64
	for n := int64(0); ; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		req, err := src.Next()
		if err == io.EOF {
			return releaseUntil(math.MaxInt64)
		}
		if err != nil {
			return err
		}
		if req.T < prev {
			return fmt.Errorf("simulate: request %d at %d ms is before the previous one at %d ms", n+1, req.T, prev)
		}
		if req.T < 0 || req.T > MaxTime {
			return fmt.Errorf("simulate: request %d: time %d ms is outside 0 to %d", n+1, req.T, int64(MaxTime))
		}
		if req.Duration < 0 || req.Duration > MaxTime-req.T {
			return fmt.Errorf("simulate: request %d: duration %d ms at %d ms is negative or ends after %d", n+1, req.Duration, req.T, int64(MaxTime))
		}
		prev = req.T
		if err := releaseUntil(req.T); err != nil {
			return err
		}
		now := time.UnixMilli(req.T)
		for i := range policies {
			d, err := stores[i].Allow(ctx, now, sluice.Request{Policy: &policies[i], Key: req.Key, Cost: req.Cost})
			if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) {
				return fmt.Errorf("simulate: request %d (%s at %d ms): %w", n+1, req.Key, req.T, err)
			}
			ds[i] = d
			if d.Lease == "" {
				continue // refused, or a rate policy
			}
			h := hold{end: req.T + req.Duration, seq: seq, policy: i, lease: d.Lease}
			seq++
			switch {
			case req.Duration == 0:
				if err := release(h); err != nil {
					return err
				}
			case req.Duration*int64(time.Millisecond) < int64(policies[i].Period):
				heap.Push(&holds, h)
			default:
				// The lease expires at or before the request's end, where
				// its release would free nothing: the store frees the
				// units on its own.
			}
		}
		if err := observe(req, ds); err != nil {
			return err
		}
	}
}

// hold is the lease of a request admitted under a concurrency policy,
// which Run releases at end (ms since the Unix epoch). seq, the order of
// the decisions, orders the holds that end at the same instant.
type hold struct {
	end, seq int64
	policy   int
	lease    string
}

// holdHeap is a min-heap of holds by end, then seq (container/heap).
type holdHeap []hold

func (h holdHeap) Len() int { return len(h) }
func (h holdHeap) Less(i, j int) bool {
	return h[i].end < h[j].end || h[i].end == h[j].end && h[i].seq < h[j].seq
}
func (h holdHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)   { *h = append(*h, x.(hold)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Span describes the requests of a simulation: how many, and the times of
// the first and the last. The zero Span holds no request.
type Span struct {
	Requests    int64
	First, Last int64 // ms since the Unix epoch
}

// Add counts req.
func (s *Span) Add(req Request) {
	if s.Requests == 0 {
		s.First = req.T
	}
	s.Last = req.T
	s.Requests++
}

// String describes s, such as "200 requests,
// 2026-01-01T12:00:59Z to 2026-01-01T12:01:00Z (1s)".
func (s Span) String() string {
	switch s.Requests {
	case 0:
		return "no requests"
	case 1:
		return "1 request, at " + formatTime(s.First)
	}
	return fmt.Sprintf("%d requests, %s to %s (%s)", s.Requests, formatTime(s.First), formatTime(s.Last),
		formatMillis(s.Last-s.First))
}

// formatMillis formats a non-negative count of milliseconds as a
// time.Duration does, or in whole days when that would overflow.
func formatMillis(ms int64) string {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Sprintf("%d days", ms/(24*3600*1000))
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// formatTime formats t (ms since the Unix epoch) as UTC RFC 3339 with
// milliseconds when they are not zero.
func formatTime(t int64) string {
	return time.UnixMilli(t).UTC().Format("2006-01-02T15:04:05.999Z07:00")
}

// ceilMillis returns d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

// retryMillis returns a RetryAfter in whole milliseconds (rounded up), or
// −1 for sluice.Never.
func retryMillis(d time.Duration) int64 {
	if d == sluice.Never {
		return -1
	}
	return ceilMillis(d)
}
