package simulate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseTrace checks that the trace reader never panics, that it fails
// only with a *ParseError naming a line of the input, and that what it
// accepts is valid and reads back unchanged from its canonical form. Its
// seed corpus is testdata/fuzz/FuzzParseTrace.
func FuzzParseTrace(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := readAll(t, string(data))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("read %q: %v, want a *ParseError", data, err)
			}
			if lines := strings.Count(string(data), "\n") + 1; pe.Line < 1 || pe.Line > lines {
				t.Fatalf("read %q: error on line %d of %d", data, pe.Line, lines)
			}
			return
		}
		var canon []byte
		for i, r := range reqs {
			switch {
			case r.T < 0 || r.T > MaxTime:
				t.Fatalf("request %d: time %d out of range", i, r.T)
			case i > 0 && r.T < reqs[i-1].T:
				t.Fatalf("request %d: time %d before %d", i, r.T, reqs[i-1].T)
			case r.Cost < 1 || r.Cost > MaxCost:
				t.Fatalf("request %d: cost %d out of range", i, r.Cost)
			case r.Duration < 0 || r.Duration > MaxTime-r.T:
				t.Fatalf("request %d: duration %d at %d out of range", i, r.Duration, r.T)
			case r.Key == "" || strings.ContainsAny(r.Key, "\",\n\r") || !utf8.ValidString(r.Key):
				t.Fatalf("request %d: invalid key %q", i, r.Key)
			case strings.TrimSpace(r.Key) != r.Key:
				t.Fatalf("request %d: key %q not trimmed", i, r.Key)
			}
			canon = append(r.AppendCSV(canon), '\n')
		}
		again, err := readAll(t, string(canon))
		if err != nil {
			t.Fatalf("read back %q (from %q): %v", canon, data, err)
		}
		if !reflect.DeepEqual(again, reqs) {
			t.Fatalf("read back %q = %v, want %v", canon, again, reqs)
		}
		// The header rule must not swallow the first request of the
		// canonical form, and a checked trace must count the same.
		if n, err := CheckTrace(strings.NewReader(string(canon))); err != nil || n != int64(len(reqs)) {
			t.Fatalf("CheckTrace(%q) = %d, %v, want %d, nil", canon, n, err, len(reqs))
		}
	})
}
