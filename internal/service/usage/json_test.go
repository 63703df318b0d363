package usage

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// scanJSON reads doc with a jsonScanner, in pieces of chunk bytes (all at
// once for 0), and returns it finished.
func scanJSON(doc []byte, chunk int) *jsonScanner {
	var s jsonScanner
	writeInChunks(doc, chunk, s.write)
	s.finish()
	return &s
}

// writeInChunks passes data to write in pieces of chunk bytes, the last
// one shorter; all at once for a chunk of 0 or less.
func writeInChunks(data []byte, chunk int, write func([]byte)) {
	if chunk <= 0 {
		chunk = len(data) + 1
	}
	for p := data; len(p) > 0; {
		n := min(chunk, len(p))
		write(p[:n])
		p = p[n:]
	}
}

// reference reads doc with encoding/json as the scanner should: whether
// it is valid JSON, whether its last top-level "usage" member is an
// object, and that object's counts.
func reference(doc []byte) (valid, seen bool, counts [numFields]count) {
	if !json.Valid(doc) {
		return false, false, counts
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil {
		return true, false, counts // not an object
	}
	raw, ok := top["usage"]
	if !ok || !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
		return true, false, counts
	}
	var u map[string]json.RawMessage
	if err := json.Unmarshal(raw, &u); err != nil {
		panic(err) // a valid object
	}
	for f, name := range fieldNames {
		r, ok := u[name]
		if !ok {
			continue
		}
		n, ok := parseCount([]string{string(r)})
		if !ok {
			counts[f] = count{state: bad}
			continue
		}
		counts[f] = count{state: reported, n: n}
	}
	return true, true, counts
}

func TestJSONScanner(t *testing.T) {
	for _, c := range []struct {
		name  string
		doc   string
		valid bool
		seen  bool
		want  [numFields]count // total, prompt, completion
	}{
		{"openai", `{"id":"x","choices":[{"message":{"content":"hi {\"usage\":1}"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`,
			true, true, [3]count{{reported, 21}, {reported, 9}, {reported, 12}}},
		{"details", `{"usage":{"total_tokens":5,"prompt_tokens_details":{"total_tokens":99,"cached_tokens":2}}}`,
			true, true, [3]count{{reported, 5}, {}, {}}},
		{"no usage", `{"id":"x","choices":[]}`, true, false, [3]count{}},
		{"usage null", `{"usage":null}`, true, false, [3]count{}},
		{"nested usage is not it", `{"data":{"usage":{"total_tokens":3}}}`, true, false, [3]count{}},
		{"last usage counts", `{"usage":{"total_tokens":3},"usage":{"prompt_tokens":4}}`, true, true, [3]count{{}, {reported, 4}, {}}},
		{"last usage null", `{"usage":{"total_tokens":3},"usage":null}`, true, false, [3]count{}},
		{"last field counts", `{"usage":{"total_tokens":3,"total_tokens":7}}`, true, true, [3]count{{reported, 7}, {}, {}}},
		{"escaped names", `{"\u0075sage":{"total\u005ftokens":8}}`, true, true, [3]count{{reported, 8}, {}, {}}},
		{"case matters", `{"Usage":{"total_tokens":8},"usage":{"Total_Tokens":8}}`, true, true, [3]count{}},
		{"fraction", `{"usage":{"total_tokens":1.5}}`, true, true, [3]count{{state: bad}, {}, {}}},
		{"exponent", `{"usage":{"total_tokens":1e3}}`, true, true, [3]count{{state: bad}, {}, {}}},
		{"negative", `{"usage":{"total_tokens":-1}}`, true, true, [3]count{{state: bad}, {}, {}}},
		{"string", `{"usage":{"total_tokens":"12"}}`, true, true, [3]count{{state: bad}, {}, {}}},
		{"zero", `{"usage":{"total_tokens":0}}`, true, true, [3]count{{reported, 0}, {}, {}}},
		{"max int64", `{"usage":{"total_tokens":9223372036854775807}}`, true, true, [3]count{{reported, 1<<63 - 1}, {}, {}}},
		{"overflow", `{"usage":{"total_tokens":9223372036854775808}}`, true, true, [3]count{{state: bad}, {}, {}}},
		{"whitespace", " \r\n\t{ \"usage\" : { \"total_tokens\" : 4 } } \n", true, true, [3]count{{reported, 4}, {}, {}}},
		{"top-level array", `[{"usage":{"total_tokens":4}}]`, true, false, [3]count{}},
		{"top-level number", `42`, true, false, [3]count{}},
		{"empty", ``, false, false, [3]count{}},
		{"truncated", `{"usage":{"total_tokens":4}`, false, true, [3]count{{reported, 4}, {}, {}}},
		{"trailing garbage", `{"usage":{"total_tokens":4}} x`, false, true, [3]count{{reported, 4}, {}, {}}},
		{"leading zero", `{"usage":{"total_tokens":04}}`, false, true, [3]count{}},
		{"bad escape", `{"a":"\x"}`, false, false, [3]count{}},
		{"control character", "{\"a\":\"\x01\"}", false, false, [3]count{}},
		{"mismatched", `{"a":[}`, false, false, [3]count{}},
		{"literals", `{"a":[true,false,null],"usage":{"total_tokens":1}}`, true, true, [3]count{{reported, 1}, {}, {}}},
		{"bad literal", `{"a":tru}`, false, false, [3]count{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 3} {
				s := scanJSON([]byte(c.doc), chunk)
				if got := s.complete(); got != c.valid {
					t.Errorf("chunk %d: complete() = %v, want %v", chunk, got, c.valid)
				}
				if c.valid && (s.usageSeen != c.seen || s.usage != c.want) {
					t.Errorf("chunk %d: usage = %v %v, want %v %v", chunk, s.usageSeen, s.usage, c.seen, c.want)
				}
			}
			if valid, seen, counts := reference([]byte(c.doc)); valid != c.valid || valid && (seen != c.seen || counts != c.want) {
				t.Errorf("encoding/json reads %v %v %v; the table is wrong", valid, seen, counts)
			}
		})
	}
}

