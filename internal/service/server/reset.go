package server

import (
	"context"
	"errors"
	"fmt"
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

// registerReset adds the reset endpoint to the admin routes.
func (h *Handler) registerReset() {
	h.handleAdmin("/v1/reset/{limit}/{key}", "reset", onlyMethod("POST", h.serveReset))
	h.handleAdmin("/v1/reset/", "reset", func(w http.ResponseWriter, r *http.Request) {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "use POST /v1/reset/{limit}/{key}, with a '/' in the key written %2F")
	})
}

func (h *Handler) serveReset(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	name, key := r.PathValue("limit"), r.PathValue("key")
	if st.cfg.Admin().Token == "" {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "resetting keys is off: it needs an admin token,"+
			" so set admin.token_file (or admin.token), and preferably listen.admin to serve the admin endpoints on a listener of their own")
		return
	}
	l, ok := st.cfg.Limit(name)
	if !ok {
		msg := fmt.Sprintf("no limit named %q in the limits section", name)
		if _, envoy := h.limitNamed(st.cfg, name); envoy {
			msg = fmt.Sprintf("limit %q is an Envoy descriptor's: its keys cannot be reset here (only the limits section's can)", name)
		}
		writeProblemJSON(w, http.StatusNotFound, "Not Found", msg)
		return
	}
	if key == "" {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "key is empty")
		return
	}
	ctx := r.Context()
	// The limit's own policy, and the override's in force for the key:
	// each keeps its own state.
	policies := []sluice.Policy{l.Policy}
	if p, overridden := h.resolver.Policy(l.Policy, key); overridden && p != l.Policy {
		policies = append(policies, p)
	}
	for i := range policies {
		if err := h.store.Reset(ctx, sluice.Request{Policy: &policies[i], Key: key}); err != nil {
			if errors.Is(err, sluice.ErrNotSupported) {
				writeProblemJSON(w, http.StatusNotImplemented, "Not Implemented", "the store cannot reset keys: "+err.Error())
				return
			}
			h.logger.LogAttrs(ctx, slog.LevelWarn, "reset: the store failed", slog.String("limit", name), slog.Any("error", err))
			writeProblemJSON(w, http.StatusServiceUnavailable, "Service Unavailable", "the store failed to reset the key; see the server's log")
			return
		}
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "key reset",
		slog.String("who", h.who(r)), slog.String("limit", name), slog.String("key", key), slog.Int("policies", len(policies)))
	writeJSON(w, http.StatusOK, map[string]any{"reset": map[string]string{"limit": name, "key": key}})
}
