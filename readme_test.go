package sluice_test

// This file holds the README's Go snippets, each between "// README {"
// and "// README }" lines, in the README's order; TestREADMESnippets
// checks that the README shows exactly this code, so every snippet there
// compiles as written, and the tests below run them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/redisstore"
)

// README {
func serve(app http.Handler) error {
	return http.ListenAndServe(":8080", httplimit.PerIP(sluice.SlidingWindow(100, time.Minute))(app))
}

// README }

// README {
func decide(ctx context.Context) error {
	store := memstore.New(memstore.Options{MaxKeys: 1_000_000})
	lim, err := sluice.New(store,
		sluice.TokenBucket(10, time.Second, 20).Named("per-second"), // 10/s, bursts of 20
		sluice.FixedWindow(1000, time.Hour).Named("per-hour"),       // AND 1000/h
	)
	if err != nil {
		return err // an invalid policy, with the field that is wrong
	}

	d, err := lim.Allow(ctx, "user:42", 1) // cost 1; all-or-nothing over both policies
	switch {
	case err != nil:
		return err // the store failed, or the cost can never fit
	case !d.Allowed:
		fmt.Println("over the limit: try again in", d.RetryAfter)
	}

	// Or block until the request fits, honouring ctx and its deadline:
	_, err = lim.Wait(ctx, "user:42", 1)
	return err
}

// README }

// README {
func newRedisStore() (*redisstore.Store, error) {
	return redisstore.New(redisstore.Options{
		Addrs:   []string{"10.0.0.5:6379"},                          // one Redis, or some nodes of a Redis Cluster
		Failure: redisstore.FailLocal,                               // or FailAllow, FailDeny
		Local:   memstore.New(memstore.Options{MaxKeys: 1_000_000}), // decides while Redis is away
	})
}

// README }

// README {
// callModel runs call while it holds one of the five slots of apiKey:
// lim is sluice.New(store, sluice.Concurrency(5, time.Minute)).
func callModel(ctx context.Context, lim *sluice.Limiter, apiKey string, call func() error) error {
	d, err := lim.Allow(ctx, apiKey, 1)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return fmt.Errorf("5 calls of this key are running; a slot frees within %v", d.RetryAfter)
	}
	// Free the slot when the call ends; a crashed holder's frees itself after a minute.
	defer lim.Release(context.WithoutCancel(ctx), d.Lease)
	return call()
}

// README }

// README {
// askModel spends from apiKey's budget of tokens, 100,000 per day:
// lim is sluice.New(store, sluice.FixedWindow(100_000, 24*time.Hour)).
func askModel(ctx context.Context, lim *sluice.Limiter, apiKey string, call func() (tokens int64, err error)) error {
	// Estimate 0: admitted while the budget has a token left.
	d, err := lim.AllowEstimate(ctx, apiKey, 0, time.Hour)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return fmt.Errorf("the daily budget is spent; it renews in %v", d.RetryAfter)
	}
	tokens, err := call()
	// Charge what the call used, even past the budget: the next call is
	// then refused until the day's window has passed.
	lim.Settle(context.WithoutCancel(ctx), d.Lease, tokens)
	return err
}

// README }

// README {
// userKey is the context key under which your authentication middleware
// stores the user's ID (a string).
type userKey struct{}

func routes(store sluice.Store, orders http.Handler) (http.Handler, error) {
	// The load balancers in front: X-Forwarded-For is believed from them only.
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	m, err := httplimit.New(store, []httplimit.Limit{
		{Policy: sluice.TokenBucket(10, time.Second, 0).Named("per-ip")}, // client IP (the default key)
		{Policy: sluice.SlidingWindow(1000, time.Hour).Named("per-user"), Key: httplimit.Context(userKey{})},
		{Policy: sluice.GCRA(5000, time.Second, 0).Named("endpoint"), Key: httplimit.Route},
	}, &httplimit.Options{ClientIP: &httplimit.ClientIP{TrustedProxies: trusted}})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", m.Handler(orders))
	return mux, nil
}

// README }

