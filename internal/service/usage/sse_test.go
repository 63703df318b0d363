package usage

import (
	"bytes"
	"strings"
	"testing"
)

// scanSSE reads stream with an sseScanner in pieces of chunk bytes (all
// at once for 0).
func scanSSE(stream []byte, chunk int) *sseScanner {
	var s sseScanner
	writeInChunks(stream, chunk, s.write)
	return &s
}

func TestSSEScanner(t *testing.T) {
	const (
		chunk1 = `data: {"id":"1","choices":[{"delta":{"content":"Hel"}}],"usage":null}`
		chunk2 = `data: {"id":"1","choices":[{"delta":{"content":"lo"}}],"usage":null}`
		final  = `data: {"id":"1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`
	)
	for _, c := range []struct {
		name   string
		stream string
		found  bool
		total  int64
		done   bool
	}{
		{"openai", chunk1 + "\n\n" + chunk2 + "\n\n" + final + "\n\ndata: [DONE]\n\n", true, 9, true},
		{"crlf", chunk1 + "\r\n\r\n" + final + "\r\n\r\ndata: [DONE]\r\n\r\n", true, 9, true},
		{"cr", chunk1 + "\r\r" + final + "\r\rdata: [DONE]\r\r", true, 9, true},
		{"bom", "\xEF\xBB\xBF" + final + "\n\n", true, 9, false},
		{"no usage", chunk1 + "\n\n" + chunk2 + "\n\ndata: [DONE]\n\n", false, 0, true},
		{"usage after done", chunk1 + "\n\ndata: [DONE]\n\n" + final + "\n\n", false, 0, true},
		{"undispatched", chunk1 + "\n\n" + final + "\n", false, 0, false},
		{"multi-line data", "data: {\"usage\":\ndata: {\"total_tokens\": 5}}\n\n", true, 5, false},
		{"no space", `data:{"usage":{"total_tokens":6}}` + "\n\n", true, 6, false},
		{"two spaces", `data:  {"usage":{"total_tokens":6}}` + "\n\n", true, 6, false},
		{"comments and fields", ": ping\nevent: x\nid: 3\nretry: 10\n" + final + "\n\n", true, 9, false},
		{"later null keeps earlier", final + "\n\n" + chunk1 + "\n\n", true, 9, false},
		{"not json", "data: hello\n\n", false, 0, false},
		{"data without colon", "data\ndata: {\"usage\":{\"total_tokens\":1}}\n\n", true, 1, false},
		{"dataa is not data", `dataa: {"usage":{"total_tokens":6}}` + "\n\n", false, 0, false},
		{"done with more data", "data: [DONE]\ndata: x\n\n", false, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 2, 5} {
				s := scanSSE([]byte(c.stream), chunk)
				if s.found != c.found || s.usage[Total].n != c.total || s.finished != c.done {
					t.Errorf("chunk %d: found %v total %v done %v, want %v %v %v", chunk, s.found, s.usage[Total].n, s.finished, c.found, c.total, c.done)
				}
			}
		})
	}
}

// TestSSEEventTooLarge: an event whose data passes MaxEventBytes is not
// read, and later ones are.
func TestSSEEventTooLarge(t *testing.T) {
	big := `data: {"usage":{"total_tokens":1},"pad":"` + strings.Repeat("x", MaxEventBytes) + "\"}\n\n"
	s := scanSSE([]byte(big), 4096)
	if s.found || !s.sawTooLarge {
		t.Errorf("a large event: found %v, sawTooLarge %v; want false, true", s.found, s.sawTooLarge)
	}
	s.write([]byte(`data: {"usage":{"total_tokens":2}}` + "\n\n"))
	if !s.found || s.usage[Total].n != 2 {
		t.Errorf("the event after it: found %v total %d, want 2", s.found, s.usage[Total].n)
	}
}

// referenceStream is what an sseScanner should find in a stream: the
// usage of the last event before [DONE] whose data has a usage object.
func referenceStream(stream []byte) (found bool, counts [numFields]count, done bool) {
	events, done := referenceEventsExact(stream)
	for _, e := range events {
		if len(e) > MaxEventBytes {
			continue
		}
		if valid, seen, c := reference(e); valid && seen {
			found, counts = true, c
		}
	}
	return found, counts, done
}

// referenceEventsExact splits a stream into lines ending in CRLF, LF or
// CR, then into events, as the standard says.
func referenceEventsExact(stream []byte) (events [][]byte, done bool) {
	stream = bytes.TrimPrefix(stream, bom[:])
	var lines [][]byte
	for {
		i := bytes.IndexAny(stream, "\r\n")
		if i < 0 {
			break
		}
		lines = append(lines, stream[:i])
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			i++
		}
		stream = stream[i+1:]
	}
	var data []byte
	has := false
	for _, line := range lines {
		switch {
		case len(line) == 0:
			if has {
				if string(data) == doneData {
					return events, true
				}
				events = append(events, data)
			}
			data, has = nil, false
		case line[0] == ':':
		default:
			name, value, colon := bytes.Cut(line, []byte(":"))
			if colon {
				value = bytes.TrimPrefix(value, []byte(" "))
			}
			if string(name) == "data" {
				if has {
					data = append(data, '\n')
				}
				data = append(data, value...)
				has = true
			}
		}
	}
	return events, false
}

// FuzzSSE: the scanner finds the usage that splitting the stream into
// lines and events, and decoding each event's data with encoding/json,
// finds; in pieces of any size.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[],\"usage\":null}\n\ndata: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\ndata: [DONE]\n\n",
		"\xEF\xBB\xBFdata:{\"usage\":\r\ndata: {\"total_tokens\": 5}}\r\r: c\n\n",
		"event: x\ndata\ndata: [DONE]\n\ndata: {\"usage\":{\"total_tokens\":1}}\n\n",
		"data: [DONE]\r\n\r\n", "\r\n\n\r", "data: {\"usage\":{\"total_tokens\":1}}\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		s := scanSSE(stream, int(chunk%8))
		found, counts, done := referenceStream(stream)
		if s.found != found || s.usage != counts || s.finished != done {
			t.Fatalf("found %v %v done %v, want %v %v %v", s.found, s.usage, s.finished, found, counts, done)
		}
	})
}
