package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/httplimit"
)

// serveForwardAuth answers a reverse proxy that asks whether to let a
// request through (Caddy's forward_auth, Traefik's ForwardAuth, nginx's
// auth_request): 200 to let it through, 429 with Retry-After to stop it,
// both with the RateLimit fields of the rule's limits.
//
// The rule is the one named by ?rule=NAME, or else the first whose match
// selects the original request. When the connection comes from a trusted
// proxy, the original request is described by X-Forwarded-Method,
// X-Forwarded-Uri and X-Forwarded-Host (and the client address by
// X-Forwarded-For); otherwise those headers are ignored and the request is
// taken as it is, and the first such request from each peer is logged. A
// request no rule selects is let through.
//
// The path of X-Forwarded-Uri is matched in normal form (normalPath), as
// the proxy's own requests are; one that servers read in different ways
// is refused with 400, since the gateway forwards it as it is.
//
// ?deny_status=401 or 403 replaces the 429 of a denial, for nginx's
// auth_request, which treats any other status as an error.
func (h *Handler) serveForwardAuth(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	trusted := st.trustedPeer(r.RemoteAddr)
	if !trusted && hasForwarded(r.Header) {
		h.untrustedForwardAuth(st, r)
	}
	orig, err := original(r, trusted)
	if err != nil {
		// Only here: errors.As would move pe to the heap on every request.
		var pe pathError
		if errors.As(err, &pe) {
			writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "X-Forwarded-Uri: "+pe.Error()+"; Sluice refuses such requests.")
			return
		}
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	if ds := q.Get("deny_status"); ds != "" {
		status, err := strconv.Atoi(ds)
		if err != nil || (status != http.StatusUnauthorized && status != http.StatusForbidden && status != http.StatusTooManyRequests) {
			writeError(w, http.StatusBadRequest, "deny_status must be 401, 403 or 429, got "+strconv.Quote(ds))
			return
		}
		orig = orig.WithContext(context.WithValue(orig.Context(), denyStatusKey{}, status))
	}
	var ru *rule
	if q.Has("rule") {
		name := q.Get("rule")
		if ru = st.byName[name]; ru == nil {
			writeError(w, http.StatusNotFound, "no rule named "+strconv.Quote(name))
			return
		}
	} else if ru = st.match(orig.Method, orig.URL.Path); ru == nil {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return
	}
	if ru.body != nil && !h.readBody(w, orig, ru.body) {
		return
	}
	// The limits of the client's plan, if the rule has one (plans.go).
	a := ru.choose(orig)
	if a == nil {
		ru.refuseUnknownPlan(w)
		return
	}
	if a.concurrency {
		writeProblemJSON(w, http.StatusNotImplemented, "Not Implemented",
			"this rule holds a concurrency limit, and forward-auth cannot: a gateway never tells Sluice when its request ends, so the slot could not be released. "+
				"Send the rule's requests through Sluice's proxy (listen.http with proxy.upstream), which holds the slot while each runs, or use a rate limit for forward-auth.")
		return
	}
	if a.settles {
		writeProblemJSON(w, http.StatusNotImplemented, "Not Implemented",
			"this rule charges a limit by the usage the upstream's response reports, and forward-auth never sees the response. "+
				"Send the rule's requests through Sluice's proxy (listen.http with proxy.upstream), which reads the usage as the response passes.")
		return
	}
	if a.mw != nil {
		orig = h.withDecision(orig, "forward_auth", ru)
		h.tracing.Rule(orig.Context(), ru.cfg.Name)
	}
	if a.mw == nil || a.mw.Check(w, orig) {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
	}
}

// denyStatusKey is the context key of the status that replaces 429 in a
// forward-auth denial (?deny_status=403, for nginx's auth_request, which
// passes only 401 and 403 on).
type denyStatusKey struct{}

// ProblemHeader is the response field that carries a forward-auth
// denial's problem+json body when ?deny_status replaces its 429: nginx's
// auth_request drops the body of the answer but can copy a field
// (auth_request_set) and return it as the body of its own 429.
const ProblemHeader = "Sluice-Problem"

// deny writes the response to a refused request: the middleware's
// problem+json answer, with the status the forward-auth caller asked for.
// When that status replaces a 429, the 429's body is also sent in the
// ProblemHeader field, for nginx to give to the client.
func deny(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
	s, ok := r.Context().Value(denyStatusKey{}).(int)
	if !ok || d.Status != http.StatusTooManyRequests || s == http.StatusTooManyRequests {
		httplimit.WriteProblem(w, r, d)
		return
	}
	c := problemCapture{header: w.Header()}
	httplimit.WriteProblem(&c, r, d) // sets the fields on w's header, keeps the body
	w.Header().Set(ProblemHeader, string(c.body))
	d.Status = s
	httplimit.WriteProblem(w, r, d)
}

