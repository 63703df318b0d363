package simulate

import (
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/internal/testkit"
)

// readAll reads every request of a trace.
func readAll(t *testing.T, trace string) ([]Request, error) {
	t.Helper()
	tr := NewTraceReader(strings.NewReader(trace))
	var out []Request
	for {
		r, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func TestTraceReader(t *testing.T) {
	tests := []struct {
		name  string
		trace string
		want  []Request
	}{
		{"empty", "", nil},
		{"only comments and blanks", "# a\n\n   \n\t# b\n", nil},
		{"no header", "5,a,2\n6,b\n", []Request{{T: 5, Key: "a", Cost: 2}, {T: 6, Key: "b", Cost: 1}}},
		{"header", "t_ms,key,cost\n5,a,2\n", []Request{{T: 5, Key: "a", Cost: 2}}},
		{"header after comments", "# c\n\nt,k\n5,a\n", []Request{{T: 5, Key: "a", Cost: 1}}},
		{"one-field header", "time\n5,a\n", []Request{{T: 5, Key: "a", Cost: 1}}},
		{"default cost", "1,a\n", []Request{{T: 1, Key: "a", Cost: 1}}},
		{"equal timestamps", "7,a\n7,b\n7,a,3\n", []Request{{T: 7, Key: "a", Cost: 1}, {T: 7, Key: "b", Cost: 1}, {T: 7, Key: "a", Cost: 3}}},
		{"spaces around fields", "  10 , user 1 ,\t4 \n", []Request{{T: 10, Key: "user 1", Cost: 4}}},
		{"CRLF", "t_ms,key\r\n1,a\r\n2,b,2\r\n", []Request{{T: 1, Key: "a", Cost: 1}, {T: 2, Key: "b", Cost: 2}}},
		{"no final newline", "1,a\n2,b", []Request{{T: 1, Key: "a", Cost: 1}, {T: 2, Key: "b", Cost: 1}}},
		{"byte order mark", "\uFEFF1,a\n", []Request{{T: 1, Key: "a", Cost: 1}}},
		{"byte order mark before header", "\uFEFFt_ms,key\n1,a\n", []Request{{T: 1, Key: "a", Cost: 1}}},
		{"plus sign", "+3,a,+2\n", []Request{{T: 3, Key: "a", Cost: 2}}},
		{"zero time", "0,a\n", []Request{{T: 0, Key: "a", Cost: 1}}},
		{"max time and cost", "253402300799999,a,1000000000\n", []Request{{T: MaxTime, Key: "a", Cost: MaxCost}}},
		{"unicode key", "1,ключ/🙂\n", []Request{{T: 1, Key: "ключ/🙂", Cost: 1}}},
		{"comment between requests", "1,a\n# pause\n2,a\n", []Request{{T: 1, Key: "a", Cost: 1}, {T: 2, Key: "a", Cost: 1}}},
		{"key with hash", "1,#a\n", []Request{{T: 1, Key: "#a", Cost: 1}}},
		{"duration", "t_ms,key,cost,duration_ms\n5,a,2,300\n6,b,1\n", []Request{{T: 5, Key: "a", Cost: 2, Duration: 300}, {T: 6, Key: "b", Cost: 1}}},
		{"zero duration", "5,a,1,0\n", []Request{{T: 5, Key: "a", Cost: 1}}},
		{"duration with spaces and sign", "5, a , 1 , +7 \r\n", []Request{{T: 5, Key: "a", Cost: 1, Duration: 7}}},
		{"duration to max time", "253402300799000,a,1,999\n", []Request{{T: MaxTime - 999, Key: "a", Cost: 1, Duration: 999}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(t, tt.trace)
			if err != nil {
				t.Fatalf("read %q: %v", tt.trace, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("read %q = %v, want %v", tt.trace, got, tt.want)
			}
		})
	}
}

func TestTraceReaderErrors(t *testing.T) {
	tests := []struct {
		name  string
		trace string
		want  string // the whole error message
	}{
		{"bad time", "t,k\n1,a\nx1,b\n", `line 3: t_ms "x1" is not an integer`},
		{"decimal time", "1,a\n1.5,a\n", `line 2: t_ms "1.5" is not an integer`},
		{"negative time", "-1,a\n", `line 1: t_ms -1 is negative`},
		{"huge negative time", "-99999999999999999999,a\n", `line 1: t_ms -99999999999999999999 is negative`},
		{"time after 9999", "253402300800000,a\n", `line 1: t_ms 253402300800000 is larger than the maximum, 253402300799999`},
		{"time overflow", "99999999999999999999,a\n", `line 1: t_ms 99999999999999999999 is larger than the maximum, 253402300799999`},
		{"empty time", "1,a\n,a\n", `line 2: t_ms is empty`},
		{"missing key", "1,a\n2\n", `line 2: missing key: want t_ms,key[,cost[,duration_ms]]`},
		{"empty key", "1,a\n2,,1\n", `line 2: key is empty`},
		{"blank key", "1,a\n2, \t,1\n", `line 2: key is empty`},
		{"quoted key", "1,\"a,b\"\n", `line 1: key "\"a" contains a double quote (quoted CSV fields are not supported)`},
		{"quote in key", "1,\"ab\"\n", `line 1: key "\"ab\"" contains a double quote (quoted CSV fields are not supported)`},
		{"control character in key", "1,a\x01b\n", `line 1: key "a\x01b" contains a control character`},
		{"invalid UTF-8 key", "1,a\xffb\n", `line 1: key is not valid UTF-8`},
		{"bad cost", "1,a,x\n", `line 1: cost "x" is not an integer`},
		{"empty cost", "1,a,\n", `line 1: cost is empty (leave the field out for the default, 1)`},
		{"zero cost", "1,a,1\n2,a,0\n", `line 2: cost 0 is less than 1`},
		{"negative cost", "1,a,-3\n", `line 1: cost -3 is less than 1`},
		{"cost too large", "1,a,1000000001\n", `line 1: cost 1000000001 is larger than the maximum, 1000000000`},
		{"extra field", "1,a,1,5,x\n", `line 1: extra fields: 5 fields, want t_ms,key[,cost[,duration_ms]]`},
		{"trailing comma", "1,a,1,5,\n", `line 1: extra fields: 5 fields, want t_ms,key[,cost[,duration_ms]]`},
		{"bad duration", "1,a\n2,a,1,x\n", `line 2: duration_ms "x" is not an integer`},
		{"decimal duration", "1,a,1,2.5\n", `line 1: duration_ms "2.5" is not an integer`},
		{"duration with unit", "t,k,c,d\n1,a,1,30s\n", `line 2: duration_ms "30s" is not an integer`},
		{"negative duration", "1,a,1,-5\n", `line 1: duration_ms -5 is negative`},
		{"empty duration", "1,a\n\n3,a,1,\n", `line 3: duration_ms is empty (leave the field out for the default, 0)`},
		{"duration without cost", "1,a,,5\n", `line 1: cost is empty (a line with a duration_ms needs its cost)`},
		{"duration past max time", "253402300799000,a,1,1000\n", `line 1: duration_ms 1000 ends the request at 253402300800000, after the maximum time, 253402300799999`},
		{"duration overflow", "1,a,1,99999999999999999999\n", `line 1: duration_ms 99999999999999999999 is larger than the maximum, 253402300799999`},
		{"header not first", "1,a\nt_ms,key\n", `line 2: t_ms "t_ms" is not an integer`},
		{"decreasing", "# c\nt,k\n10,a\n\n20,b\n19,a\n", `line 6: t_ms 19 is before 20 on line 5 (timestamps must be non-decreasing)`},
		{"decreasing across keys", "5,a\n4,b\n", `line 2: t_ms 4 is before 5 on line 1 (timestamps must be non-decreasing)`},
		{"line too long", "1,a\n2," + strings.Repeat("k", MaxLineBytes) + "\n", `line 2: line is longer than 1048576 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readAll(t, tt.trace)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("read %q: error %v, want a *ParseError", tt.trace, err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("read %q: error %q, want %q", tt.trace, got, tt.want)
			}
		})
	}
}

// TestTraceReaderStopsAtError checks that the reader returns the requests
// before a bad line, and then the same error again.
func TestTraceReaderStopsAtError(t *testing.T) {
	tr := NewTraceReader(strings.NewReader("1,a\n2,b,0\n3,c\n"))
	if r, err := tr.Next(); err != nil || r != (Request{T: 1, Key: "a", Cost: 1}) {
		t.Fatalf("Next() = %v, %v, want {1 a 1}, nil", r, err)
	}
	_, err1 := tr.Next()
	_, err2 := tr.Next()
	if err1 == nil || err1 != err2 {
		t.Errorf("Next() after a bad line = %v, then %v; want the same error twice", err1, err2)
	}
	if tr.Line() != 2 {
		t.Errorf("Line() = %d, want 2", tr.Line())
	}
}

func TestTraceReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	tr := NewTraceReader(io.MultiReader(strings.NewReader("1,a\n"), iotest.ErrReader(boom)))
	if _, err := tr.Next(); err != nil {
		t.Fatalf("Next() = %v, want a request", err)
	}
	_, err := tr.Next()
	var pe *ParseError
	if !errors.Is(err, boom) || errors.As(err, &pe) {
		t.Errorf("Next() = %v, want an error wrapping %v that is not a *ParseError", err, boom)
	}
}

func TestCheckTrace(t *testing.T) {
	n, err := CheckTrace(strings.NewReader("t,k\n1,a\n2,b\n# end\n"))
	if n != 2 || err != nil {
		t.Errorf("CheckTrace = %d, %v, want 2, nil", n, err)
	}
	n, err = CheckTrace(strings.NewReader("1,a\n2,b\n1,c\n"))
	if n != 2 || err == nil || !strings.HasPrefix(err.Error(), "line 3:") {
		t.Errorf("CheckTrace = %d, %v, want 2, an error on line 3", n, err)
	}
}

func TestAppendCSV(t *testing.T) {
	r := Request{T: 1767268859000, Key: "client 1", Cost: 3}
	if got, want := string(r.AppendCSV(nil)), "1767268859000,client 1,3"; got != want {
		t.Errorf("AppendCSV = %q, want %q", got, want)
	}
	r.Duration = 1500
	if got, want := string(r.AppendCSV(nil)), "1767268859000,client 1,3,1500"; got != want {
		t.Errorf("AppendCSV with a duration = %q, want %q", got, want)
	}
}

// TestExampleTraces checks that every shipped example trace is valid.
func TestExampleTraces(t *testing.T) {
	testkit.EachFile(t, "../../examples/traces/*.csv", func(t *testing.T, path string) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if n, err := CheckTrace(f); err != nil || n == 0 {
			t.Errorf("CheckTrace(%s) = %d, %v, want some requests and no error", path, n, err)
		}
	})
}
