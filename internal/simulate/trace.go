package simulate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// Limits on a trace's values.
const (
	// MaxTime is the latest t_ms a trace may hold: 9999-12-31T23:59:59.999Z.
	// With it, every instant the algorithms compute (up to 36,000 years
	// past a request) fits their int64 microseconds.
	MaxTime = 253402300799999
	// MaxCost is the largest cost of one request, the largest capacity a
	// policy can have.
	MaxCost = sluice.MaxLimit
	// MaxLineBytes is the longest line a trace may hold.
	MaxLineBytes = 1 << 20
)

// Request is one request of a trace: at T milliseconds since the Unix
// epoch, Key asks for Cost units, and runs for Duration milliseconds.
// Only a concurrency policy uses Duration: an admitted request holds its
// units from T until T + Duration (0: released at once, right after its
// decision). The rate algorithms ignore it.
type Request struct {
	T        int64
	Key      string
	Cost     int64
	Duration int64 // ms, from 0; T + Duration is at most MaxTime
}

// AppendCSV appends r as a trace line (without the newline):
// "t,key,cost", or "t,key,cost,duration" when Duration is not 0. A
// Request read by a TraceReader reads back unchanged.
func (r Request) AppendCSV(b []byte) []byte {
	b = strconv.AppendInt(b, r.T, 10)
	b = append(b, ',')
	b = append(b, r.Key...)
	b = append(b, ',')
	b = strconv.AppendInt(b, r.Cost, 10)
	if r.Duration != 0 {
		b = append(b, ',')
		b = strconv.AppendInt(b, r.Duration, 10)
	}
	return b
}

// ParseError is a trace that cannot be read: Line is the 1-based line
// number, Msg says what is wrong with it.
type ParseError struct {
	Line int
	Msg  string
}

// Error returns "line N: what is wrong".
func (e *ParseError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// TraceReader reads a trace, one request at a time, holding one line in
// memory. The format, which `sluice simulate` documents too:
//
//   - One request per line: t_ms,key[,cost[,duration_ms]]. t_ms is an
//     integer count of milliseconds since the Unix epoch, from 0 to
//     MaxTime. key is any non-empty text without commas, double quotes or
//     control characters (quoted CSV fields are not supported, so a key
//     cannot hold a comma). cost is an integer from 1 to MaxCost; without
//     the field it is 1. duration_ms, how long the request runs, is an
//     integer from 0 such that t_ms + duration_ms is at most MaxTime;
//     without the field it is 0. A duration needs the cost field before it.
//   - Spaces and tabs around a field are ignored; lines may end in \r\n.
//   - Blank lines, and lines whose first non-blank character is '#', are
//     skipped.
//   - The first line that is neither blank nor a comment is a header, and
//     skipped, when its first field is not an integer (an optional sign and
//     digits). A UTF-8 byte order mark at the very start is ignored.
//   - t_ms never decreases from one request to the next (equal is fine).
//
// Every violation is a *ParseError naming the line.
type TraceReader struct {
	sc       *bufio.Scanner
	line     int // number of the line last read
	started  bool
	prevT    int64
	prevLine int
	err      error
	// header is the line skipped as a header, and headerLine its number.
	header     string
	headerLine int
}

// NewTraceReader returns a TraceReader that reads from r.
func NewTraceReader(r io.Reader) *TraceReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	return &TraceReader{sc: sc}
}

// Line returns the number of the line that the last call to Next read.
func (tr *TraceReader) Line() int { return tr.line }

// Header returns the line skipped as a header (without surrounding
// space) and its number, or "" and 0 when none was.
func (tr *TraceReader) Header() (string, int) { return tr.header, tr.headerLine }

// Next returns the next request, io.EOF after the last one, or the error
// that stopped the reader (a *ParseError, or the error of the underlying
// reader). Once it has returned an error, it returns that error again.
func (tr *TraceReader) Next() (Request, error) {
	if tr.err != nil {
		return Request{}, tr.err
	}
	r, err := tr.next()
	if err != nil {
		tr.err = err
	}
	return r, err
}