// problemCapture is the http.ResponseWriter that deny renders the 429's
// problem body into: it shares the real response's header and keeps the
// body.
type problemCapture struct {
	header http.Header
	body   []byte
}

func (c *problemCapture) Header() http.Header { return c.header }

func (c *problemCapture) Write(b []byte) (int, error) {
	c.body = append(c.body, b...)
	return len(b), nil
}

func (c *problemCapture) WriteHeader(int) {}

// original returns the request a trusted proxy asks about, rebuilt from
// its X-Forwarded-* headers with the path of X-Forwarded-Uri in normal
// form, or r itself when the peer is not trusted. The error is a
// pathError when that path is refused.
func original(r *http.Request, trusted bool) (*http.Request, error) {
	if !trusted {
		return r, nil
	}
	method := r.Header.Get("X-Forwarded-Method")
	uri := r.Header.Get("X-Forwarded-Uri")
	host := r.Header.Get("X-Forwarded-Host")
	if method == "" && uri == "" && host == "" {
		return r, nil
	}
	o := r.WithContext(r.Context()) // a shallow copy
	if method != "" {
		o.Method = method
	}
	if uri != "" {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			return nil, errors.New("X-Forwarded-Uri is not a request URI: " + strconv.Quote(uri))
		}
		// The path as the gateway sent it: u's would be decoded, and
		// re-encoded where the gateway's encoding is not Go's.
		raw, query, hasQuery := strings.Cut(uri, "?")
		p, err := normalPath(raw)
		if err != nil {
			return nil, err
		}
		if p != raw {
			normal := p
			if hasQuery {
				normal += "?" + query
			}
			if u, err = url.ParseRequestURI(normal); err != nil {
				return nil, errors.New("X-Forwarded-Uri is not a request URI: " + strconv.Quote(uri))
			}
			uri = normal
		}
		o.URL = u
		o.RequestURI = uri
	}
	if host != "" {
		o.Host = host
	}
	return o, nil
}

// hasForwarded reports whether a forward-auth request carries any of the
// X-Forwarded-* fields that a trusted proxy's requests are read from.
func hasForwarded(h http.Header) bool {
	for _, k := range []string{"X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-Host", "X-Forwarded-For"} {
		if len(h[k]) > 0 {
			return true
		}
	}
	return false
}

// untrustedForwardAuth counts a forward-auth request whose X-Forwarded-*
// fields are ignored because its peer is not a trusted proxy, and logs
// the first from each peer address under the configuration st: with a
// gateway missing from proxy.trusted_proxies, rules match the
// forward-auth request itself (mostly none, so everything is let
// through) and ip keys are the gateway's address.
func (h *Handler) untrustedForwardAuth(st *state, r *http.Request) {
	h.metrics.ForwardAuthUntrusted()
	peer := r.RemoteAddr
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		peer = ap.Addr().Unmap().String()
	}
	if !st.untrustedPeers.add(peer) {
		return
	}
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "forward-auth: X-Forwarded-* fields ignored from a peer not in proxy.trusted_proxies",
		slog.String("peer", peer),
		slog.String("effect", "rules match the forward-auth request itself, not the one it asks about, and ip keys are the peer's address"),
		slog.String("fix", "if the peer is your gateway, add its address to proxy.trusted_proxies"),
		slog.String("note", "logged once per peer; sluice_forward_auth_untrusted_total counts every such request"))
}

// maxLoggedPeers bounds the peers peerSet remembers, and so the log
// lines of untrusted forward-auth requests under one configuration.
const maxLoggedPeers = 64

// peerSet is the set of peer addresses already logged, at most
// maxLoggedPeers of them. The zero value is empty; it is safe for
// concurrent use.
type peerSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// add reports whether peer is new to the set and was added: false for a
// peer already in it, and for every peer once the set is full.
func (s *peerSet) add(peer string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[peer]; ok || len(s.seen) >= maxLoggedPeers {
		return false
	}
	if s.seen == nil {
		s.seen = make(map[string]struct{})
	}
	s.seen[peer] = struct{}{}
	return true
}

// trustedPeer reports whether the connection comes from a trusted proxy.
func (st *state) trustedPeer(remoteAddr string) bool {
	if len(st.trusted) == 0 {
		return false
	}
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(remoteAddr); err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range st.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
