package httplimit

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
)

// KeyFunc returns the key that a request is counted under for one limit
// (a client address, an API key, a route), and whether the request has
// one. A request without a key (ok false) is not counted by that limit: a
// limit keyed by an API key header does not apply to requests without the
// header. Every key function in this package is safe for concurrent use
// and does not read the request body.
type KeyFunc func(r *http.Request) (key string, ok bool)

// Header returns a KeyFunc whose key is the first value of the named
// request header; requests without the header (or with an empty value)
// have no key.
func Header(name string) KeyFunc {
	canon := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		vs := r.Header[canon]
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
}

// Query returns a KeyFunc whose key is the first value of the named query
// parameter; requests without it (or with an empty value) have no key. It
// scans the raw query without building a map.
func Query(name string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v := queryValue(r.URL.RawQuery, name)
		return v, v != ""
	}
}

// queryValue returns the first value of name in the raw query q, unescaped
// as url.ParseQuery would; "" when absent or not decodable.
func queryValue(q, name string) string {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			uk, err := url.QueryUnescape(k)
			if err != nil || uk != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				return ""
			}
			return uv
		}
		return v
	}
	return ""
}

// Path is a KeyFunc whose key is the request's URL path. Paths are chosen
// by the client: a limit keyed by Path alone tracks as many keys as
// clients invent; prefer Route behind a ServeMux.
func Path(r *http.Request) (string, bool) {
	return r.URL.Path, true
}

// Method is a KeyFunc whose key is the request's method.
func Method(r *http.Request) (string, bool) {
	return r.Method, r.Method != ""
}

// Host is a KeyFunc whose key is the request's Host (as sent, with any
// port), lower-cased.
func Host(r *http.Request) (string, bool) {
	return strings.ToLower(r.Host), r.Host != ""
}

// Route is a KeyFunc whose key names the endpoint: the pattern that
// matched in a Go 1.22+ http.ServeMux (r.Pattern), prefixed with the method
// when the pattern has none ("GET /items/{id}"); when no pattern is set, the
// method and the URL path ("GET /items/7").
//
// r.Pattern is set by the mux when it dispatches, so it is seen only by
// middleware registered on a route (mux.Handle("GET /items/{id}",
// m.Handler(h))), not by middleware wrapped around the whole mux.
func Route(r *http.Request) (string, bool) {
	if p := r.Pattern; p != "" {
		if i := strings.IndexByte(p, ' '); i > 0 {
			return p, true // the pattern names its method
		}
		return r.Method + " " + p, true
	}
	return r.Method + " " + r.URL.Path, true
}

// Constant returns a KeyFunc that gives every request the same key, for
// limits over all traffic (a global 5000/s).
func Constant(key string) KeyFunc {
	return func(*http.Request) (string, bool) { return key, true }
}

// Context returns a KeyFunc whose key is the request context's value for
// ctxKey (a user or tenant set by an authentication middleware), which
// must be a string or a fmt.Stringer; a missing, empty or other value
// gives no key.
func Context(ctxKey any) KeyFunc {
	return func(r *http.Request) (string, bool) {
		return contextValue(r.Context(), ctxKey)
	}
}

func contextValue(ctx context.Context, key any) (string, bool) {
	switch v := ctx.Value(key).(type) {
	case string:
		return v, v != ""
	case fmt.Stringer:
		s := v.String()
		return s, s != ""
	}
	return "", false
}

// joinSep separates the parts of a joined key; a part's own separators
// and escapes are escaped with a backslash, so different part lists never
// give the same key.
const joinSep = '|'

// Join returns a KeyFunc whose key combines the keys of fns in order, such
// as tenant and route: "acme|GET /reports". A request has a joined key only
// when every part has one.
func Join(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...)
	return func(r *http.Request) (string, bool) {
		var b strings.Builder
		for i, fn := range fns {
			k, ok := fn(r)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte(joinSep)
			}
			writeEscaped(&b, k)
		}
		return b.String(), true
	}
}

func writeEscaped(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "|\\") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		if s[i] == joinSep || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

// KeySource builds a KeyFunc for a custom key source named in ParseKey's
// spec ("form:user" has source "form" and argument "user"); arg is empty
// for a source without an argument.
type KeySource func(arg string) (KeyFunc, error)

