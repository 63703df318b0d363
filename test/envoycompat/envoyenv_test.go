package envoycompat

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

// configMapDir lays files out under dir as Kubernetes mounts a ConfigMap:
// each file a link to ..data/NAME, ..data a link to a timestamped folder
// that holds the files. Envoy Gateway's deployment reads such a folder
// with RUNTIME_IGNOREDOTFILES=true.
func configMapDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	stamp := "..2026_01_01_00_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		testkit.WriteFile(t, filepath.Join(dir, stamp, name), content)
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// runtimeFiles returns every case's domain, copies times, one domain
// document per file, as envoyproxy/ratelimit's runtime directory holds
// them.
func runtimeFiles(t *testing.T, cases []compatCase) map[string]string {
	files := map[string]string{}
	for _, c := range cases {
		if c.config == "" {
			continue
		}
		config := fixture(t, "domains", c.config)
		for n := range copies {
			files[fmt.Sprintf("%s-%d.yaml", c.name, n)] = strings.ReplaceAll(config, "DOMAIN", c.domain(n))
		}
	}
	return files
}

// referenceEnv is the environment of a sluice serve --envoy-env in FILE
// mode, as Envoy Gateway's deployment sets it, on loopback ports that
// the system picks.
func referenceEnv(root string) []string {
	return []string{
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false",
	}
}

// envStores returns the store variables of each store: the memory store
// (BACKEND_TYPE=memory, Sluice's addition) and a private Redis.
func envStores(t *testing.T, f func(t *testing.T, env []string)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, []string{"BACKEND_TYPE=memory"})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		testkit.RequirePrograms(t, "redis-server")
		srv := testkit.StartRedis(t)
		f(t, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "CACHE_KEY_PREFIX=compat:", "REDIS_TIMEOUT=2s"})
	})
}

// startEnvServer runs `sluice serve --envoy-env` with env and nothing
// else in its environment.
func startEnvServer(t *testing.T, name string, env []string) *server {
	t.Helper()
	s := &server{log: &testkit.Log{}}
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(testkit.Sluice(t), "serve", "--envoy-env", "--ready-file", ready, "--watch", "50ms")
	cmd.Env = env
	s.counting = !slices.Contains(env, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
	s.start(t, name, cmd, ready)
	return s
}

// TestCompatibilityEnvoyEnv runs the suite against a service started
// with envoyproxy/ratelimit's environment variables alone, in FILE mode:
// the domains are files of a ConfigMap mounted as Envoy Gateway mounts
// it, under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
//
// It runs twice on each store: with the reference's default counting
// (refused hits counted: the cases' counting answers, the reference's),
// and with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (Sluice's own
// counting, the answers of the suite's other runs).
func TestCompatibilityEnvoyEnv(t *testing.T) {
	envStores(t, func(t *testing.T, storeEnv []string) {
		for _, mode := range []struct{ name, env string }{{"counting", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, {"stop-increment", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}} {
			// Each run its own Redis keys (the last of a name wins).
			env := append(slices.Clone(storeEnv), mode.env, "CACHE_KEY_PREFIX=compat-"+mode.name+":")
			t.Run(mode.name, func(t *testing.T) { compatEnvoyEnv(t, env) })
		}
	})
}

// compatEnvoyEnv runs the suite against a FILE-mode service with the
// reference's environment and extra.
func compatEnvoyEnv(t *testing.T, extra []string) {
	{
		root := t.TempDir()
		configMapDir(t, filepath.Join(root, "ratelimit", "config"), runtimeFiles(t, cases))
		s := startEnvServer(t, "sluice serve --envoy-env", append(referenceEnv(root), extra...))
		resp, err := http.Get("http://" + s.http + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "OK" {
			t.Errorf("GET /healthcheck = %d %q, want 200 OK", resp.StatusCode, body)
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { runCase(t, s, c) })
		}
	}
}

// TestEnvoyEnvReload changes a file of the runtime directory as
// Kubernetes updates a ConfigMap (a new timestamped folder, ..data
// switched to it): the new limit applies, and an invalid file changes
// nothing. From the reference's runtime watch (RUNTIME_WATCH_ROOT=false,
// integration_test.go's TestBasicConfig reload steps).
func TestEnvoyEnvReload(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	doc := func(n int) string {
		return fmt.Sprintf("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)
	}
	configMapDir(t, dir, map[string]string{"reload.yaml": doc(1)})
	s := startEnvServer(t, "sluice serve --envoy-env", append(referenceEnv(root), "BACKEND_TYPE=memory"))
	limitOf := func() uint32 {
		resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: "reload", Descriptors: []*rlscommon.RateLimitDescriptor{testkit.Descriptor("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf(); got != 1 {
		t.Fatalf("limit before the change = %d, want 1", got)
	}
	swap := func(content string) {
		stamp := fmt.Sprintf("..%d", time.Now().UnixNano())
		if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteFile(t, filepath.Join(dir, stamp, "reload.yaml"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(stamp, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(doc(7))
	testkit.WaitFor(t, waitTimeout, "the changed limit", func() bool { return limitOf() == 7 })
	swap("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n")
	testkit.WaitFor(t, waitTimeout, "the refusal in the log", func() bool { return strings.Contains(s.log.String(), "fortnight") })
	if got := limitOf(); got != 7 {
		t.Errorf("limit after an invalid change = %d, want 7 (the running configuration stays)", got)
	}
}

// TestEnvoyEnvMergeDomain loads the reference's two files of one domain
// (test/config/config_test.go TestDomainMerge, merge_domain_key1.yaml
// and merge_domain_key2.yaml): with MERGE_DOMAIN_CONFIG=true both
// descriptors serve; without it the service does not start and names
// both files.
func TestEnvoyEnvMergeDomain(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"key1", "key2"} {
		testkit.WriteFile(t, filepath.Join(dir, f+".yaml"), fixture(t, "merge", f))
	}
	s := startEnvServer(t, "sluice serve --envoy-env", append(referenceEnv(root), "BACKEND_TYPE=memory", "MERGE_DOMAIN_CONFIG=true"))
	for _, c := range []struct {
		key, value string
		limit      uint32
	}{{"key1", "value1", 10}, {"key2", "value2", 20}} {
		resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlscommon.RateLimitDescriptor{testkit.Descriptor(c.key, c.value)}})
		if err != nil || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != c.limit {
			t.Errorf("%s=%s: %v, %v; want the limit %d", c.key, c.value, resp, err, c.limit)
		}
	}
	cmd := exec.Command(testkit.Sluice(t), "serve", "--envoy-env")
	cmd.Env = append(referenceEnv(root), "BACKEND_TYPE=memory")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `domain "test-domain" is also configured in `+filepath.Join(dir, "key1.yaml")) {
		t.Errorf("without MERGE_DOMAIN_CONFIG: %v\n%s\nwant a refusal naming both files", err, out)
	}
}
