package testkit

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestLLM: the fake answers a chat completion with its usage, as JSON and
// as a stream, and breaks a stream off where it is told.
func TestLLM(t *testing.T) {
	l := StartLLM(t)
	post := func(body string, header ...string) (*http.Response, string) {
		req, err := http.NewRequest("POST", l.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, b, err := Fetch(http.DefaultClient, req)
		if err != nil {
			return nil, err.Error()
		}
		return resp, string(b)
	}
	_, b := post(ChatBody("one two three", 5, false))
	if !strings.HasSuffix(b, `"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`) {
		t.Errorf("JSON answer = %s", b)
	}
	if resp, _ := post(ChatBody("one two three", 5, false), "Accept-Encoding", "gzip"); resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("X-Tokens-Used") != "8" {
		t.Errorf("JSON answer to a client that accepts gzip: %v", resp.Header)
	}
	resp, b := post(ChatBody("one two", 3, true))
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("stream Content-Type = %q", resp.Header.Get("Content-Type"))
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(b))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) != 5 || !strings.Contains(events[3], `"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}`) || events[4] != "[DONE]" {
		t.Errorf("stream events = %q", events)
	}
	if got := resp.Trailer.Get("X-Tokens-Used"); got != "5" {
		t.Errorf("stream trailer X-Tokens-Used = %q, want 5", got)
	}
	if got := l.Reported(); got != 8+8+5 {
		t.Errorf("Reported() = %d, want 21", got)
	}
	if _, b := post(ChatBody("x", 3, true), "X-Fake-Cut", "2"); !strings.Contains(b, "unexpected EOF") {
		t.Errorf("a cut stream read %q, want an unexpected EOF", b)
	}
	if _, b := post(ChatBody("x", 3, false), "X-Fake-Cut", "0"); !strings.Contains(b, "unexpected EOF") {
		t.Errorf("a cut body read %q, want an unexpected EOF", b)
	}
	if resp, b := post(ChatBody("x", 3, false), "X-Fake-Status", "503"); resp.StatusCode != 503 || strings.Contains(b, "usage") {
		t.Errorf("X-Fake-Status: %d %s", resp.StatusCode, b)
	}
	if got := l.Reported(); got != 21 {
		t.Errorf("Reported() after the failures = %d, want 21", got)
	}
}