func (tr *TraceReader) next() (Request, error) {
	for tr.sc.Scan() {
		tr.line++
		b := tr.sc.Bytes()
		if tr.line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF"))
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		first := !tr.started
		tr.started = true
		if first && !isInteger(bytes.TrimSpace(field(b, 0))) {
			tr.header, tr.headerLine = string(b), tr.line
			continue
		}
		r, msg := parseLine(b)
		if msg != "" {
			return Request{}, &ParseError{Line: tr.line, Msg: msg}
		}
		if tr.prevLine > 0 && r.T < tr.prevT {
			return Request{}, &ParseError{Line: tr.line, Msg: fmt.Sprintf(
				"t_ms %d is before %d on line %d (timestamps must be non-decreasing)", r.T, tr.prevT, tr.prevLine)}
		}
		tr.prevT, tr.prevLine = r.T, tr.line
		return r, nil
	}
	if err := tr.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Request{}, &ParseError{Line: tr.line + 1, Msg: fmt.Sprintf("line is longer than %d bytes", MaxLineBytes)}
		}
		return Request{}, fmt.Errorf("read trace: %w", err)
	}
	return Request{}, io.EOF
}

// CheckTrace reads a whole trace and returns its first error, and the
// number of requests it holds.
func CheckTrace(r io.Reader) (int64, error) {
	tr := NewTraceReader(r)
	var n int64
	for {
		_, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// field returns the i-th comma-separated field of b, or nil.
func field(b []byte, i int) []byte {
	for ; i > 0; i-- {
		j := bytes.IndexByte(b, ',')
		if j < 0 {
			return nil
		}
		b = b[j+1:]
	}
	if j := bytes.IndexByte(b, ','); j >= 0 {
		return b[:j]
	}
	return b
}

// isInteger reports whether b is an optional sign followed by one or more
// ASCII digits.
func isInteger(b []byte) bool {
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseLine parses a trimmed, non-blank data line. It returns a non-empty
// message saying what is wrong when the line is malformed.
func parseLine(b []byte) (Request, string) {
	n := bytes.Count(b, []byte(",")) + 1
	if n > 4 {
		return Request{}, fmt.Sprintf("extra fields: %d fields, want t_ms,key[,cost[,duration_ms]]", n)
	}
	if n < 2 {
		return Request{}, "missing key: want t_ms,key[,cost[,duration_ms]]"
	}
	tf := bytes.TrimSpace(field(b, 0))
	t, msg := parseInt("t_ms", tf, 0, MaxTime)
	if msg != "" {
		return Request{}, msg
	}
	kf := bytes.TrimSpace(field(b, 1))
	if msg := checkKey(kf); msg != "" {
		return Request{}, msg
	}
	cost := int64(1)
	if n >= 3 {
		cf := bytes.TrimSpace(field(b, 2))
		if len(cf) == 0 {
			if n == 4 {
				return Request{}, "cost is empty (a line with a duration_ms needs its cost)"
			}
			return Request{}, "cost is empty (leave the field out for the default, 1)"
		}
		cost, msg = parseInt("cost", cf, 1, MaxCost)
		if msg != "" {
			return Request{}, msg
		}
	}
	var d int64
	if n == 4 {
		df := bytes.TrimSpace(field(b, 3))
		if len(df) == 0 {
			return Request{}, "duration_ms is empty (leave the field out for the default, 0)"
		}
		d, msg = parseInt("duration_ms", df, 0, MaxTime)
		if msg != "" {
			return Request{}, msg
		}
		if d > MaxTime-t {
			return Request{}, fmt.Sprintf("duration_ms %d ends the request at %d, after the maximum time, %d", d, t+d, int64(MaxTime))
		}
	}
	return Request{T: t, Key: string(kf), Cost: cost, Duration: d}, ""
}

// parseInt parses a decimal integer field that must lie in [lo, hi].
func parseInt(name string, b []byte, lo, hi int64) (int64, string) {
	if len(b) == 0 {
		return 0, name + " is empty"
	}
	if !isInteger(b) {
		return 0, fmt.Sprintf("%s %q is not an integer", name, b)
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case err != nil && v < 0, err == nil && v < lo:
		if lo == 1 {
			return 0, fmt.Sprintf("%s %s is less than 1", name, b)
		}
		return 0, fmt.Sprintf("%s %s is negative", name, b)
	case err != nil, v > hi:
		return 0, fmt.Sprintf("%s %s is larger than the maximum, %d", name, b, hi)
	}
	return v, ""
}

// checkKey returns what is wrong with a trimmed key field, or "".
func checkKey(b []byte) string {
	if len(b) == 0 {
		return "key is empty"
	}
	if !utf8.Valid(b) {
		return "key is not valid UTF-8"
	}
	for _, c := range b {
		switch {
		case c == '"':
			return fmt.Sprintf("key %q contains a double quote (quoted CSV fields are not supported)", b)
		case c < 0x20 || c == 0x7f:
			return fmt.Sprintf("key %q contains a control character", b)
		}
	}
	return ""
}
