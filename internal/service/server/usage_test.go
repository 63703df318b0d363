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

// checkCutOff waits for stream, one cut off before its usage came, to be
// counted as unsettled (cut_off) under prompt, and checks that key k's
// estimate stays charged: 90 left of 100.
func (f *llmFixture) checkCutOff(t *testing.T, stream string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, stream+" to be counted", func() bool {
		return counter(t, f.reg, "sluice_usage_unsettled_total", "prompt", "cut_off") == 1
	})
	if got := f.remaining(t, "prompt", "k"); got != 90 {
		t.Errorf("remaining %d, want 90: the estimate stays", got)
	}
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
	f.checkCutOff(t, "the cut-off stream")
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
	f.checkCutOff(t, "the abandoned stream")
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

// planLLMYAML gives each plan its own token budget, charged by the
// upstream's usage, beside a request count of the free plan.
const planLLMYAML = `limits:
  free-requests: {algorithm: fixed_window, limit: 1000, period: 1h}
  free-tokens: {algorithm: fixed_window, limit: 100, period: 1h}
  pro-tokens: {algorithm: fixed_window, limit: 1000, period: 1h, settle_within: 5m}
plans:
  free: [free-requests, {limit: free-tokens, usage: openai}]
  pro: [{limit: pro-tokens, usage: openai, cost: 10}]
proxy:
  upstream: %s/v1
  rules:
    - name: llm
      match: {path_prefix: /chat/}
      plan: {key: "header:X-API-Key", from: "header:X-Plan", default: free}
`

// TestProxyPlanTokenBudgets: a plan's limit with usage is estimated at
// its own cost and charged what the upstream reports, per client; the
// plan's other limits are charged the plan cost; a spent budget refuses
// before the upstream; forward-auth, which never sees the response,
// refuses the rule.
func TestProxyPlanTokenBudgets(t *testing.T) {
	llm := testkit.StartLLM(t)
	f := &llmFixture{fixture: newFixture(t, fmt.Sprintf(planLLMYAML, llm.URL)), llm: llm}
	f.front = httptest.NewServer(f.h)
	t.Cleanup(f.front.Close)
	f.client = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(f.client.CloseIdleConnections)

	spent := int64(0)
	for i, c := range []struct {
		prompt     string
		completion int64
		stream     bool
	}{{"one two", 40, false}, {"three", 50, true}, {"four", 20, false}} { // 42, 51, 21: 114
		resp, body, err := f.chat(t, "/chat/completions", "free-client", testkit.ChatBody(c.prompt, c.completion, c.stream))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v %s", i, resp, err, body)
		}
		spent += int64(len(strings.Fields(c.prompt))) + c.completion
		if got, want := f.remaining(t, "free-tokens", "free-client"), max(100-spent, 0); got != want {
			t.Errorf("request %d: free-tokens remaining %d, want %d", i, got, want)
		}
		if got := f.remaining(t, "free-requests", "free-client"); got != int64(1000-i-1) {
			t.Errorf("request %d: free-requests remaining %d, want %d", i, got, 1000-i-1)
		}
	}
	before := llm.Requests()
	resp, body, _ := f.chat(t, "/chat/completions", "free-client", testkit.ChatBody("more", 1, false))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "free-tokens") {
		t.Errorf("after the budget was spent: %d %s, want 429 naming free-tokens", resp.StatusCode, body)
	}
	if llm.Requests() != before {
		t.Error("a refused request reached the upstream")
	}
	// The pro plan: an estimate of 10, settled to the usage.
	resp, body, err := f.chat(t, "/chat/completions", "pro-client", testkit.ChatBody("hello there", 5, false), "X-Plan", "pro")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pro request: %v %v %s", resp, err, body)
	}
	if got := f.remaining(t, "pro-tokens", "pro-client"); got != 1000-7 {
		t.Errorf("pro-tokens remaining %d, want %d (the usage, not the estimate of 10)", got, 1000-7)
	}
	if got := counter(t, f.reg, "sluice_usage_units_total", "free-tokens"); got != float64(spent) {
		t.Errorf("sluice_usage_units_total{limit=free-tokens} = %v, want %d", got, spent)
	}
	rec := f.do("GET", "/v1/forward-auth?rule=llm", "", "X-API-Key", "k")
	if rec.Code != http.StatusNotImplemented {
		t.Errorf("forward-auth of a rule whose plan is settled by usage: %d %s, want 501", rec.Code, rec.Body)
	}
}

// TestCheckPlanTokenBudget: /v1/check of a plan charges a limit with
// usage its own estimate (here 0: a check) and the others the request's
// cost; with a lease, /v1/release settles the budget by the limit's name.
func TestCheckPlanTokenBudget(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(planLLMYAML, "http://127.0.0.1:9"))
	a := answer(t, f, "/v1/check", `{"plan":"free","key":"k","cost":2,"lease":true}`)
	lease, _ := a["lease"].(string)
	if a["allowed"] != true || lease == "" {
		t.Fatalf("check of the free plan = %v, want allowed with a lease", a)
	}
	if _, rem := remaining(t, f, "free-tokens", "k"); rem != 100 {
		t.Errorf("free-tokens after the check: %v left, want 100 (an estimate of 0)", rem)
	}
	if _, rem := remaining(t, f, "free-requests", "k"); rem != 998 {
		t.Errorf("free-requests after the check: %v left, want 998 (the request's cost)", rem)
	}
	rec := f.do("POST", "/v1/release", `{"lease":`+quote(lease)+`,"usage":{"free-tokens":130}}`)
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"released":true}` {
		t.Fatalf("release = %d %s", rec.Code, rec.Body)
	}
	if _, rem := remaining(t, f, "free-tokens", "k"); rem != 0 {
		t.Errorf("free-tokens after a usage of 130: %v left, want 0 (in debt)", rem)
	}
	if a := answer(t, f, "/v1/check", `{"plan":"free","key":"k"}`); a["allowed"] != false {
		t.Errorf("check of a spent budget = %v, want refused", a)
	}
}
