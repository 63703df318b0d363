package httplimit

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

// usage is what a request's handler reported it used, for the limits
// with Usage.
type usage struct {
	n        atomic.Int64
	reported atomic.Bool
}

type usageKey struct{}

// ReportUsage adds n units to what the request whose context is ctx
// used, for the middleware's limits with Usage: called by the handler
// once the cost is known (an LLM call's total tokens), in one call or in
// parts. It reports whether ctx belongs to such a request; a negative n
// is ignored.
func ReportUsage(ctx context.Context, n int64) bool {
	u, ok := ctx.Value(usageKey{}).(*usage)
	if !ok || n < 0 {
		return false
	}
	u.n.Add(n)
	u.reported.Store(true)
	return true
}

// endLease ends lease, taken for r under the checks of sc, when the
// handler has returned: it frees what the lease holds, and settles the
// Usage limits with what the handler reported (used), or keeps their
// estimates when it reported nothing.
func (m *Middleware) endLease(r *http.Request, lease string, sc *scratch, used *usage) {
	if used == nil || !used.reported.Load() {
		m.releaseLease(r, lease)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ReleaseTimeout)
	defer cancel()
	n := used.n.Load()
	var buf [8]int64
	actual := buf[:0]
	for _, i := range sc.idx {
		a := int64(-1)
		if m.limits[i].usage {
			a = n
		}
		actual = append(actual, a)
	}
	if _, err := engine.Settle(ctx, m.store, time.Time{}, lease, sc.checks, actual); err != nil && m.logger != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: settling the usage after the response failed; the estimate stays charged",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int64("usage", n), slog.Any("error", err))
	}
}
