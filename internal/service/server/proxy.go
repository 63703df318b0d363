package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// newTransport returns the transport the reverse proxy sends requests
// upstream with: the standard library's defaults, with more idle
// connections kept per host, since every request goes to one upstream.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// newProxy returns the reverse proxy to upstream for one configuration.
//
// The request keeps its Host; X-Forwarded-For gets the client's address
// appended (to the incoming list when the peer is a trusted proxy, which
// alone may have written one; otherwise the list starts afresh), and
// X-Forwarded-Host and X-Forwarded-Proto are set (kept as sent by a trusted
// proxy). Bodies stream both ways, and upgraded connections (WebSockets)
// pass through. A request admitted under limits that settle by usage has
// its response watched on the way (watchResponse), and asks for an
// uncompressed one (Accept-Encoding: identity) when its usage is in the
// body.
func (h *Handler) newProxy(st *state, upstream *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = pr.In.Host
			trusted := st.trustedPeer(pr.In.RemoteAddr)
			if trusted {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			}
			pr.SetXForwarded()
			if pr.Out.ContentLength > 0 && pr.Out.Body != nil {
				pr.Out.Body = &knownLength{ReadCloser: pr.Out.Body, left: pr.Out.ContentLength}
			}
			if s := settlingOf(pr.In.Context()); s != nil && s.readsBody {
				// The usage is read from the body as it passes: ask for
				// it uncompressed.
				pr.Out.Header.Set("Accept-Encoding", "identity")
			}
			if trusted {
				for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
					if v := pr.In.Header[k]; len(v) > 0 {
						pr.Out.Header[k] = v
					}
				}
			}
		},
		Transport:      h.transport,
		ModifyResponse: watchResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				// The client went away; nobody is left to answer.
				return
			}
			h.logger.LogAttrs(r.Context(), slog.LevelWarn, "proxy: upstream failed",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			writeError(w, http.StatusBadGateway, "the upstream did not answer")
		},
		ErrorLog: slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
	}
}

// knownLength is the body of a proxied request of known length: it ends
// once that many bytes are read, without reading the body again. The
// transport reads a body once more after its length, to check that it
// has no more; but the server closes the body of a request as it starts
// writing the response (HTTP/1), and an upstream answers as soon as it
// has the body, so that read can fail ("invalid Read on closed Body"),
// which makes the transport break the upstream connection and with it
// the response being passed on: a stream cut after its first events.
type knownLength struct {
	io.ReadCloser
	left int64
}

func (b *knownLength) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// serveProxy limits a request by the first rule that selects it, if any,
// and forwards it upstream when it is admitted.
//
// The rules match the normal form of the request's path (normalPath), and
// that same form goes upstream, so that the rules and the upstream see
// one resource; a path that servers read in different ways is refused
// with 400.
func (h *Handler) serveProxy(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	if st.proxy == nil {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	r, err := withNormalPath(r)
	if err != nil {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", "Sluice does not forward this request: "+err.Error()+".")
		return
	}
	if reservedPath(r.URL.Path) {
		// Only a request the ServeMux does not clean (CONNECT) gets here.
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "No such Sluice endpoint: "+r.URL.Path+". listen.http keeps /v1/ and /metrics for Sluice and never forwards them to the upstream.")
		return
	}
	ru := st.match(r.Method, r.URL.Path)
	if ru == nil {
		st.proxy.ServeHTTP(w, r)
		return
	}
	if ru.body != nil && !h.readBody(w, r, ru.body) {
		return
	}
	// The rule's limits, and its client's plan's (plans.go); limits with
	// charge_on are charged after the upstream answers.
	a := ru.choose(r)
	if a == nil {
		ru.refuseUnknownPlan(w)
		return
	}
	if a.mw != nil {
		if a.settles {
			r = withSettling(r, ru.usageBody)
		}
		r = h.withDecision(r, "proxy", ru)
		h.tracing.Rule(r.Context(), ru.cfg.Name)
		a.proxied.ServeHTTP(w, r)
		return
	}
	st.proxy.ServeHTTP(w, r)
}

// withNormalPath returns r with its path in normal form (normalPath): r
// itself when it is, else a shallow copy with a URL of its own.
func withNormalPath(r *http.Request) (*http.Request, error) {
	esc := r.URL.EscapedPath()
	p, err := normalPath(esc)
	if err != nil || p == esc {
		return r, err
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		return r, errPathEscape // normalPath's result always decodes
	}
	u := *r.URL
	u.Path, u.RawPath = dec, p
	r = r.WithContext(r.Context())
	r.URL = &u
	return r, nil
}
