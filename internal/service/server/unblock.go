package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
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

// registerUnblock adds the unblock endpoint to the admin routes.
func (h *Handler) registerUnblock() {
	h.handleAdmin("/v1/unblock/{limit}/{key}", "unblock", onlyMethod("POST", h.serveUnblock))
	h.handleAdmin("/v1/unblock/", "unblock", func(w http.ResponseWriter, r *http.Request) {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "use POST /v1/unblock/{limit}/{key}, with a '/' in the key written %2F")
	})
}

func (h *Handler) serveUnblock(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	name, key := r.PathValue("limit"), r.PathValue("key")
	if st.cfg.Admin().Token == "" {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "unblocking keys is off: it needs an admin token,"+
			" so set admin.token_file (or admin.token), and preferably listen.admin to serve the admin endpoints on a listener of their own")
		return
	}
	l, ok := st.cfg.Limit(name)
	if !ok {
		msg := fmt.Sprintf("no limit named %q in the limits section", name)
		if _, envoy := h.limitNamed(st.cfg, name); envoy {
			msg = fmt.Sprintf("limit %q is an Envoy descriptor's: its keys cannot be unblocked here (only the limits section's can)", name)
		}
		writeProblemJSON(w, http.StatusNotFound, "Not Found", msg)
		return
	}
	if l.Policy.Penalty.IsZero() {
		writeProblemJSON(w, http.StatusConflict, "Conflict", fmt.Sprintf("limit %q has no penalty: its keys are never blocked (POST /v1/reset/%s/{key} forgets what a key spent)", name, name))
		return
	}
	if key == "" {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "key is empty")
		return
	}
	ctx := r.Context()
	policies := []sluice.Policy{l.Policy}
	if p, overridden := h.resolver.Policy(l.Policy, key); overridden && p != l.Policy {
		policies = append(policies, p)
	}
	blocked := false
	for i := range policies {
		req := sluice.Request{Policy: &policies[i], Key: key}
		lifted, err := h.store.Unblock(ctx, time.Time{}, req)
		if err == nil {
			err = h.store.Reset(ctx, req)
		}
		if err != nil {
			if errors.Is(err, sluice.ErrNotSupported) {
				writeProblemJSON(w, http.StatusNotImplemented, "Not Implemented", "the store cannot unblock keys: "+err.Error())
				return
			}
			h.logger.LogAttrs(ctx, slog.LevelWarn, "unblock: the store failed", slog.String("limit", name), slog.Any("error", err))
			writeProblemJSON(w, http.StatusServiceUnavailable, "Service Unavailable", "the store failed to unblock the key; see the server's log")
			return
		}
		blocked = blocked || lifted
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "key unblocked",
		slog.String("who", h.who(r)), slog.String("limit", name), slog.String("key", key), slog.Bool("was_blocked", blocked))
	writeJSON(w, http.StatusOK, map[string]any{"unblocked": map[string]any{"limit": name, "key": key, "was_blocked": blocked}})
}
