package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q], prefix: "e2e:"}
  timeout: 2s
  on_error: error
limits:
  shared: {algorithm: token_bucket, limit: %d, period: 1h}
`, srv.Addr, limit))
	var instances []*sluice
	for i := range 3 {
		instances = append(instances, startSluice(t, fmt.Sprintf("sluice %d", i+1), "--config", cfg))
	}

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