// KeyOptions configure ParseKey. The zero value (and nil) is valid.
type KeyOptions struct {
	// ClientIP extracts the address for the "ip" source; nil means the
	// connection's remote address with the defaults of ClientIP.
	ClientIP *ClientIP
	// Sources adds key sources beyond the built-in ones, by name. A name
	// here cannot replace a built-in source. ParseKey's message for an
	// unknown source lists them with the built-in ones, as "NAME:NAME"
	// when the source refuses an empty argument (such as "form:NAME") and
	// as "NAME" otherwise.
	Sources map[string]KeySource
}

// ParseKey parses a key spec, as used in configuration files, into a
// KeyFunc. A spec is one source or several joined with "+" (as Join):
//
//	ip            the client IP (opts.ClientIP: trusted proxies, IPv6 prefix)
//	header:NAME   the first value of a request header
//	query:NAME    the first value of a query parameter
//	path          the URL path
//	method        the method
//	host          the Host, lower-cased
//	route         the ServeMux pattern with its method (see Route)
//	const:VALUE   a fixed key, for limits over all traffic
//
// for example "ip", "header:X-API-Key" or "ip+path". Sources added in
// opts.Sources are written NAME or NAME:ARG. Spaces are not allowed.
// The error names the part of the spec that is wrong.
func ParseKey(spec string, opts *KeyOptions) (KeyFunc, error) {
	if opts == nil {
		opts = &KeyOptions{}
	}
	if spec == "" {
		return nil, fmt.Errorf("key spec is empty (want ip, header:NAME, query:NAME, path, method, host, route, const:VALUE, or several joined with +)")
	}
	parts := strings.Split(spec, "+")
	fns := make([]KeyFunc, 0, len(parts))
	for _, part := range parts {
		fn, err := parseKeyPart(part, opts)
		if err != nil {
			return nil, fmt.Errorf("key spec %q: %w", spec, err)
		}
		fns = append(fns, fn)
	}
	if len(fns) == 1 {
		return fns[0], nil
	}
	return Join(fns...), nil
}

func parseKeyPart(part string, opts *KeyOptions) (KeyFunc, error) {
	if part == "" {
		return nil, fmt.Errorf("empty source (a leading, trailing or doubled +)")
	}
	if strings.ContainsAny(part, " \t") {
		return nil, fmt.Errorf("source %q contains a space", part)
	}
	name, arg, hasArg := strings.Cut(part, ":")
	noArg := func(fn KeyFunc) (KeyFunc, error) {
		if hasArg {
			return nil, fmt.Errorf("source %q takes no argument (got %q)", name, arg)
		}
		return fn, nil
	}
	needArg := func(what string) error {
		if !hasArg || arg == "" {
			return fmt.Errorf("source %q needs %s: %s:%s", name, what, name, strings.ToUpper(what))
		}
		return nil
	}
	switch name {
	case "ip":
		c := opts.ClientIP
		if c == nil {
			c = &ClientIP{}
		}
		if err := c.check(); err != nil {
			return nil, err
		}
		return noArg(c.Key)
	case "path":
		return noArg(Path)
	case "method":
		return noArg(Method)
	case "host":
		return noArg(Host)
	case "route":
		return noArg(Route)
	case "header":
		if err := needArg("name"); err != nil {
			return nil, err
		}
		if !validHeaderName(arg) {
			return nil, fmt.Errorf("header name %q is not a valid HTTP field name", arg)
		}
		return Header(arg), nil
	case "query":
		if err := needArg("name"); err != nil {
			return nil, err
		}
		return Query(arg), nil
	case "const":
		if err := needArg("value"); err != nil {
			return nil, err
		}
		return Constant(arg), nil
	}
	if src, ok := opts.Sources[name]; ok && src != nil {
		fn, err := src(arg)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", part, err)
		}
		if fn == nil {
			return nil, fmt.Errorf("source %q: no key function", part)
		}
		return fn, nil
	}
	forms := []string{"ip", "header:NAME", "query:NAME", "path", "method", "host", "route", "const:VALUE"}
	forms = append(forms, extraSources(opts)...)
	last := len(forms) - 1
	return nil, fmt.Errorf("unknown source %q (want %s or %s)", name, strings.Join(forms[:last], ", "), forms[last])
}

// extraSources returns the forms of opts.Sources, in order of name: NAME
// for a source that takes no argument, NAME:NAME for one that needs one
// (it refuses an empty argument).
func extraSources(opts *KeyOptions) []string {
	var forms []string
	for _, name := range slices.Sorted(maps.Keys(opts.Sources)) {
		if src := opts.Sources[name]; src != nil {
			if _, err := src(""); err != nil {
				name += ":NAME"
			}
		}
		forms = append(forms, name)
	}
	return forms
}

// validHeaderName reports whether s is an HTTP field name (an RFC 9110
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
