package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// openAIUsage reads usage.total_tokens from an LLM API's JSON answer.
func openAIUsage(_ *http.Response, body []byte) (int64, bool) {
	var v struct {
		Usage *struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return 0, false
	}
	return v.Usage.TotalTokens, true
}

// TestTransportUsage calls a loopback server that answers with the tokens
// each call used, through a Transport with a budget of 100 tokens per hour
// checked at an estimate of 0: the calls are charged what they used, the
// call that goes past the budget is charged in full, and the next one is
// not sent, its context's deadline passing before the budget has a unit.
func TestTransportUsage(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		fmt.Fprintf(w, `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":50,"total_tokens":60}}`)
	}))
	t.Cleanup(srv.Close)
	st := memstore.New(memstore.Options{})
	budget := sluice.FixedWindow(100, time.Hour).Named("tokens")
	tr, err := NewTransport(nil, st, []OutLimit{{Policy: budget, Usage: true}}, &TransportOptions{Usage: openAIUsage})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	call := func(timeout time.Duration) error {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(t.Context(), timeout)
		}
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	remaining := func() sluice.Decision {
		d, err := st.Peek(t.Context(), time.Time{}, sluice.Request{Policy: &budget, Key: strings.TrimPrefix(srv.URL, "http://"), Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := call(0); err != nil {
		t.Fatal(err)
	}
	if d := remaining(); d.Remaining != 40 {
		t.Fatalf("after one call of 60 tokens: %d remaining, want 40", d.Remaining)
	}
	if err := call(0); err != nil {
		t.Fatal(err)
	}
	if d := remaining(); d.Allowed {
		t.Fatalf("after 120 of 100 tokens: %+v, want spent", d)
	}
	if err := call(50 * time.Millisecond); err == nil {
		t.Fatalf("a call with the budget spent was sent, want the deadline's error")
	}
	if sent.Load() != 2 {
		t.Errorf("the server got %d calls, want 2", sent.Load())
	}
	// Usage needs a reader of the usage, and a rate policy.
	if _, err := NewTransport(nil, st, []OutLimit{{Policy: budget, Usage: true}}, nil); err == nil || !strings.Contains(err.Error(), "TransportOptions.Usage") {
		t.Errorf("Usage without TransportOptions.Usage: error %v", err)
	}
}

// TestTail checks that the tail keeps the last MaxUsageBody bytes.
func TestTail(t *testing.T) {
	var tl tail
	var all []byte
	for i := range 5000 {
		p := []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%997))
		tl.Write(p)
		all = append(all, p...)
	}
	want := all[max(len(all)-MaxUsageBody, 0):]
	if got := tl.bytes(); string(got) != string(want) {
		t.Fatalf("tail has %d bytes, want the last %d", len(got), len(want))
	}
}
