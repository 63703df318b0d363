package usage

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

const openaiBody = `{"id":"chatcmpl-1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`

// response returns a response with the given content type and body.
func response(contentType string, body io.Reader) *http.Response {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(body)}
}

// drain reads resp's body to its end and closes it, and returns what it
// read.
func drain(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return string(b)
}

func TestMeterJSON(t *testing.T) {
	resp := response("application/json", strings.NewReader(openaiBody))
	m := Watch(resp)
	if got := drain(t, resp); got != openaiBody {
		t.Errorf("the body read through the Meter = %q, want it unchanged", got)
	}
	for _, c := range []struct {
		spec string
		n    int64
	}{{"openai", 9}, {"openai:prompt", 7}, {"openai:completion", 2}} {
		if n, why := m.Usage(MustParse(c.spec)); n != c.n || why != Reported {
			t.Errorf("Usage(%s) = %d, %s; want %d, reported", c.spec, n, why, c.n)
		}
	}
	if n, why := m.Usage(MustParse("header:X-Tokens")); why != NoUsage {
		t.Errorf("Usage(header:X-Tokens) = %d, %s; want no_usage", n, why)
	}
}

func TestMeterReasons(t *testing.T) {
	broken := errors.New("connection reset")
	cutAfterUsage := `{"usage":{"total_tokens":4},"choices":[`
	for _, c := range []struct {
		name        string
		contentType string
		encoding    string
		body        io.Reader
		closeEarly  bool
		n           int64
		why         Reason
	}{
		{"no usage", "application/json", "", strings.NewReader(`{"error":{"message":"overloaded"}}`), false, 0, NoUsage},
		{"not json", "text/plain", "", strings.NewReader(`hello`), false, 0, Unreadable},
		{"json ends early", "application/json", "", strings.NewReader(`{"usage":`), false, 0, Unreadable},
		{"fraction", "application/json", "", strings.NewReader(`{"usage":{"total_tokens":2.5}}`), false, 0, Unreadable},
		{"compressed", "application/json", "gzip", strings.NewReader(openaiBody), false, 0, Unreadable},
		{"identity", "application/json", "identity", strings.NewReader(openaiBody), false, 9, Reported},
		{"no content type", "", "", strings.NewReader(openaiBody), false, 9, Reported},
		{"upstream broke", "application/json", "", io.MultiReader(strings.NewReader(`{"choices":[`), iotest.ErrReader(broken)), false, 0, CutOff},
		{"closed early", "application/json", "", strings.NewReader(openaiBody), true, 0, CutOff},
		{"broke after the usage", "application/json", "", io.MultiReader(strings.NewReader(cutAfterUsage), iotest.ErrReader(broken)), false, 4, Reported},
		{"stream", "text/event-stream; charset=utf-8", "", strings.NewReader("data: " + openaiBody + "\n\ndata: [DONE]\n\n"), false, 9, Reported},
		{"stream without usage", "text/event-stream", "", strings.NewReader("data: {\"usage\":null}\n\ndata: [DONE]\n\n"), false, 0, NoUsage},
		{"stream cut off", "text/event-stream", "", io.MultiReader(strings.NewReader("data: {}\n\n"), iotest.ErrReader(broken)), false, 0, CutOff},
		{"stream cut after the usage", "text/event-stream", "", io.MultiReader(strings.NewReader("data: "+openaiBody+"\n\n"), iotest.ErrReader(broken)), false, 9, Reported},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := response(c.contentType, c.body)
			if c.encoding != "" {
				resp.Header.Set("Content-Encoding", c.encoding)
			}
			m := Watch(resp)
			if c.closeEarly {
				resp.Body.Read(make([]byte, 10))
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if n, why := m.Usage(Spec{}); n != c.n || why != c.why {
				t.Errorf("Usage(openai) = %d, %s; want %d, %s", n, why, c.n, c.why)
			}
		})
	}
}

func TestMeterHeader(t *testing.T) {
	spec := MustParse("header:x-tokens-used")
	for _, c := range []struct {
		name           string
		header, trailr []string
		cut            bool
		n              int64
		why            Reason
	}{
		{"header", []string{"120"}, nil, false, 120, Reported},
		{"header with spaces", []string{" 120 "}, nil, false, 120, Reported},
		{"header, body cut", []string{"120"}, nil, true, 120, Reported},
		{"trailer", nil, []string{"33"}, false, 33, Reported},
		{"trailer, body cut", nil, []string{"33"}, true, 0, CutOff},
		{"neither", nil, nil, false, 0, NoUsage},
		{"negative", []string{"-1"}, nil, false, 0, Unreadable},
		{"plus", []string{"+1"}, nil, false, 0, Unreadable},
		{"two values", []string{"1", "2"}, nil, false, 0, Unreadable},
		{"empty", []string{""}, nil, false, 0, Unreadable},
		{"too big", []string{"9223372036854775808"}, nil, false, 0, Unreadable},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := response("application/json", strings.NewReader("{}"))
			if c.header != nil {
				resp.Header["X-Tokens-Used"] = c.header
			}
			if c.trailr != nil {
				resp.Trailer = http.Header{"X-Tokens-Used": c.trailr}
			}
			m := Watch(resp)
			if !c.cut {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if n, why := m.Usage(spec); n != c.n || why != c.why {
				t.Errorf("Usage(%s) = %d, %s; want %d, %s", spec, n, why, c.n, c.why)
			}
		})
	}
}

