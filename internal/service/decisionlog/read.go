package decisionlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
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
			return nil, fmt.Errorf("line %d: %v", r.line, fieldError(err))
		}
		if rec.Time.IsZero() || rec.Door == "" {
			return nil, fmt.Errorf("line %d: not a decision: no time or door", r.line)
		}
		for i, e := range rec.Limits {
			if e.Limit == "" || e.Outcome == "" {
				return nil, fmt.Errorf("line %d: limits[%d]: no limit or outcome", r.line, i)
			}
			if e.Order != 0 && e.At.IsZero() {
				// Stamp writes an entry's order only with its time.
				return nil, fmt.Errorf("line %d: limits[%d]: an order without at", r.line, i)
			}
		}
		return &rec, nil
	}
	if err := r.sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", r.line+1, err)
	}
	return nil, io.EOF
}

// fieldError words err, json's error for a line, as the field and what it
// wants when a value has the wrong type ("order": -1 or "x").
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	want := "a " + te.Type.String()
	switch te.Type.Kind() {
	case reflect.Uint64:
		want = "a whole number from 0"
	case reflect.Int64, reflect.Int:
		want = "a whole number"
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Slice:
		want = "a list"
	case reflect.Struct:
		want = "an object"
	}
	return fmt.Errorf("%s: want %s, got %s", te.Field, want, te.Value)
}
