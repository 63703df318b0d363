package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// llmYAML limits an OpenAI-compatible API behind the proxy: a budget of
// 100 tokens an hour per X-API-Key, estimated at 0 and settled by
// usage.total_tokens; a second budget of the prompt tokens, estimated at
// 10, for the requests of /estimated/; and one settled by the
// X-Tokens-Used field, for /header/.
const llmYAML = `limits:
  tokens: {algorithm: fixed_window, limit: 100, period: 1h}
  prompt: {algorithm: fixed_window, limit: 100, period: 1h}
  by-header: {algorithm: fixed_window, limit: 100, period: 1h}
proxy:
  upstream: %s/v1
  rules:
    - name: llm
      match: {path_prefix: /chat/}
      limits: [{limit: tokens, key: "header:X-API-Key", cost: 0, usage: openai}]
    - match: {path_prefix: /estimated/}
      limits: [{limit: prompt, key: "header:X-API-Key", cost: 10, usage: "openai:prompt", settle_within: 1m}]
    - match: {path_prefix: /header/}
      limits: [{limit: by-header, key: "header:X-API-Key", cost: 10, usage: "header:X-Tokens-Used"}]
`

type llmFixture struct {
	*fixture
	llm   *testkit.LLM
	front *httptest.Server
	// client sends what the test says, no more: no Accept-Encoding of
	// its own.
	client *http.Client
}