// TestJSONScannerTruncated: a document cut off after its usage object
// still reports it (the Meter then counts it), and one cut inside the
// object does not.
func TestJSONScannerTruncated(t *testing.T) {
	doc := `{"usage":{"prompt_tokens":2,"total_tokens":12345},"choices":[`
	s := scanJSON([]byte(doc), 0)
	if s.complete() || s.failed() || !s.usageClosed || s.usage[Total] != (count{reported, 12345}) {
		t.Errorf("cut after the usage object: complete %v failed %v closed %v total %v", s.complete(), s.failed(), s.usageClosed, s.usage[Total])
	}
	i := strings.Index(doc, "123")
	s = scanJSON([]byte(doc[:i+3]), 0)
	if s.usageClosed {
		t.Errorf("cut inside the usage object: closed, total %v", s.usage[Total])
	}
}

// TestJSONDepth: nesting as deep as encoding/json accepts, and no deeper.
func TestJSONDepth(t *testing.T) {
	for _, d := range []int{maxDepth, maxDepth + 1} {
		doc := strings.Repeat("[", d) + strings.Repeat("]", d)
		s := scanJSON([]byte(doc), 0)
		if got, want := s.complete(), json.Valid([]byte(doc)); got != want {
			t.Errorf("depth %d: complete() = %v, json.Valid = %v", d, got, want)
		}
	}
}

// FuzzJSON: the scanner reads every document as encoding/json does, in
// pieces of any size.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`,
		`{"usage":{"total_tokens":3},"usage":{"prompt_tokens":4}}`,
		`{"\u0075sage":{"total\u005ftokens":8, "x": [1, -2.5e+3, true, null, {"y": "\ud83d\ude00"}]}}`,
		`{"usage":{"total_tokens":9223372036854775808}}`,
		`[1,2,{"usage":{}}]`, `"usage"`, `-0.0e-0`, ``, `{`, `{"usage":{"total_tokens":1}} {}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, doc []byte, chunk uint8) {
		s := scanJSON(doc, int(chunk%8))
		valid, seen, counts := reference(doc)
		if s.complete() != valid {
			t.Fatalf("complete() = %v, json.Valid = %v", s.complete(), valid)
		}
		if !valid {
			return
		}
		if s.usageSeen != seen || seen && (!s.usageClosed || s.usage != counts) {
			t.Fatalf("usage %v (closed %v) %v, encoding/json reads %v %v", s.usageSeen, s.usageClosed, s.usage, seen, counts)
		}
	})
}

// BenchmarkJSON counts the allocations of reading a response: none.
func BenchmarkJSON(b *testing.B) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("token ", 500) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":500,"total_tokens":509}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	var s jsonScanner
	for b.Loop() {
		s.reset()
		s.write(doc)
		if !s.finish() || s.usage[Total].n != 509 {
			b.Fatal("usage not read: " + strconv.FormatInt(s.usage[Total].n, 10))
		}
	}
}
