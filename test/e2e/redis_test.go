package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestThreeInstancesOneRedis runs three sluice serve processes on one
// private Redis; a client spreads requests over all three, concurrently,
// and exactly the limit is admitted in total. The token bucket refills one
// unit every 3 minutes, so no refill lands within the test.
func TestThreeInstancesOneRedis(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	const limit, requests, workers = 20, 90, 9
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
`+testkit.RedisStoreYAML("e2e:", 2*time.Second, srv.Addr)+fmt.Sprintf(`limits:
  shared: {algorithm: token_bucket, limit: %d, period: 1h}
`, limit))
	instances := startInstances(t, 3, "--config", cfg)

	var mu sync.Mutex
	allowed := make([]int, len(instances))
	denied := 0
	var wg sync.WaitGroup
	next := make(chan int, requests)
	for i := range requests {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for i := range next {
				k := i % len(instances)
				body, err := instances[k].decide("shared", "client-1")
				mu.Lock()
				switch {
				case err != nil:
					t.Error(err)
				case strings.Contains(body, "degraded"):
					t.Errorf("instance %d: a degraded decision with Redis up: %s", k+1, body)
				case strings.HasPrefix(body, `{"allowed":true,`):
					allowed[k]++
				case strings.HasPrefix(body, `{"allowed":false,`):
					denied++
				default:
					t.Errorf("instance %d: answer %s", k+1, body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range allowed {
		total += n
	}
	t.Logf("admitted per instance: %v; denied: %d", allowed, denied)
	if total != limit || denied != requests-limit {
		t.Errorf("admitted %d and denied %d of %d requests over three instances, want %d and %d", total, denied, requests, limit, requests-limit)
	}
	// Every instance reads the same state: each reports the key spent.
	for k, in := range instances {
		if body := in.check(t, "shared", "client-1"); !strings.HasPrefix(body, `{"allowed":false,"limit":20,"remaining":0,`) {
			t.Errorf("instance %d after the run: %s, want denied with 0 remaining", k+1, body)
		}
	}
}

// TestThreeInstancesShareABlock runs three sluice serve processes on one
// private Redis with a limit that has a penalty: an offence on one blocks
// the key on all three (a flood on them changes nothing, their answers
// count down to the same end), and an operator's unblock through any of
// them lets the key in on every one.
func TestThreeInstancesShareABlock(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	const token = "e2e-admin-token-0123456789abcdef"
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
`+testkit.RedisStoreYAML("e2e-block:", 2*time.Second, srv.Addr)+fmt.Sprintf(`admin: {token: %s}
limits:
  guarded:
    algorithm: token_bucket
    limit: 1
    period: 1h
    penalty: {block_for: 2h, factor: 2, forget_after: 24h}
`, token))
	in := startInstances(t, 3, "--config", cfg)
	if body := in[0].check(t, "guarded", "mallory"); !strings.HasPrefix(body, `{"allowed":true,`) {
		t.Fatalf("instance 1, first check: %s, want allowed", body)
	}
	// The offence, on instance 2: a block of two hours, past the bucket's
	// own hour.
	retryOf := func(body string) int64 {
		var ms int64
		if i := strings.Index(body, `"retry_after_ms":`); i >= 0 {
			fmt.Sscanf(body[i+len(`"retry_after_ms":`):], "%d", &ms)
		}
		return ms
	}
	body := in[1].check(t, "guarded", "mallory")
	if !strings.HasPrefix(body, `{"allowed":false,`) || retryOf(body) < 7_100_000 || retryOf(body) > 7_200_000 {
		t.Fatalf("instance 2, the offence: %s, want refused for the block of 2h", body)
	}
	for k := range 3 {
		for range 5 {
			body := in[k].check(t, "guarded", "mallory")
			if r := retryOf(body); !strings.HasPrefix(body, `{"allowed":false,`) || r < 7_100_000 || r > 7_200_000 {
				t.Fatalf("instance %d during the block: %s, want the same block of 2h (not a new one of 4h)", k+1, body)
			}
		}
	}
	req, err := http.NewRequest("POST", "http://"+in[2].http+"/v1/unblock/guarded/mallory", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, b, err := testkit.Fetch(http.DefaultClient, req)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), `"was_blocked":true`) {
		t.Fatalf("unblock through instance 3: %v %v %s", resp, err, b)
	}
	// Instance 1 holds the block in its local refusals until it hears the
	// unblock on the refund channel: poll with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := in[0].check(t, "guarded", "mallory")
		if strings.HasPrefix(body, `{"allowed":true,`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance 1 still refuses mallory 10s after the unblock: %s", body)
		}
	}
}
