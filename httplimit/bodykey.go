package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// DefaultMaxBodyBytes is how much of a request body the body key
// functions read when BodyOptions.MaxBytes is zero: 64 KiB.
const DefaultMaxBodyBytes = 64 << 10

// BodyOptions configure the key functions that read the request body
// (FormValue, JSONField). The zero value (and nil) is valid.
type BodyOptions struct {
	// MaxBytes is the most of a body that is read to find a key; a body
	// longer than this gives no key. 0 means DefaultMaxBodyBytes.
	MaxBytes int64
}

func (o *BodyOptions) max() int64 {
	if o == nil || o.MaxBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return o.MaxBytes
}

// FormValue returns a KeyFunc whose key is the first value of the named
// field of a form body: application/x-www-form-urlencoded or
// multipart/form-data (file parts are never keys). It reads at most
// opts.MaxBytes of the body and puts back what it read, so the handler or
// upstream that follows receives the body intact. A request whose body is
// missing, of another type, longer than MaxBytes, malformed, or fails to
// arrive has no key (so the other limits of a rule still apply); none of
// these is an error. The query string is not read: use Query for it.
//
// When a field is repeated, the first value is the key, as
// http.Request.FormValue takes it.
func FormValue(name string, opts *BodyOptions) KeyFunc {
	return bodyKey(opts, name, (*peekedBody).formValue)
}

// JSONField returns a KeyFunc whose key is a top-level field of a JSON
// object body: a string as it is, a number as written, true or false. A
// null, an object, a list, an empty string, or a body that is not a JSON
// object gives no key. The Content-Type must be application/json, a
// +json type, or absent. Like FormValue, it reads at most opts.MaxBytes
// and leaves the body intact for the next handler.
//
// When a field is repeated, the last value is the key, as encoding/json and
// most JSON parsers take it.
func JSONField(name string, opts *BodyOptions) KeyFunc {
	return bodyKey(opts, name, (*peekedBody).jsonField)
}

// bodyKey returns a KeyFunc that reads at most opts.MaxBytes of a request's
// body and takes field name from it with read, given the Content-Type.
func bodyKey(opts *BodyOptions, name string, read func(b *peekedBody, contentType, name string) (string, bool)) KeyFunc {
	max := opts.max()
	return func(r *http.Request) (string, bool) {
		b := bufferBody(r, max)
		if b == nil {
			return "", false
		}
		return read(b, r.Header.Get("Content-Type"), name)
	}
}

// BodySources returns the key sources "form:NAME" and "json:NAME" (built
// by FormValue and JSONField with opts) for KeyOptions.Sources, so that
// ParseKey accepts specs like "form:username" or "json:account+ip".
func BodySources(opts *BodyOptions) map[string]KeySource {
	needName := func(kind string, build func(string, *BodyOptions) KeyFunc) KeySource {
		return func(arg string) (KeyFunc, error) {
			if arg == "" {
				return nil, fmt.Errorf("needs a field name: %s:NAME", kind)
			}
			return build(arg, opts), nil
		}
	}
	return map[string]KeySource{
		"form": needName("form", FormValue),
		"json": needName("json", JSONField),
	}
}

// BufferBody reads up to maxBytes (0 means DefaultMaxBodyBytes) of r's
// body ahead of the key functions and puts it back, so that it can be
// read again from the start. Body key functions called later on r parse
// what it read without reading again. It returns the error reading the
// body met, other than its end: a client that stopped sending, or a read
// deadline that passed, after which the body cannot be forwarded intact.
// A body longer than maxBytes is not an error: it is read no further than
// maxBytes+1 bytes, and gives no body keys.
func BufferBody(r *http.Request, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	if b := bufferBody(r, maxBytes); b != nil {
		return b.err
	}
	return nil
}

