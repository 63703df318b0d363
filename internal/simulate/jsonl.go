package simulate

import (
	"bufio"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// JSONLWriter writes decisions as JSON Lines: one object per decision, with
// exactly these fields, in this order:
//
//	t               the request's time, ms since the Unix epoch
//	key             the request's key
//	cost            the request's cost
//	allowed         whether it was admitted
//	remaining       cost units that could be admitted right after it
//	retry_after_ms  for a denied request, whole ms until it would pass
//	                (−1: never, its cost exceeds the capacity); 0 if allowed
//	delay_ms        leaky_bucket's wait before an admitted request proceeds,
//	                rounded up to whole ms; 0 for the other algorithms
//	reset_after_ms  whole ms until the key's state is back to initial
//
// and, under a policy with a penalty, after them: "blocked":true on a
// refusal by a block, and "offence":true too on the refusal that started
// it.
//
// Output is buffered; call Flush at the end. A JSONLWriter holds no state
// per request or per key.
type JSONLWriter struct {
	w   *bufio.Writer
	buf []byte
}

// NewJSONLWriter returns a JSONLWriter that writes to w.
func NewJSONLWriter(w io.Writer) *JSONLWriter {
	return &JSONLWriter{w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 256)}
}

// Write writes the line of one decision.
func (j *JSONLWriter) Write(req Request, d sluice.Decision) error {
	j.buf = AppendJSON(j.buf[:0], req, d)
	j.buf = append(j.buf, '\n')
	_, err := j.w.Write(j.buf)
	return err
}

// Flush writes any buffered output.
func (j *JSONLWriter) Flush() error { return j.w.Flush() }

// AppendJSON appends the JSON object of one decision, as JSONLWriter
// writes it, without a newline.
func AppendJSON(b []byte, req Request, d sluice.Decision) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, req.T, 10)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, req.Key)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, req.Cost, 10)
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, retryMillis(d.RetryAfter), 10)
	b = append(b, `,"delay_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(d.Delay), 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(d.ResetAfter), 10)
	if d.Blocked {
		b = append(b, `,"blocked":true`...)
	}
	if d.Offence {
		b = append(b, `,"offence":true`...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
