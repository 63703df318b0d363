package decisionlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// MaxLine is the longest line Reader reads.
const MaxLine = 1 << 20

// Reader reads a decision log, line by line.
type Reader struct {
	sc   *bufio.Scanner
	line int
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	return &Reader{sc: sc}
}

// Next returns the next record, io.EOF at the end, or an error naming
// the line that is not a record.
func (r *Reader) Next() (*Record, error) {
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %v", r.line, err)
		}
		if rec.Time.IsZero() || rec.Door == "" {
			return nil, fmt.Errorf("line %d: not a decision: no time or door", r.line)
		}
		for i, e := range rec.Limits {
			if e.Limit == "" || e.Outcome == "" {
				return nil, fmt.Errorf("line %d: limits[%d]: no limit or outcome", r.line, i)
			}
		}
		return &rec, nil
	}
	if err := r.sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", r.line+1, err)
	}
	return nil, io.EOF
}
