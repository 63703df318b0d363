package httplimit

import (
	"net/http"
	"strconv"
	"time"
)

// Problem types (RFC 9457) of the responses the middleware writes, as
// registered by draft-ietf-httpapi-ratelimit-headers-10.
const (
	// ProblemQuotaExceeded is the type of a 429: a quota was used up.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemReducedCapacity is the type of a 503: the limiter's store is
	// unavailable and its failure policy refuses requests.
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Denial describes a request the middleware refuses. The slices are valid
// only during the call that receives them.
type Denial struct {
	// Status is the response status: 429 when a limit is exceeded, 503
	// when the store failed and its failure policy (or Options.FailOpen
	// false) refuses the request, 500 when the store can never decide the
	// request's limits together (their keys live apart: an error wrapping
	// sluice.ErrNotAtomic, such as keys in different Redis Cluster slots),
	// whatever Options.FailOpen says.
	Status int
	// RetryAfter is the exact time after which the request may pass (0
	// when it is unknown, Never when it can never pass: its cost exceeds a
	// policy's capacity). The Retry-After field already holds it, rounded
	// up to whole seconds.
	RetryAfter time.Duration
	// Violated names the policies that refused the request, in order.
	Violated []string
	// Results holds every limit's part of the decision.
	Results []LimitResult
}

// DenyHandler writes the response to a refused request. When it is
// called, the Retry-After (unless RetryAfter is Never), Cache-Control:
// no-store and quota fields are already set on w.Header(); it may change
// them and must write the status and body.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d Denial)

// WriteProblem is the default DenyHandler: it writes d.Status with an RFC
// 9457 application/problem+json body such as
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota Exceeded","status":429,
//	 "detail":"Too many requests; retry in 2 seconds.",
//	 "retry-after":2,"violated-policies":["per-ip"]}
//
// retry-after is in whole seconds, as the Retry-After field. A 503 has the
// temporary-reduced-capacity type and no violated-policies; a 500 (limits
// the store can never decide together) has about:blank and neither; no
// error text is ever included.
func WriteProblem(w http.ResponseWriter, _ *http.Request, d Denial) {
	var buf [384]byte
	b := buf[:0]
	secs := int64(-1)
	if d.RetryAfter >= 0 {
		secs = RetryAfterSeconds(d.RetryAfter)
	}
	if d.Status == http.StatusInternalServerError {
		writeProblem500(w, "The rate limiter cannot decide this request's limits all or nothing with its store; see the server's log.")
		return
	} else if d.Status == http.StatusServiceUnavailable {
		b = append(b, `{"type":"`+ProblemReducedCapacity+`","title":"Temporary Reduced Capacity","status":503,"detail":"The rate limiter is unavailable; `...)
		b = appendRetryIn(b, secs)
		b = append(b, '}')
	} else {
		b = append(b, `{"type":"`+ProblemQuotaExceeded+`","title":"Quota Exceeded","status":`...)
		b = strconv.AppendInt(b, int64(d.Status), 10)
		if secs < 0 {
			b = append(b, `,"detail":"The request costs more than the quota allows at once; it can never be admitted."`...)
		} else {
			b = append(b, `,"detail":"Too many requests; `...)
			b = appendRetryIn(b, secs)
		}
		if len(d.Violated) > 0 {
			b = append(b, `,"violated-policies":[`...)
			for i, name := range d.Violated {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, name)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(d.Status)
	w.Write(b)
}

// writeProblem500 writes a 500 Internal Server Error with a problem+json
// body of type about:blank and the given detail, a sentence with no
// character that JSON escapes.
func writeProblem500(w http.ResponseWriter, detail string) {
	b := make([]byte, 0, 128+len(detail))
	b = append(b, `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"`...)
	b = append(b, detail...)
	b = append(b, `"}`...)
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(http.StatusInternalServerError)
	w.Write(b)
}

// appendRetryIn appends the end of a problem's detail that says to retry
// in secs seconds, and its retry-after member.
func appendRetryIn(b []byte, secs int64) []byte {
	b = append(b, `retry in `...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, ` second`...)
	if secs != 1 {
		b = append(b, 's')
	}
	b = append(b, `.","retry-after":`...)
	return strconv.AppendInt(b, secs, 10)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c == 0x7f || c >= 0x80:
			// Names are ASCII; anything else is escaped byte by byte as a
			// code point below 256, which keeps the output valid JSON.
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
