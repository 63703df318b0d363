package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice"
)

// The admin API's reset of one key (docs/configuration.md):
//
//	POST /v1/reset/{limit}/{key}   forget what the key has spent and owes
//
// The key starts afresh under the limit's policy and under the override
// in force for it, if one is: its debt, its window, its bucket (for a
// concurrency limit, every slot it holds, whose leases then release
// nothing). Like the overrides' PUT and DELETE, it needs an admin token
// wherever it is served; a key with a '/' is written %2F.

// serveReset answers POST /v1/reset/{limit}/{key}.
func (h *Handler) serveReset(w http.ResponseWriter, r *http.Request) {
	l, key, policies, ok := h.adminKey(w, r, "resetting", "reset", nil)
	if !ok {
		return
	}
	ctx := r.Context()
	for i := range policies {
		if err := h.store.Reset(ctx, sluice.Request{Policy: &policies[i], Key: key}); err != nil {
			h.adminStoreFailed(ctx, w, "reset", l.Name(), err)
			return
		}
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "key reset",
		slog.String("who", h.who(r)), slog.String("limit", l.Name()), slog.String("key", key), slog.Int("policies", len(policies)))
	writeJSON(w, http.StatusOK, map[string]any{"reset": map[string]string{"limit": l.Name(), "key": key}})
}
