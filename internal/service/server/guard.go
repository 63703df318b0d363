package server

import (
	"net/http"
	"strings"
)

// Tokens for the decision API (listen.tokens_file) and Sluice's own
// namespace on listen.http.
//
// With listen.tokens_file set, the decision endpoints (/v1/check,
// /v1/forward-auth, and /v1/explain where listen.http serves it) need
// "Authorization: Bearer TOKEN" with one of the file's tokens; the reverse
// proxy's traffic does not. The tokens come from the configuration in use
// at each request, so a reload that changes the file applies at once.
//
// listen.http never forwards /v1/... or /metrics to the upstream: a path
// there that no endpoint of the listener claims is answered 404, naming
// the listener that serves it (listen.admin for the admin endpoints), so
// that a client pointed at the wrong port does not hand its admin token
// to the application behind Sluice.

// needClientToken answers 401 to a request without one of the decision
// API's tokens, when listen.tokens_file is set.
func (h *Handler) needClientToken(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tokens := h.state.Load().cfg.Tokens()
		if tokens == nil || tokens.Match(r.Header.Get("Authorization")) {
			next(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		writeError(w, http.StatusUnauthorized, "this endpoint needs a token of listen.tokens_file: send Authorization: Bearer TOKEN")
	}
}

// handleExplain registers /v1/explain: an admin endpoint, behind the
// admin token; where listen.http serves it (no listen.admin) and no admin
// token is configured, behind the decision API's tokens instead, when
// listen.tokens_file is set, and with neither, not where listen.http
// proxies (notWhereProxied).
func (h *Handler) handleExplain(fn http.HandlerFunc) {
	const pattern, name = "/v1/explain", "explain"
	h.admin.Handle(pattern, h.instrument(name, h.needToken(fn)))
	h.mux.Handle(pattern, h.instrument(name, h.needToken(func(w http.ResponseWriter, r *http.Request) {
		cfg := h.state.Load().cfg
		switch {
		case cfg.Admin().Token != "":
			fn(w, r) // the admin token was checked
		case cfg.Tokens() == nil:
			h.notWhereProxied(fn)(w, r)
		default:
			h.needClientToken(fn)(w, r)
		}
	})))
}

// reservedPath reports whether a path belongs to Sluice's own namespace,
// which listen.http never forwards: /v1 and everything below it, and
// /metrics.
func reservedPath(p string) bool {
	return p == "/v1" || strings.HasPrefix(p, "/v1/") || p == "/metrics" || strings.HasPrefix(p, "/metrics/")
}

// reserve returns next, the reverse proxy, with Sluice's namespace kept
// out of it: a reserved path is answered 404 with a problem+json body.
// split says that the admin endpoints are on listen.admin (Public); the
// body then names that listener for the paths it serves.
func (h *Handler) reserve(split bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !reservedPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		detail := "No such Sluice endpoint: " + r.URL.Path + "."
		if split && h.adminServes(r) {
			detail = r.URL.Path + " is an admin endpoint, served on listen.admin, not on listen.http."
		}
		detail += " listen.http keeps /v1/ and /metrics for Sluice and never forwards them to the upstream."
		writeProblemJSON(w, http.StatusNotFound, "Not Found", detail)
	})
}

// adminServes reports whether the admin listener has an endpoint for the
// request's path, with its method or with any other.
func (h *Handler) adminServes(r *http.Request) bool {
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPost} {
		q := r.Clone(r.Context())
		q.Method = m
		if _, pattern := h.admin.Handler(q); pattern != "" && pattern != "/" {
			return true
		}
	}
	return false
}

// writeProblemJSON writes an RFC 9457 problem+json response.
func writeProblemJSON(w http.ResponseWriter, status int, title, detail string) {
	problem := map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail}
	writeEncoded(w, status, "application/problem+json", problem, `{"title":"encoding the response failed"}`)
}