func newLLMFixture(t *testing.T) *llmFixture {
	t.Helper()
	llm := testkit.StartLLM(t)
	f := newFixture(t, fmt.Sprintf(llmYAML, llm.URL))
	front := httptest.NewServer(f.h)
	t.Cleanup(front.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	return &llmFixture{fixture: f, llm: llm, front: front, client: client}
}

// chat posts a chat completion to path (/chat/completions under the
// rule's prefix) with key, and returns the response with its body read.
func (f *llmFixture) chat(t *testing.T, path, key, body string, header ...string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest("POST", f.front.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, b, err := testkit.Fetch(f.client, req)
	return resp, string(b), err
}

// remaining peeks the units key has left under a limit of llmYAML.
func (f *llmFixture) remaining(t *testing.T, limit, key string) int64 {
	t.Helper()
	l, _ := f.h.Config().Limit(limit)
	d, err := f.store.Peek(context.Background(), time.Time{}, sluice.Request{Policy: &l.Policy, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestProxyUsageBudget: requests of one key, as JSON and as streams, are
// admitted while its budget has a unit left and charged exactly what the
// upstream reported, and once it is spent they are refused with 429
// before reaching the upstream.
func TestProxyUsageBudget(t *testing.T) {
	f := newLLMFixture(t)
	spent := int64(0)
	for i, c := range []struct {
		prompt     string
		completion int64
		stream     bool
	}{
		{"one two three", 20, false}, // 23
		{"four five", 30, true},      // 32
		{"six", 40, false},           // 41: 96 in all
		{"seven", 10, true},          // 11: past the budget, admitted while 4 were left
	} {
		resp, body, err := f.chat(t, "/chat/completions", "team-a", testkit.ChatBody(c.prompt, c.completion, c.stream))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v %s", i, resp, err, body)
		}
		if c.stream && !strings.HasSuffix(body, "data: [DONE]\n\n") {
			t.Errorf("request %d: the stream reached the client as %q", i, body)
		}
		spent += int64(len(strings.Fields(c.prompt))) + c.completion
		if got, want := f.remaining(t, "tokens", "team-a"), max(100-spent, 0); got != want {
			t.Errorf("request %d: remaining %d, want %d", i, got, want)
		}
	}
	if got := f.llm.Reported(); got != spent {
		t.Errorf("the upstream reported %d tokens, the test counted %d", got, spent)
	}
	before := f.llm.Requests()
	resp, body, _ := f.chat(t, "/chat/completions", "team-a", testkit.ChatBody("more", 1, false))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "tokens") {
		t.Errorf("after the budget was spent: %d %s, want 429", resp.StatusCode, body)
	}
	if f.llm.Requests() != before {
		t.Error("a refused request reached the upstream")
	}
	if resp, _, _ := f.chat(t, "/chat/completions", "team-b", testkit.ChatBody("hi", 1, false)); resp.StatusCode != 200 {
		t.Errorf("another key: %d, want 200", resp.StatusCode)
	}
	if got := counter(t, f.reg, "sluice_usage_settled_total", "tokens"); got != 5 {
		t.Errorf("sluice_usage_settled_total{limit=tokens} = %v, want 5", got)
	}
	if got := counter(t, f.reg, "sluice_usage_units_total", "tokens"); got != float64(spent+2) {
		t.Errorf("sluice_usage_units_total{limit=tokens} = %v, want %d", got, spent+2)
	}
}

// TestProxyUsageEstimate: an estimate above the usage is given back, the
// estimate of a response without usage stays, and each miss is counted
// with its reason.
func TestProxyUsageEstimate(t *testing.T) {
	f := newLLMFixture(t)
	const path = "/estimated/chat/completions"
	f.chat(t, path, "k", testkit.ChatBody("a b c", 5, true)) // 3 prompt tokens of an estimate of 10
	if got := f.remaining(t, "prompt", "k"); got != 97 {
		t.Errorf("after 3 prompt tokens: remaining %d, want 97", got)
	}
	resp, _, _ := f.chat(t, path, "k", testkit.ChatBody("a", 5, false), "X-Fake-Status", "503")
	if resp.StatusCode != 503 {
		t.Fatalf("upstream error: %d, want the upstream's 503", resp.StatusCode)
	}
	if got := f.remaining(t, "prompt", "k"); got != 87 {
		t.Errorf("after an error without usage: remaining %d, want 87 (the estimate stays)", got)
	}
	if got := counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "no_usage"); got != 1 {
		t.Errorf("unsettled no_usage = %v, want 1", got)
	}
	// A stream asked for without stream_options reports no usage either.
	f.chat(t, path, "k", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`)
	if got := counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "no_usage"); got != 2 {
		t.Errorf("unsettled no_usage = %v, want 2", got)
	}
	if got := f.remaining(t, "prompt", "k"); got != 77 {
		t.Errorf("remaining %d, want 77", got)
	}
}

// TestProxyUsageCutOff: a stream the upstream breaks off before its usage
// keeps its estimate, and is counted as cut off.
func TestProxyUsageCutOff(t *testing.T) {
	f := newLLMFixture(t)
	const path = "/estimated/chat/completions"
	_, body, err := f.chat(t, path, "k", testkit.ChatBody("a b", 5, true), "X-Fake-Cut", "2")
	if err == nil {
		t.Errorf("a cut-off stream read to its end: %q", body)
	}
	if !strings.HasPrefix(body, "data: {") {
		t.Errorf("the events before the cut did not reach the client: %q", body)
	}
	testkit.WaitFor(t, 10*time.Second, "the cut-off stream to be counted", func() bool {
		return counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "cut_off") == 1
	})
	if got := f.remaining(t, "prompt", "k"); got != 90 {
		t.Errorf("remaining %d, want 90: the estimate stays", got)
	}
}

// TestProxyUsageClientGone: a client that goes away in the middle of a
// stream leaves the estimate charged, counted as cut off.
func TestProxyUsageClientGone(t *testing.T) {
	f := newLLMFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.front.URL+"/estimated/chat/completions", strings.NewReader(testkit.ChatBody("a b", 5, true)))
	req.Header.Set("X-API-Key", "k")
	req.Header.Set("X-Fake-Hold", "1")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	testkit.WaitFor(t, 10*time.Second, "the abandoned stream to be counted", func() bool {
		return counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "cut_off") == 1
	})
	if got := f.remaining(t, "prompt", "k"); got != 90 {
		t.Errorf("remaining %d, want 90: the estimate stays", got)
	}
}

// TestProxyUsageStreamsEventByEvent: each event reaches the client as the
// upstream sends it, while the upstream still holds the rest.
func TestProxyUsageStreamsEventByEvent(t *testing.T) {
	f := newLLMFixture(t)
	req, _ := http.NewRequest("POST", f.front.URL+"/chat/completions", strings.NewReader(testkit.ChatBody("a b", 3, true)))
	req.Header.Set("X-API-Key", "k")
	req.Header.Set("X-Fake-Hold", "1")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	br := bufio.NewReader(resp.Body)
	go func() {
		line, _ := br.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, `data: {"id":"chatcmpl-fake"`) {
			t.Errorf("first line = %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first event did not reach the client while the upstream held the stream")
	}
	// The upstream was holding the rest: the first event did not come
	// with the end of the stream.
	testkit.WaitFor(t, 10*time.Second, "the upstream to hold the stream", func() bool { return f.llm.Held() == 1 })
	f.llm.Release()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the rest of the stream: %q, %v", rest, err)
	}
	resp.Body.Close()
	testkit.WaitFor(t, 10*time.Second, "the stream to be settled", func() bool {
		return counter(t, f.reg, "sluice_usage_settled_total", "tokens") == 1
	})
	if got := f.remaining(t, "tokens", "k"); got != 95 {
		t.Errorf("remaining %d, want 95", got)
	}
}

// TestProxyUsageCompressed: a client that accepts gzip still gets its
// usage read: the upstream (which compresses what it may) is asked for
// an uncompressed answer, which the client gets.
func TestProxyUsageCompressed(t *testing.T) {
	f := newLLMFixture(t)
	resp, body, err := f.chat(t, "/chat/completions", "k", testkit.ChatBody("a b", 3, false), "Accept-Encoding", "gzip")
	if err != nil || resp.Header.Get("Content-Encoding") != "" || !strings.Contains(body, `"total_tokens":5`) {
		t.Fatalf("a client that accepts gzip: %v %v %q", resp.Header, err, body)
	}
	if got := f.remaining(t, "tokens", "k"); got != 95 {
		t.Errorf("remaining %d, want 95", got)
	}
}

// TestProxyUsageHeader: usage from a header field of a JSON answer, and
// from the trailer of a stream.
func TestProxyUsageHeader(t *testing.T) {
	f := newLLMFixture(t)
	const path = "/header/chat/completions"
	f.chat(t, path, "k", testkit.ChatBody("a b", 3, false)) // 5
	if got := f.remaining(t, "by-header", "k"); got != 95 {
		t.Errorf("after a header of 5: remaining %d, want 95", got)
	}
	resp, _, err := f.chat(t, path, "k", testkit.ChatBody("a b c", 3, true)) // 6
	if err != nil || resp.Trailer.Get("X-Tokens-Used") != "6" {
		t.Errorf("the stream's trailer reached the client as %v (%v)", resp.Trailer, err)
	}
	if got := f.remaining(t, "by-header", "k"); got != 89 {
		t.Errorf("after a trailer of 6: remaining %d, want 89", got)
	}
}

// TestProxyUsageUpstreamDown: a request the upstream never answered keeps
// its estimate, counted as no_response.
func TestProxyUsageUpstreamDown(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	f := newFixture(t, fmt.Sprintf(llmYAML, url))
	rec := f.do("POST", "/estimated/chat/completions", testkit.ChatBody("a", 1, false), "X-API-Key", "k")
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("upstream down: %d, want 502", rec.Code)
	}
	if got := counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "no_response"); got != 1 {
		t.Errorf("unsettled no_response = %v, want 1", got)
	}
}

// TestForwardAuthRefusesUsage: forward-auth never sees the response, so a
// rule settled by usage answers 501 there.
func TestForwardAuthRefusesUsage(t *testing.T) {
	f := newLLMFixture(t)
	rec := f.do("GET", "/v1/forward-auth?rule=llm", "", "X-API-Key", "k")
	if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), "usage") {
		t.Errorf("forward-auth of a rule settled by usage: %d %s, want 501", rec.Code, rec.Body)
	}
}