// README {
// apiPlans limits each API key by its plan, looked up in table (such as
// plans.OpenFile("customers.csv", ...)); keys the table does not hold are
// refused with 403 instead of getting the default plan.
func apiPlans(store sluice.Store, table plans.Table, api http.Handler) (http.Handler, error) {
	set, err := plans.NewSet("free",
		plans.Plan{Name: "free", Policies: []sluice.Policy{sluice.SlidingWindow(100, time.Hour).Named("free-hourly")}},
		plans.Plan{Name: "pro", Policies: []sluice.Policy{sluice.SlidingWindow(10_000, time.Hour).Named("pro-hourly")}},
	)
	if err != nil {
		return nil, err
	}
	pick := plans.FromTable(table, nil)
	m, err := httplimit.New(store, httplimit.PlanLimits(set, httplimit.Header("X-API-Key"), pick), nil)
	if err != nil {
		return nil, err
	}
	limited := m.Handler(api)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := pick(r, r.Header.Get("X-API-Key"))
		if _, known := set.Plan(name); !ok || !known {
			http.Error(w, "unknown API key", http.StatusForbidden)
			return
		}
		limited.ServeHTTP(w, r)
	}), nil
}

// README }

// README {
func newBotClient(store sluice.Store) (*http.Client, error) {
	t, err := httplimit.NewTransport(nil, store, []httplimit.OutLimit{
		{Policy: sluice.TokenBucket(30, time.Second, 0).Named("bot")},                           // 30/s overall
		{Policy: sluice.GCRA(1, time.Second, 0).Named("chat"), Key: httplimit.Query("chat_id")}, // 1/s per chat
	}, &httplimit.TransportOptions{
		RetryDelay: telegramRetryAfter, // a 429's delay is in its body
		Retries:    2,                  // send a message again after it, at most twice
	})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

// telegramRetryAfter reads the delay of a 429 from the Bot API's body:
// {"ok":false,"error_code":429,"parameters":{"retry_after":3}}.
func telegramRetryAfter(resp *http.Response) (time.Duration, bool) {
	var body struct {
		Parameters struct {
			RetryAfter int64 `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Parameters.RetryAfter <= 0 {
		return 0, false // then Retry-After, or a second
	}
	return time.Duration(body.Parameters.RetryAfter) * time.Second, true
}

// README }

// readmeGo finds the README's Go code blocks.
var readmeGo = regexp.MustCompile("(?s)```go\n(.*?)```\n")

// TestREADMESnippets checks that the README's Go snippets are this file's,
// one for one and in order.
func TestREADMESnippets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var here []string
	for _, part := range strings.Split(string(self), "// README {\n")[1:] {
		code, _, ok := strings.Cut(part, "// README }\n")
		if !ok {
			t.Fatal("readme_test.go: a README { without its README }")
		}
		here = append(here, strings.TrimRight(code, "\n")+"\n") // gofmt puts a blank line before the marker

	}
	blocks := readmeGo.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) != len(here) {
		t.Fatalf("README.md has %d Go snippets, readme_test.go %d", len(blocks), len(here))
	}
	for i, b := range blocks {
		if b[1] != here[i] {
			t.Errorf("README.md's Go snippet %d differs from readme_test.go's:\n%s\nwant:\n%s", i+1, b[1], here[i])
		}
	}
}

// TestREADMEDecide runs the Limiter snippet.
func TestREADMEDecide(t *testing.T) {
	if err := decide(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEConcurrency runs the concurrency snippet: a second call of
// the key while the first runs is refused, and admitted once it ended.
func TestREADMEConcurrency(t *testing.T) {
	ctx := context.Background()
	lim, err := sluice.New(memstore.New(memstore.Options{}), sluice.Concurrency(1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var inner error
	if err := callModel(ctx, lim, "k", func() error {
		inner = callModel(ctx, lim, "k", func() error { return nil })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inner == nil || !strings.Contains(inner.Error(), "a slot frees within 1m0s") {
		t.Errorf("a second call while the first ran = %v, want refused", inner)
	}
	if err := callModel(ctx, lim, "k", func() error { return nil }); err != nil {
		t.Errorf("a call after the first ended = %v, want admitted", err)
	}
}

// TestREADMERoutes runs the middleware snippet: the per-user limit reads
// the user from the context, and the route's handler is reached.
func TestREADMERoutes(t *testing.T) {
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ordered") })
	h, err := routes(memstore.New(memstore.Options{}), orders)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/orders", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "user-1"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || w.Body.String() != "ordered" || !strings.Contains(w.Header().Get("RateLimit-Policy"), `"per-user";q=1000;w=3600`) {
		t.Errorf("POST /v1/orders: %d %q, RateLimit-Policy %q", w.Code, w.Body, w.Header().Get("RateLimit-Policy"))
	}
}

// TestREADMEPlans runs the plans snippet: a free key gets its 100 an
// hour, a pro key more, and a key the table does not hold (or none) 403.
func TestREADMEPlans(t *testing.T) {
	path := t.TempDir() + "/customers.csv"
	if err := os.WriteFile(path, []byte("key,plan\nk-free,free\nk-pro,pro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	table, err := plans.OpenFile(path, plans.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	h, err := apiPlans(memstore.New(memstore.Options{}), table, api)
	if err != nil {
		t.Fatal(err)
	}
	admitted := func(key string, n int) (ok int, last int) {
		for range n {
			r := httptest.NewRequest("GET", "/", nil)
			if key != "" {
				r.Header.Set("X-API-Key", key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == 200 {
				ok++
			}
			last = w.Code
		}
		return ok, last
	}
	for _, tt := range []struct {
		key        string
		ok, status int
	}{{"k-free", 100, 429}, {"k-pro", 150, 200}, {"k-unknown", 0, 403}, {"", 0, 403}} {
		if ok, status := admitted(tt.key, 150); ok != tt.ok || status != tt.status {
			t.Errorf("key %q: %d of 150 admitted, last status %d; want %d and %d", tt.key, ok, status, tt.ok, tt.status)
		}
	}
}

// TestREADMEClients builds the Redis store (no Redis needed until a
// decision) and the outbound client.
func TestREADMEClients(t *testing.T) {
	s, err := newRedisStore()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	c, err := newBotClient(memstore.New(memstore.Options{}))
	if err != nil || c.Transport == nil {
		t.Fatalf("newBotClient() = %v, %v", c, err)
	}
	_ = serve // serve listens on :8080; ExamplePerIP (package httplimit) runs PerIP
}

// TestREADMETelegramRetryAfter checks the outbound snippet's reading of a
// 429's delay; httplimit's ExampleTransportOptions runs such a client.
func TestREADMETelegramRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		body string
		want time.Duration
		ok   bool
	}{
		{`{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}`, 3 * time.Second, true},
		{`{"ok":false,"error_code":429}`, 0, false},
		{`<html>busy</html>`, 0, false},
	} {
		resp := &http.Response{StatusCode: 429, Body: io.NopCloser(strings.NewReader(tt.body))}
		if got, ok := telegramRetryAfter(resp); got != tt.want || ok != tt.ok {
			t.Errorf("telegramRetryAfter(%s) = %v, %v, want %v, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}

// TestREADMEAskModel runs the budget snippet: a call that goes past the
// budget is charged in full, and the next one is refused before it runs.
func TestREADMEAskModel(t *testing.T) {
	lim, err := sluice.New(memstore.New(memstore.Options{}), sluice.FixedWindow(100_000, 24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	calls := 0
	spend := func(n int64) func() (int64, error) {
		return func() (int64, error) { calls++; return n, nil }
	}
	if err := askModel(ctx, lim, "k", spend(60_000)); err != nil {
		t.Fatal(err)
	}
	if err := askModel(ctx, lim, "k", spend(60_000)); err != nil {
		t.Fatalf("second call, 40,000 left: %v", err)
	}
	if err := askModel(ctx, lim, "k", spend(1)); err == nil || !strings.Contains(err.Error(), "budget is spent") {
		t.Fatalf("third call, 120,000 of 100,000 spent: %v, want the budget spent", err)
	}
	if calls != 2 {
		t.Errorf("the model was called %d times, want 2", calls)
	}
}
