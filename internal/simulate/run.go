// Package simulate runs traffic through Sluice's algorithms, as the
// `sluice simulate` command does: it reads traces (TraceReader), replays
// them against policies at the trace's own times (Run), and reports the
// decisions one by one (JSONLWriter), per key (KeySummary), or as a
// comparison of several algorithms (Comparison).
//
// A simulation streams: Run holds one request at a time, and the reports
// keep what they need per key, not per request (see each type's doc for
// its memory). Every decision is the in-memory store's, so it is exactly
// what a Limiter would decide at those instants.
package simulate

import (
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
// empty). A request whose cost exceeds a policy's capacity is a decision:
// denied, with RetryAfter sluice.Never. Run returns the first error of src
// (other than io.EOF) or of observe, an error when a request's time is
// before the previous one's, and ctx's error when ctx ends.
func Run(ctx context.Context, src Source, policies []sluice.Policy, observe func(req Request, ds []sluice.Decision) error) error {
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
	ds := make([]sluice.Decision, len(policies))
	var prev int64
	for n := int64(0); ; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		req, err := src.Next()
		if err == io.EOF {
			return nil
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
		prev = req.T
		now := time.UnixMilli(req.T)
		for i := range policies {
			d, err := stores[i].Allow(ctx, now, sluice.Request{Policy: &policies[i], Key: req.Key, Cost: req.Cost})
			if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) {
				return fmt.Errorf("simulate: request %d (%s at %d ms): %w", n+1, req.Key, req.T, err)
			}
			ds[i] = d
		}
		if err := observe(req, ds); err != nil {
			return err
		}
	}
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
