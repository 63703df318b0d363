package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
)

// The admin API's lifting of a block (docs/configuration.md):
//
//	POST /v1/unblock/{limit}/{key}   let a blocked key in again
//
// For a limit with a penalty: the key's block is lifted, its offences
// are forgotten, and so is what it has spent, under the limit's policy
// and under the override in force for it, if one is. What it spent goes
// too because a key whose limit is still spent would be refused, and so
// blocked, again at its next request. It answers whether the key was
// blocked. Like reset, it needs an admin token wherever it is served; a
// key with a '/' is written %2F.

// serveUnblock answers POST /v1/unblock/{limit}/{key}.
func (h *Handler) serveUnblock(w http.ResponseWriter, r *http.Request) {
	l, key, policies, ok := h.adminKey(w, r, "unblocking", "unblocked", func(l config.Limit) bool {
		if l.Policy.Penalty.IsZero() {
			writeProblemJSON(w, http.StatusConflict, "Conflict", fmt.Sprintf("limit %q has no penalty: its keys are never blocked (POST /v1/reset/%s/{key} forgets what a key spent)", l.Name(), l.Name()))
			return false
		}
		return true
	})
	if !ok {
		return
	}
	ctx := r.Context()
	blocked := false
	for i := range policies {
		req := sluice.Request{Policy: &policies[i], Key: key}
		lifted, err := h.store.Unblock(ctx, time.Time{}, req)
		if err == nil {
			err = h.store.Reset(ctx, req)
		}
		if err != nil {
			h.adminStoreFailed(ctx, w, "unblock", l.Name(), err)
			return
		}
		blocked = blocked || lifted
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "key unblocked",
		slog.String("who", h.who(r)), slog.String("limit", l.Name()), slog.String("key", key), slog.Bool("was_blocked", blocked))
	writeJSON(w, http.StatusOK, map[string]any{"unblocked": map[string]any{"limit": l.Name(), "key": key, "was_blocked": blocked}})
}