// padded is a JSON body of about size bytes whose usage object comes
// last, generated as it is read.
func padded(size int) io.Reader {
	head := `{"pad":"`
	tail := `","usage":{"total_tokens":5}}`
	return io.MultiReader(strings.NewReader(head), io.LimitReader(repeatReader('x'), int64(size-len(head)-len(tail))), strings.NewReader(tail))
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestMeterTooLarge: a usage object that ends within MaxJSONBytes is
// read (the body's own last byte may lie beyond), one that ends beyond
// it is not; the body passes through whole either way.
func TestMeterTooLarge(t *testing.T) {
	for _, c := range []struct {
		size int
		n    int64
		why  Reason
	}{{MaxJSONBytes, 5, Reported}, {MaxJSONBytes + 1, 5, Reported}, {MaxJSONBytes + 2, 0, TooLarge}} {
		resp := response("application/json", padded(c.size))
		m := Watch(resp)
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(c.size) {
			t.Errorf("size %d: read %d bytes, %v", c.size, n, err)
		}
		if n, why := m.Usage(Spec{}); n != c.n || why != c.why {
			t.Errorf("size %d: Usage = %d, %s; want %d, %s", c.size, n, why, c.n, c.why)
		}
	}
}

// TestMeterSwitchingProtocols: an upgraded connection's body is left as
// it is (the reverse proxy needs its io.ReadWriteCloser).
func TestMeterSwitchingProtocols(t *testing.T) {
	body := io.NopCloser(strings.NewReader(""))
	resp := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}, Body: body}
	m := Watch(resp)
	if resp.Body != body {
		t.Error("Watch replaced the body of a 101 response")
	}
	if _, why := m.Usage(Spec{}); why != NoUsage {
		t.Errorf("Usage = %s, want no_usage", why)
	}
}

// TestMeterPassesReadsThrough: each read of the Meter returns what one
// read of the body returned, no more and no later (an event stream
// reaches the client event by event).
func TestMeterPassesReadsThrough(t *testing.T) {
	pr, pw := io.Pipe()
	resp := response("text/event-stream", pr)
	m := Watch(resp)
	events := []string{"data: {\"usage\":null}\n\n", "data: " + openaiBody + "\n\n", "data: [DONE]\n\n"}
	go func() {
		for _, e := range events {
			pw.Write([]byte(e))
		}
		pw.Close()
	}()
	buf := make([]byte, 4096)
	for _, e := range events {
		n, err := resp.Body.Read(buf)
		if err != nil || string(buf[:n]) != e {
			t.Fatalf("Read = %q, %v; want %q", buf[:n], err, e)
		}
	}
	if n, err := resp.Body.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want EOF", n, err)
	}
	resp.Body.Close()
	if n, why := m.Usage(MustParse("openai:completion")); n != 2 || why != Reported {
		t.Errorf("Usage = %d, %s; want 2, reported", n, why)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, out, err string
	}{
		{"openai", "openai", ""},
		{"openai:prompt", "openai:prompt", ""},
		{"openai:completion", "openai:completion", ""},
		{"header:x-tokens-used", "header:X-Tokens-Used", ""},
		{"header:", "", `usage "header:": "" is not a header field name`},
		{"header:a b", "", `usage "header:a b": "a b" is not a header field name`},
		{"openai_prompt", "", `unknown usage "openai_prompt" (want ` + Specs + `); did you mean openai:prompt?`},
		{"OpenAI", "", `unknown usage "OpenAI" (want ` + Specs + `); did you mean openai?`},
		{"openai:total", "", `unknown usage "openai:total" (want ` + Specs + `)`},
		{"", "", `unknown usage "" (want ` + Specs + `)`},
	} {
		s, err := Parse(c.in)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("Parse(%q) = %v, %v; want error %q", c.in, s, err, c.err)
		case c.err == "" && (err != nil || s.String() != c.out):
			t.Errorf("Parse(%q) = %v, %v; want %s", c.in, s, err, c.out)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts it writes back in a
// form it reads as the same spec.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"openai", "openai:prompt", "header:X-Tokens", "header:", "openai_completion"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			return
		}
		again, err := Parse(s.String())
		if err != nil || again != s {
			t.Fatalf("Parse(%q) = %v; Parse(%q) = %v, %v", in, s, s.String(), again, err)
		}
	})
}
