package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/redisstore"
)

func newRedisStore(t *testing.T, addr string, failure redisstore.FailurePolicy) *redisstore.Store {
	t.Helper()
	// A generous timeout: on a loaded machine the first call, which dials,
	// can take longer than 200ms, and five such failures open the breaker
	// for every later call. A killed Redis still fails at once (refused).
	s, err := redisstore.New(redisstore.Options{Addrs: []string{addr}, Failure: failure, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two servers, each with its own middleware and Redis connection, share
// one per-API-key budget: together they admit exactly the limit.
func TestRedisSharedBudget(t *testing.T) {
	srv := testkit.StartRedis(t)
	limits := []Limit{
		{Policy: sluice.SlidingLog(20, time.Hour).Named("per-key"), Key: Header("X-API-Key")},
		{Policy: sluice.TokenBucket(1000, time.Second, 0).Named("per-ip")},
	}
	var hs []http.Handler
	for range 2 {
		m := mustNew(t, newRedisStore(t, srv.Addr, redisstore.FailError), limits, nil)
		hs = append(hs, m.Handler(okHandler))
	}
	var mu sync.Mutex
	passed := map[int]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			resp := serve(hs[i%2], request("192.0.2.1:1", "X-API-Key", "k1"))
			mu.Lock()
			passed[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if passed[200] != 20 || passed[429] != 40 {
		t.Errorf("statuses = %v, want 20 admitted and 40 refused", passed)
	}
	// Another key has its own budget, and the quota fields come from Redis.
	resp := serve(hs[0], request("192.0.2.1:1", "X-API-Key", "k2"))
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-key";r=19;t=3600` {
		t.Errorf("k2: %d RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

// A Redis that stops answering, under the store's fail-closed policy,
// gives 503 with Retry-After, not 429, and no error text.
func TestRedisFailClosed(t *testing.T) {
	srv := testkit.StartRedis(t)
	store := newRedisStore(t, srv.Addr, redisstore.FailDeny)
	m := mustNew(t, store, []Limit{{Policy: sluice.GCRA(10, time.Second, 0).Named("per-ip")}}, nil)
	h := m.Handler(okHandler)
	if resp := serve(h, request("192.0.2.1:1")); resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	srv.Kill()
	resp := serve(h, request("192.0.2.1:1"))
	b := body(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with Redis down: %d %s, want 503", resp.StatusCode, b)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q", ra)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(b), &p); err != nil || p["type"] != ProblemReducedCapacity {
		t.Errorf("body = %s", b)
	}
	if strings.Contains(b, srv.Addr) || strings.Contains(strings.ToLower(b), "redis") {
		t.Errorf("the body leaks the failure: %s", b)
	}
}

// The outbound Transport shares one budget across two clients through
// Redis.
func TestRedisTransportSharedBudget(t *testing.T) {
	srv := testkit.StartRedis(t)
	var mu sync.Mutex
	got := 0
	remote := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		mu.Unlock()
	})
	var clients []*http.Client
	for range 2 {
		tr, err := NewTransport(handlerTransport{remote}, newRedisStore(t, srv.Addr, redisstore.FailError), []OutLimit{
			{Policy: sluice.SlidingLog(5, time.Hour).Named("gateway")},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, &http.Client{Transport: tr})
	}
	// 5 requests fit; the sixth would wait about an hour, past the
	// deadline, so it fails at once without being sent.
	for i := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://pay.example/charge", nil)
		resp, err := clients[i%2].Do(req)
		cancel()
		if i < 5 && err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if i == 5 && err == nil {
			resp.Body.Close()
			t.Fatal("the sixth request was sent")
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	if got != 5 {
		t.Errorf("the remote got %d requests, want 5", got)
	}
}
