package envoycompat

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// burst sends n requests of descs to s at once and returns how many were
// answered OK and OVER_LIMIT.
func burst(t *testing.T, s *server, domain string, n int, descs ...*rlscommon.RateLimitDescriptor) (okN, overN int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case resp.GetOverallCode() == OK:
				okN++
			default:
				overN++
			}
		})
	}
	wg.Wait()
	return okN, overN
}

// TestCompatibilityConcurrent sends requests at once, as the reference's
// integration test does (test/integration/integration_test.go
// testBasicBaseConfig, in its concurrent form of 2026: 25 requests
// against 20 per unit are 20 OK and 5 OVER_LIMIT; 15 requests of two
// descriptors against 20 and 10 are 10 and 5), on each store, with
// Sluice's counting (sluice.yaml) and the reference's (--envoy-env).
// The limits are per hour where the reference's are per minute, and the
// bursts start at least 5 s before the hour ends, so that no window ends
// during them.
func TestCompatibilityConcurrent(t *testing.T) {
	doc := strings.ReplaceAll(fixture(t, "domains", "concurrent"), "DOMAIN", "another")
	check := func(t *testing.T, s *server) {
		waitEarlyInWindow(time.Hour)
		if ok, over := burst(t, s, "another", 25, d("key2", "r1")); ok != 20 || over != 5 {
			t.Errorf("25 at once against 20: %d OK, %d OVER_LIMIT; want 20 and 5", ok, over)
		}
		if ok, over := burst(t, s, "another", 15, d("key2", "r2"), d("key3", "r2")); ok != 10 || over != 5 {
			t.Errorf("15 at once against 20 and 10: %d OK, %d OVER_LIMIT; want 10 and 5", ok, over)
		}
	}
	t.Run("sluice.yaml", func(t *testing.T) {
		stores(t, func(t *testing.T, storeYAML string) {
			var b strings.Builder
			b.WriteString("envoy:\n")
			for i, l := range strings.Split(strings.Trim(doc, "\n"), "\n") {
				if i == 0 {
					b.WriteString("  - " + l + "\n")
				} else {
					b.WriteString("    " + l + "\n")
				}
			}
			check(t, startServer(t, "sluice serve", serverConfig(storeYAML, b.String())))
		})
	})
	t.Run("envoy-env", func(t *testing.T) {
		envStores(t, func(t *testing.T, storeEnv []string) {
			root := t.TempDir()
			configMapDir(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"another.yaml": doc})
			check(t, startEnvServer(t, "sluice serve --envoy-env", append(referenceEnv(root), storeEnv...)))
		})
	})
}
