package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/service/config"
)

// The Handler's endpoints fall in three groups:
//
//   - public: the decision API, forward-auth and the reverse proxy;
//   - admin: the status page, /v1/status, /v1/explain and /metrics, which
//     need the admin token (admin.token or admin.token_file) when one is
//     configured;
//   - probes: /healthz and /readyz, open on every listener so that load
//     balancers and orchestrators can reach them.
//
// The Handler itself serves all three, for a service with one listener
// (listen.http alone). On such a listener that also proxies (with
// proxy.upstream), the admin endpoints are the application's clients' to
// reach: there they are served only when an admin token is configured,
// and answer 404 naming listen.admin and admin.token otherwise. Writing
// overrides needs an admin token on every listener (overrides.go). With listen.admin set, bind Public to listen.http
// and Admin to listen.admin:
//
//	if addr := cfg.Listen().Admin; addr != "" {
//		publicSrv.Handler = h.Public() // listen.http
//		adminSrv.Handler = h.Admin()   // listen.admin
//	} else {
//		publicSrv.Handler = h // listen.http serves everything
//	}
//
// The token is read from the configuration in use at each request, so a
// reload that changes it applies at once.

// initRoutes makes the Handler's three request multiplexers.
func (h *Handler) initRoutes() {
	h.mux = http.NewServeMux()
	h.public = http.NewServeMux()
	h.admin = http.NewServeMux()
}

// Public returns the handler of the public endpoints, for listen.http when
// listen.admin is set: the decision API, forward-auth, the reverse proxy,
// /healthz and /readyz.
func (h *Handler) Public() http.Handler { return h.public }

// Admin returns the handler of the admin endpoints, for listen.admin: the
// status page at /, /v1/status, /v1/explain and /metrics, behind the admin
// token when one is configured, and /healthz and /readyz.
func (h *Handler) Admin() http.Handler { return h.admin }

// handleAdmin registers an admin endpoint, behind the admin token.
func (h *Handler) handleAdmin(pattern, name string, fn http.HandlerFunc) {
	in := h.needToken(fn)
	h.mux.Handle(pattern, h.instrument(name, h.notWhereProxied(in)))
	h.admin.Handle(pattern, h.instrument(name, in))
}

// notWhereProxied answers 404 to an admin request on the Handler itself
// (one listener for everything) while the configuration proxies and sets
// no admin token, so that the proxy's clients cannot read the status,
// the keys' states or the metrics, nor change overrides.
func (h *Handler) notWhereProxied(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := h.state.Load()
		if st.proxy != nil && st.cfg.Admin().Token == "" {
			writeProblemJSON(w, http.StatusNotFound, "Not Found", r.URL.Path+
				" is an admin endpoint, which a listener that also proxies serves only behind an admin token:"+
				" set listen.admin to serve the admin endpoints on a listener of their own, or admin.token_file.")
			return
		}
		next(w, r)
	}
}

// AdminEndpoints says where the admin endpoints of cfg are served, for
// the log at start: split says that listen.admin is set.
func AdminEndpoints(cfg *config.Config, split bool) string {
	token := cfg.Admin().Token != ""
	p, _ := cfg.Proxy()
	proxied := p.Upstream != nil
	writes := "overrides are read-only (writing them needs admin.token or admin.token_file)"
	if token {
		writes = "overrides can be written with the admin token"
	}
	switch {
	case split && token:
		return "the status page, /v1/status, /v1/explain, /metrics and /v1/overrides are served on listen.admin behind the admin token"
	case split:
		return "the status page, /v1/status, /v1/explain, /metrics and /v1/overrides are served on listen.admin without a token; " + writes
	case proxied && token:
		return "/v1/status, /v1/explain, /metrics and /v1/overrides are served on listen.http behind the admin token; the status page is not served (/ goes to the upstream): set listen.admin to see it"
	case proxied:
		return "no admin endpoint is served: listen.http proxies to the upstream, so the status page, /v1/status, /v1/explain, /metrics and /v1/overrides need listen.admin (a listener of their own) or admin.token_file"
	case token:
		return "the status page, /v1/status, /v1/explain, /metrics and /v1/overrides are served on listen.http behind the admin token"
	default:
		return "the status page, /v1/status, /v1/explain, /metrics and /v1/overrides are served on listen.http without a token; " + writes
	}
}

// handleProbe registers an endpoint served on every listener, without a
// token.
func (h *Handler) handleProbe(pattern, name string, fn http.HandlerFunc) {
	in := h.instrument(name, fn)
	h.mux.Handle(pattern, in)
	h.public.Handle(pattern, in)
	h.admin.Handle(pattern, in)
}

// handleRoot registers what answers the paths no other endpoint claims:
// the reverse proxy on the public listener; the status page at / on the
// admin listener; and on the Handler itself, the status page at / when no
// upstream is configured, else the proxy.
func (h *Handler) handleRoot() {
	proxy := h.instrument("proxy", http.HandlerFunc(h.serveProxy))
	page := h.instrument("status_page", h.needToken(h.servePage))
	h.public.Handle("/", h.reserve(true, proxy)) // guard.go
	h.mux.Handle("/", h.reserve(false, proxy))
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if h.state.Load().proxy != nil {
			proxy.ServeHTTP(w, r)
			return
		}
		page.ServeHTTP(w, r)
	})
	h.admin.Handle("GET /{$}", page)
	h.admin.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such admin endpoint: "+r.URL.Path+" (the decision API, forward-auth and the proxy are on listen.http)")
	})
}

// needToken answers 401 to a request without the admin token, when one is
// configured. The token comes as "Authorization: Bearer TOKEN", or, so
// that a browser can open the status page, as the password of HTTP Basic
// authentication (with any user name).
func (h *Handler) needToken(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := h.state.Load().cfg.Admin().Token
		if token == "" || tokenMatches(r.Header.Get("Authorization"), token) {
			next(w, r)
			return
		}
		hd := w.Header()
		hd.Add("WWW-Authenticate", `Bearer realm="sluice admin"`)
		hd.Add("WWW-Authenticate", `Basic realm="sluice admin", charset="UTF-8"`)
		writeError(w, http.StatusUnauthorized, "this admin endpoint needs the admin token: send Authorization: Bearer TOKEN")
	}
}

// tokenMatches reports whether an Authorization header carries token. The
// comparison takes the same time whatever the header holds.
func tokenMatches(auth, token string) bool {
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok {
		return false
	}
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Bearer"):
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return false
		}
		_, pass, ok := strings.Cut(string(b), ":")
		if !ok {
			return false
		}
		cred = pass
	default:
		return false
	}
	// Hashing first makes the comparison independent of the lengths.
	got, want := sha256.Sum256([]byte(cred)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