// peekedBody is a request body whose first bytes were read ahead to find
// keys: Read returns them again, then the rest of the original body.
type peekedBody struct {
	head []byte // the bytes read ahead: the whole body when complete
	off  int    // how much of head Read has returned
	rest io.ReadCloser
	// complete reports that head is the whole body; over, that the body is
	// longer than the limit; err, that reading failed (err is returned
	// once head is consumed).
	complete, over bool
	err            error

	form     url.Values
	formDone bool
	json     map[string]json.RawMessage
	jsonDone bool
}

// bufferBody returns r's body read ahead by up to max bytes, reading it
// and replacing r.Body on the first call; nil when r has no body or the
// body was already partly read by someone else.
func bufferBody(r *http.Request, max int64) *peekedBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if b, ok := r.Body.(*peekedBody); ok {
		if b.off != 0 {
			return nil // the handler has started reading it
		}
		return b
	}
	b := &peekedBody{rest: r.Body}
	if r.ContentLength > max {
		// Known to be too long: read nothing.
		b.over = true
		r.Body = b
		return b
	}
	size := max + 1
	if r.ContentLength >= 0 {
		size = r.ContentLength + 1 // one more, to see the end
	}
	buf := make([]byte, 0, min(size, 4096))
	for int64(len(buf)) < max+1 {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := min(int64(cap(buf)), max+1)
		n, err := r.Body.Read(buf[len(buf):room])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			b.complete = true
			break
		}
		if err != nil {
			b.err = err
			break
		}
	}
	if int64(len(buf)) > max {
		b.over, b.complete = true, false
	}
	b.head = buf
	r.Body = b
	return b
}

func (b *peekedBody) Read(p []byte) (int, error) {
	if b.off < len(b.head) {
		n := copy(p, b.head[b.off:])
		b.off += n
		return n, nil
	}
	switch {
	case b.complete:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	}
	return b.rest.Read(p)
}

func (b *peekedBody) Close() error { return b.rest.Close() }

// whole reports whether the body was read to its end within the limit.
func (b *peekedBody) whole() bool { return b.complete && !b.over && b.err == nil }

func (b *peekedBody) formValue(contentType, name string) (string, bool) {
	if !b.formDone {
		b.formDone = true
		if b.whole() {
			b.form = parseForm(contentType, b.head)
		}
	}
	if vs := b.form[name]; len(vs) > 0 && vs[0] != "" {
		return vs[0], true
	}
	return "", false
}

// parseForm returns the fields of a form body, or nil when the body is not
// a form or cannot be parsed.
func parseForm(contentType string, body []byte) url.Values {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil
	}
	switch mt {
	case "application/x-www-form-urlencoded":
		vs, err := url.ParseQuery(string(body))
		if err != nil {
			return nil
		}
		return vs
	case "multipart/form-data":
		boundary := params["boundary"]
		if boundary == "" {
			return nil
		}
		mr := multipart.NewReader(bytes.NewReader(body), boundary)
		vs := url.Values{}
		for {
			p, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return vs
			}
			if err != nil {
				return nil
			}
			if p.FileName() != "" || p.FormName() == "" {
				continue
			}
			v, err := io.ReadAll(p) // bounded: the body is in memory
			if err != nil {
				return nil
			}
			vs.Add(p.FormName(), string(v))
		}
	}
	return nil
}

func (b *peekedBody) jsonField(contentType, name string) (string, bool) {
	if !b.jsonDone {
		b.jsonDone = true
		if b.whole() && isJSON(contentType) {
			var m map[string]json.RawMessage
			if json.Unmarshal(b.head, &m) == nil {
				b.json = m
			}
		}
	}
	raw, ok := b.json[name]
	if !ok {
		return "", false
	}
	return jsonScalar(raw)
}

// isJSON reports whether a Content-Type allows a JSON body: absent,
// application/json, or a +json type.
func isJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// jsonScalar returns the key a JSON value gives: a non-empty string, a
// number as written, or a boolean.
func jsonScalar(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return "", false
		}
		return s, true
	case c == 't' || c == 'f':
		return string(raw), true
	case c == '-' || c >= '0' && c <= '9':
		return string(raw), true // json.Unmarshal checked its syntax
	}
	return "", false
}
