package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
)

// handleAdminKey adds the admin route of an operation on one key, POST
// /v1/{op}/{limit}/{key} served by serve, and answers 404 with that form
// for any other path under /v1/{op}/; op also names the endpoint in the
// metrics.
func (h *Handler) handleAdminKey(op string, serve http.HandlerFunc) {
	h.handleAdmin("/v1/"+op+"/{limit}/{key}", op, onlyMethod("POST", serve))
	h.handleAdmin("/v1/"+op+"/", op, func(w http.ResponseWriter, r *http.Request) {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "use POST /v1/"+op+"/{limit}/{key}, with a '/' in the key written %2F")
	})
}

// adminKey is what the admin operations on one key (reset, unblock)
// share: the admin token, the limit of the limits section named in the
// path (and checked by allowed, which answers for itself when it refuses),
// the key, and the policies that keep the key's state: the limit's, and
// the override's in force for the key, if one is. It answers the request
// with the problem and reports false when one of them is missing. doing
// and done name the operation in its messages ("resetting", "reset").
func (h *Handler) adminKey(w http.ResponseWriter, r *http.Request, doing, done string, allowed func(config.Limit) bool) (l config.Limit, key string, policies []sluice.Policy, ok bool) {
	st := h.state.Load()
	name := r.PathValue("limit")
	key = r.PathValue("key")
	if st.cfg.Admin().Token == "" {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", doing+" keys is off: it needs an admin token,"+
			" so set admin.token_file (or admin.token), and preferably listen.admin to serve the admin endpoints on a listener of their own")
		return l, "", nil, false
	}
	l, ok = st.cfg.Limit(name)
	if !ok {
		msg := fmt.Sprintf("no limit named %q in the limits section", name)
		if _, envoy := h.limitNamed(st.cfg, name); envoy {
			msg = fmt.Sprintf("limit %q is an Envoy descriptor's: its keys cannot be %s here (only the limits section's can)", name, done)
		}
		writeProblemJSON(w, http.StatusNotFound, "Not Found", msg)
		return l, "", nil, false
	}
	if allowed != nil && !allowed(l) {
		return l, "", nil, false
	}
	if key == "" {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "key is empty")
		return l, "", nil, false
	}
	policies = []sluice.Policy{l.Policy}
	if p, overridden := h.resolver.Policy(l.Policy, key); overridden && p != l.Policy {
		policies = append(policies, p)
	}
	return l, key, policies, true
}

// adminStoreFailed answers an admin operation on a key whose store call
// failed with err: 501 when the store cannot do it, else 503 and a line
// in the log.
func (h *Handler) adminStoreFailed(ctx context.Context, w http.ResponseWriter, op, limit string, err error) {
	if errors.Is(err, sluice.ErrNotSupported) {
		writeProblemJSON(w, http.StatusNotImplemented, "Not Implemented", "the store cannot "+op+" keys: "+err.Error())
		return
	}
	h.logger.LogAttrs(ctx, slog.LevelWarn, op+": the store failed", slog.String("limit", limit), slog.Any("error", err))
	writeProblemJSON(w, http.StatusServiceUnavailable, "Service Unavailable", "the store failed to "+op+" the key; see the server's log")
}
