package usage

import (
	"io"
	"mime"
	"net/http"
	"strings"
)

// The most a Meter inspects of a body.
const (
	// MaxJSONBytes is how much of a JSON body a Meter reads for its usage
	// object; the rest passes through unread. OpenAI-compatible APIs
	// write the usage object last, so a body longer than this reports
	// none (TooLarge).
	MaxJSONBytes = 16 << 20
	// MaxEventBytes is how much of one server-sent event's data a Meter
	// reads; an event with more is not read for usage (its bytes still
	// pass through).
	MaxEventBytes = 1 << 20
)

// Reason says why a response's usage is, or is not, known.
type Reason string

// The reasons.
const (
	// Reported: the response reported the usage.
	Reported Reason = "reported"
	// NoUsage: the response ended without reporting it (an upstream error,
	// a stream asked for without stream_options.include_usage, a missing
	// header field).
	NoUsage Reason = "no_usage"
	// Unreadable: the response reported something that is not a usage
	// (not a non-negative integer), or its body cannot be read for one
	// (not JSON, or compressed).
	Unreadable Reason = "unreadable"
	// CutOff: the body ended before its usage arrived: the client went
	// away, or the upstream broke the response off.
	CutOff Reason = "cut_off"
	// TooLarge: the usage lay beyond what a Meter inspects (MaxJSONBytes,
	// MaxEventBytes).
	TooLarge Reason = "too_large"
)

// Reasons lists the reasons a usage is not known, in this order.
var Reasons = [...]Reason{NoUsage, Unreadable, CutOff, TooLarge}

type bodyKind uint8

const (
	jsonBody bodyKind = iota
	eventStream
	unreadable // compressed
	upgraded   // a 101 response: no body to read
)

// Meter watches one response for the usage it reports. Watch makes one;
// its methods are for the goroutine that reads the response's body (as
// httputil.ReverseProxy does, which reads and closes it in the handler's
// goroutine).
type Meter struct {
	resp *http.Response
	body io.ReadCloser
	kind bodyKind
	js   jsonScanner
	sse  sseScanner
	// read counts the body's bytes read so far.
	read int64
	// eof: the body was read to its end; cut: it failed, or was closed
	// before its end.
	eof, cut bool
}

// Watch returns a Meter of resp, and makes resp.Body the Meter: reading
// it reads the original body, which the Meter observes on the way and
// passes on unchanged, each read as it comes. A response that switches
// protocols (101) is not watched: its body stays, and every body spec
// reports NoUsage.
//
// A body is read as a server-sent event stream when its Content-Type is
// text/event-stream, as JSON otherwise; a body with a Content-Encoding
// (other than identity) is not read (Unreadable).
func Watch(resp *http.Response) *Meter {
	m := &Meter{resp: resp}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		m.kind, m.eof = upgraded, true
		return m
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		m.kind = unreadable
	} else if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == "text/event-stream" {
		m.kind = eventStream
	}
	m.body = resp.Body
	if m.body == nil {
		m.body = http.NoBody
	}
	resp.Body = m
	return m
}

// Read reads the original body.
func (m *Meter) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	if n > 0 {
		m.observe(p[:n])
	}
	switch {
	case err == io.EOF:
		m.end()
	case err != nil:
		m.cut = true
	}
	return n, err
}

// Close closes the original body; a body not read to its end is cut off.
func (m *Meter) Close() error {
	if !m.eof {
		m.cut = true
	}
	return m.body.Close()
}

// observe reads p, the next bytes of the body.
func (m *Meter) observe(p []byte) {
	n := int64(len(p))
	switch m.kind {
	case jsonBody:
		if left := MaxJSONBytes - m.read; n > left {
			p = p[:max(left, 0)]
		}
		m.js.write(p)
	case eventStream:
		m.sse.write(p)
	}
	m.read += n
}

// end records the end of the body.
func (m *Meter) end() {
	if m.eof || m.cut {
		return
	}
	m.eof = true
	if m.kind == jsonBody && m.read <= MaxJSONBytes {
		m.js.finish()
	}
}

// Usage returns the usage the response reported for s, with Reported;
// or 0 and why none is known. Call it once the body is closed: a header
// spec reads the header field at once, but the trailer field and the
// body's usage only exist at the body's end.
func (m *Meter) Usage(s Spec) (int64, Reason) {
	if s.header != "" {
		if vals := m.resp.Header.Values(s.header); len(vals) > 0 {
			return counted(parseCount(vals))
		}
		switch {
		case m.cut:
			return 0, CutOff
		case !m.eof:
			return 0, NoUsage
		}
		if vals := m.resp.Trailer.Values(s.header); len(vals) > 0 {
			return counted(parseCount(vals))
		}
		return 0, NoUsage
	}
	switch m.kind {
	case unreadable:
		return 0, Unreadable
	case upgraded:
		return 0, NoUsage
	case eventStream:
		return m.streamUsage(s.field)
	}
	return m.jsonUsage(s.field)
}

func counted(n int64, ok bool) (int64, Reason) {
	if !ok {
		return 0, Unreadable
	}
	return n, Reported
}

// field returns the count c of a usage object that was read.
func field(c count) (int64, Reason) {
	switch c.state {
	case reported:
		return c.n, Reported
	case bad:
		return 0, Unreadable
	}
	return 0, NoUsage
}

// jsonUsage returns the count f of a JSON body. A usage object read to
// its end counts even if the rest of the body was cut off; a body that is
// not JSON counts for nothing.
func (m *Meter) jsonUsage(f Field) (int64, Reason) {
	js := &m.js
	switch {
	case js.failed():
		return 0, Unreadable
	case js.usageSeen && js.usageClosed:
		return field(js.usage[f])
	case m.read > MaxJSONBytes:
		return 0, TooLarge
	case m.cut || !m.eof:
		return 0, CutOff
	case !js.complete():
		return 0, Unreadable // the body ended inside its document
	}
	return 0, NoUsage
}

// streamUsage returns the count f of an event stream: the usage of the
// last event that had one, even if the stream was cut off after it.
func (m *Meter) streamUsage(f Field) (int64, Reason) {
	s := &m.sse
	switch {
	case s.found:
		return field(s.usage[f])
	case s.sawTooLarge || s.tooLarge:
		return 0, TooLarge
	case m.cut || !m.eof:
		return 0, CutOff
	}
	return 0, NoUsage
}
