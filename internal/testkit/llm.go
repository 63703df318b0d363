package testkit

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LLM is a fake OpenAI-compatible chat completions API (POST
// /v1/chat/completions, or any path ending in /chat/completions) on a
// loopback port, for the tests of
// budgets settled by the usage a response reports. It answers every
// request by what its body asks, and counts the tokens it reported:
//
//   - prompt_tokens is the number of words (strings.Fields) in the
//     messages' contents, completion_tokens is max_tokens (default 16),
//     and the answer's content is that many words;
//   - "stream": true answers with server-sent events, one chunk per
//     word, each written and flushed on its own; with
//     "stream_options": {"include_usage": true} a last chunk with the
//     usage object comes before "data: [DONE]", as OpenAI's API does;
//   - without stream, one JSON body with the usage object last,
//     compressed with gzip when the request accepts it;
//   - the total is also sent in the X-Tokens-Used field: a header of a
//     JSON body, a trailer of a stream (after its usage event).
//
// Request header fields steer a request further:
//
//   - X-Fake-Cut: N breaks the connection off after N chunks of a
//     stream (before its usage), or in the middle of a JSON body when N
//     is 0;
//   - X-Fake-Hold: 1 stops a stream after its first chunk until Release
//     is called (or the request ends);
//   - X-Fake-Status: a status other than 200 answers with an error body
//     that has no usage, as an upstream error does.
//
// The LLM is closed when the test ends.
type LLM struct {
	// URL is the API's base URL, such as http://127.0.0.1:40123.
	URL string

	srv      *httptest.Server
	reported atomic.Int64 // total_tokens reported in usage objects
	requests atomic.Int64
	held     atomic.Int64 // streams waiting at X-Fake-Hold
	release  chan struct{}
	once     sync.Once
}

// StartLLM starts a fake OpenAI-compatible API on loopback.
func StartLLM(t testing.TB) *LLM {
	t.Helper()
	l := &LLM{release: make(chan struct{})}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	l.URL = l.srv.URL
	t.Cleanup(func() {
		l.Release()
		l.srv.Close()
	})
	return l
}

// Reported returns the total_tokens of every usage object the LLM has
// sent so far.
func (l *LLM) Reported() int64 { return l.reported.Load() }

// Requests returns how many chat completions the LLM has been asked for.
func (l *LLM) Requests() int64 { return l.requests.Load() }

// Held returns how many streams are waiting at X-Fake-Hold.
func (l *LLM) Held() int64 { return l.held.Load() }

// Release lets every stream held by X-Fake-Hold, and every later one, go
// on.
func (l *LLM) Release() { l.once.Do(func() { close(l.release) }) }

// ChatRequest is the part of a chat completion request the fake reads.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     *int64 `json:"max_tokens,omitempty"`
	Stream        bool   `json:"stream,omitempty"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

// ChatBody returns the body of a chat completion request with one user
// message of the given words, asking for completion tokens; stream asks
// for a stream with its usage.
func ChatBody(prompt string, completion int64, stream bool) string {
	s := fmt.Sprintf(`{"model":"fake","messages":[{"role":"user","content":%q}],"max_tokens":%d`, prompt, completion)
	if stream {
		s += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return s + "}"
}

func (l *LLM) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"no such endpoint"}}`, http.StatusNotFound)
		return
	}
	l.requests.Add(1)
	var req ChatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
		return
	}
	if s := r.Header.Get("X-Fake-Status"); s != "" {
		code, _ := strconv.Atoi(s)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, `{"error":{"message":"the fake upstream failed on purpose","type":"server_error"}}`)
		return
	}
	prompt := int64(0)
	for _, m := range req.Messages {
		prompt += int64(len(strings.Fields(m.Content)))
	}
	completion := int64(16)
	if req.MaxTokens != nil {
		completion = *req.MaxTokens
	}
	cut := -1
	if s := r.Header.Get("X-Fake-Cut"); s != "" {
		cut, _ = strconv.Atoi(s)
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, completion, prompt+completion)
	if !req.Stream {
		words := strings.TrimSpace(strings.Repeat("tok ", int(completion)))
		body := fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion","created":%d,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":%s}`,
			time.Now().Unix(), req.Model, words, usage)
		w.Header().Set("Content-Type", "application/json")
		if cut == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, body[:len(body)/2])
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler) // the connection breaks off
		}
		l.reported.Add(prompt + completion)
		w.Header().Set("X-Tokens-Used", strconv.FormatInt(prompt+completion, 10))
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		io.WriteString(w, body)
		return
	}
	w.Header().Set("Trailer", "X-Tokens-Used")
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	event := func(data string) {
		fmt.Fprintf(w, "data: %s\n\n", data)
		rc.Flush()
	}
	for i := int64(0); i < completion; i++ {
		if int64(cut) == i {
			panic(http.ErrAbortHandler)
		}
		event(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":"tok "}}],"usage":null}`, req.Model))
		if i == 0 && r.Header.Get("X-Fake-Hold") == "1" {
			l.held.Add(1)
			select {
			case <-l.release:
			case <-r.Context().Done():
			}
			l.held.Add(-1)
			if r.Context().Err() != nil {
				return
			}
		}
	}
	if int64(cut) == completion {
		panic(http.ErrAbortHandler)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		l.reported.Add(prompt + completion)
		w.Header().Set("X-Tokens-Used", strconv.FormatInt(prompt+completion, 10))
		event(fmt.Sprintf(`{"id":"chatcmpl-fake","object":"chat.completion.chunk","model":%q,"choices":[],"usage":%s}`, req.Model, usage))
	}
	event("[DONE]")
}
