package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestThreeInstancesInFlight runs three sluice serve processes on one
// private Redis, each a reverse proxy in front of one slow upstream, with
// a concurrency limit of 3 per user. Nine requests of one user are sent at
// once over the three: the upstream holds every request it gets until the
// test lets them go, and counts how many of the user's are inside it. It
// must see exactly 3 at once (never more, and the limit reached), the
// other six must be refused with 429 while those run, and once they end
// their slots are free again on every instance.
func TestThreeInstancesInFlight(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	const limit, requests = 3, 9
	var inside, most atomic.Int64
	hold := make(chan struct{})
	var holdOnce sync.Once
	let := func() { holdOnce.Do(func() { close(hold) }) }
	t.Cleanup(let)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		inside.Add(-1)
		w.Write([]byte("done"))
	}))
	t.Cleanup(up.Close)
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
`+testkit.RedisStoreYAML("inflight:", 2*time.Second, srv.Addr)+fmt.Sprintf(`limits:
  inflight: {algorithm: concurrency, limit: %d, lease: 1m}
proxy:
  upstream: %s
  rules:
    - limits: [{limit: inflight, key: "header:X-User"}]
`, limit, up.URL))
	instances := startInstances(t, 3, "--config", cfg)
	get := func(k int) (int, error) {
		req, err := http.NewRequest("GET", "http://"+instances[k%len(instances)].http+"/work", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-User", "u1")
		resp, _, err := testkit.Fetch(http.DefaultClient, req)
		if err != nil {
			return 0, err
		}
		return resp.StatusCode, nil
	}

	codes := make(chan int, requests)
	for i := range requests {
		go func() {
			code, err := get(i)
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	// The six refusals come back while the three admitted are held.
	refused := 0
	deadline := time.After(waitTimeout)
	for refused < requests-limit {
		select {
		case code := <-codes:
			if code != http.StatusTooManyRequests {
				t.Fatalf("a request answered %d while %d were held upstream, want 429", code, inside.Load())
			}
			refused++
		case <-deadline:
			t.Fatalf("after %v, %d refused and %d inside the upstream; want %d and %d", waitTimeout, refused, inside.Load(), requests-limit, limit)
		}
	}
	testkit.WaitFor(t, waitTimeout, "the admitted requests inside the upstream", func() bool { return inside.Load() == limit })
	let()
	for range limit {
		select {
		case code := <-codes:
			if code != http.StatusOK {
				t.Errorf("an admitted request answered %d, want 200", code)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the admitted requests did not finish")
		}
	}
	if m := most.Load(); m != limit {
		t.Errorf("the upstream saw %d of the user's requests at once, want exactly %d", m, limit)
	}
	// Their slots are free again, on every instance.
	for k := range instances {
		if code, err := get(k); err != nil || code != http.StatusOK {
			t.Errorf("instance %d after the releases: %d, %v; want 200", k+1, code, err)
		}
	}
}
