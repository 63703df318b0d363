package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// budgetYAML is a token budget of 300 tokens an hour per X-API-Key in
// front of an OpenAI-compatible API, estimated at 0 and settled by the
// usage each answer reports; and, for /estimated/, one estimated at 50.
// %s is the store section.
const budgetYAML = `listen: {http: "127.0.0.1:0", admin: "127.0.0.1:0"}
%s
limits:
  tokens: {algorithm: fixed_window, limit: 300, period: 1h}
  estimated: {algorithm: fixed_window, limit: 300, period: 1h}
proxy:
  upstream: %s/v1
  rules:
    - match: {path_prefix: /chat/}
      limits: [{limit: tokens, key: "header:X-API-Key", cost: 0, usage: openai}]
    - match: {path_prefix: /estimated/}
      limits: [{limit: estimated, key: "header:X-API-Key", cost: 50, usage: openai}]
`

// TestThreeInstancesTokenBudget runs three sluice serve processes on one
// private Redis in front of the fake OpenAI-compatible API, sharing a
// budget of 300 tokens per key. Twelve clients, four on each instance,
// ask for completions (JSON and streams, 37 tokens each) until they are
// refused. Then the budget counts exactly the tokens the upstream
// reported (overspent by the requests admitted while a token was left),
// every instance refuses the key with 429, and another key still passes.
// A stream the upstream cuts off keeps its estimate, and the instance
// that served it counts it in sluice_usage_unsettled_total.
func TestThreeInstancesTokenBudget(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	testTokenBudget(t, testkit.RedisStoreYAML("budget:", 2*time.Second, srv.Addr), 3)
}

// TestOneInstanceTokenBudget is TestThreeInstancesTokenBudget with the
// memory store, whose budget one instance keeps alone.
func TestOneInstanceTokenBudget(t *testing.T) {
	t.Parallel()
	testTokenBudget(t, "store: {backend: memory}", 1)
}

func testTokenBudget(t *testing.T, store string, n int) {
	llm := testkit.StartLLM(t)
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(budgetYAML, store, llm.URL))
	instances := startInstances(t, n, "--config", cfg)
	chat := func(in *sluice, path, key string, stream bool, header ...string) (int, string, error) {
		req, err := http.NewRequest("POST", "http://"+in.http+path, strings.NewReader(testkit.ChatBody("one two three four five six seven", 30, stream)))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("X-API-Key", key)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, b, err := testkit.Fetch(http.DefaultClient, req)
		if resp == nil {
			return 0, "", err
		}
		return resp.StatusCode, string(b), err
	}

	// Four clients per instance, until each is refused.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := instances[c%n]
			for k := 0; ; k++ {
				code, body, err := chat(in, "/chat/completions", "team-a", (c+k)%2 == 0)
				switch {
				case err != nil:
					t.Errorf("%s: %v", in.Name, err)
					return
				case code == http.StatusTooManyRequests:
					return
				case code != http.StatusOK:
					t.Errorf("%s: %d %s", in.Name, code, body)
					return
				}
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	reported := llm.Reported()
	if got := admitted.Load(); reported != 37*got || reported < 300 {
		t.Fatalf("the upstream reported %d tokens for %d admitted requests (37 each), want at least the budget, 300", reported, got)
	}
	t.Logf("%d requests admitted, %d tokens reported", admitted.Load(), reported)
	// The budget counts what was reported, once every settlement is in.
	for _, in := range instances {
		testkit.WaitFor(t, waitTimeout, in.Name+"'s count of team-a's tokens", func() bool {
			return explainCount(t, in, "tokens", "team-a") == reported
		})
	}
	settled := 0.0
	for _, in := range instances {
		code, body, err := chat(in, "/chat/completions", "team-a", false)
		if err != nil || code != http.StatusTooManyRequests {
			t.Errorf("%s after the budget was spent: %d %v %s, want 429", in.Name, code, err, body)
		}
		if code, _, err := chat(in, "/chat/completions", "team-b", true); err != nil || code != http.StatusOK {
			t.Errorf("%s, another key: %d %v, want 200", in.Name, code, err)
		}
		settled += metric(t, in, `sluice_usage_units_total{limit="tokens"}`)
	}
	if want := float64(reported + 37*int64(n)); settled != want {
		t.Errorf("sluice_usage_units_total over the instances = %v, want %v", settled, want)
	}

	// A stream cut off before its usage keeps its estimate.
	last := instances[n-1]
	if code, body, err := chat(last, "/estimated/chat/completions", "team-c", true, "X-Fake-Cut", "3"); err == nil {
		t.Errorf("a cut-off stream read to its end: %d %q", code, body)
	}
	testkit.WaitFor(t, waitTimeout, "the cut-off stream to be counted", func() bool {
		return metric(t, last, `sluice_usage_unsettled_total{limit="estimated",reason="cut_off"}`) == 1
	})
	for _, in := range instances {
		if got := explainCount(t, in, "estimated", "team-c"); got != 50 {
			t.Errorf("%s counts %d of team-c's estimated tokens, want the estimate, 50", in.Name, got)
		}
	}
}

// explainCount returns the current window's count of key under a
// fixed_window limit, from GET /v1/explain on its admin listener.
func explainCount(t *testing.T, in *sluice, limit, key string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + in.admin + "/v1/explain?limit=" + limit + "&key=" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Tracked bool `json:"tracked"`
		State   struct {
			Current json.Number `json:"current"`
		} `json:"state"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: /v1/explain = %d %s", in.Name, resp.StatusCode, b)
	}
	if !e.Tracked {
		return 0
	}
	n, err := strconv.ParseInt(e.State.Current.String(), 10, 64)
	if err != nil {
		t.Fatalf("%s: /v1/explain's current = %q", in.Name, e.State.Current)
	}
	return n
}

// metric returns the value of one series of an instance's /metrics (on
// its admin listener), 0 when it has none.
func metric(t *testing.T, in *sluice, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + in.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text, ok := testkit.SeriesValue(string(b), series)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		t.Fatalf("%s: %s = %q", in.Name, series, text)
	}
	return v
}
