package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
)

// RequireCaddyEnv is the environment variable that turns a missing caddy
// into a test failure instead of a skip.
const RequireCaddyEnv = "SLUICE_REQUIRE_CADDY"

func requireCaddy(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("caddy")
	if err != nil {
		msg := fmt.Sprintf("caddy not found on PATH: install it with `apt-get install caddy` (Debian/Ubuntu; scripts/deps.sh does); set %s=1 to make this a failure", RequireCaddyEnv)
		if os.Getenv(RequireCaddyEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// caddyfile puts Sluice's forward-auth in front of upstream, on a
// loopback port, with no admin endpoint, no TLS and its storage in dir.
func caddyfile(port int, sluiceAddr, upstream, dir string) string {
	return fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system {
		root %s
	}
}

http://127.0.0.1:%d {
	forward_auth %s {
		uri /v1/forward-auth?rule=api
	}
	reverse_proxy %s
}
`, filepath.Join(dir, "storage"), port, sluiceAddr, strings.TrimPrefix(upstream, "http://"))
}

// startCaddy runs caddy with a Caddyfile from caddyfile on a free port
// and waits until it accepts connections; it tries a few ports, in case
// another process takes one first. It returns the port.
func startCaddy(t *testing.T, bin, sluiceAddr, upstream string) int {
	t.Helper()
	for attempt := range 3 {
		dir := t.TempDir()
		port := proctest.FreePort(t)
		cf := proctest.WriteFile(t, filepath.Join(dir, "Caddyfile"), caddyfile(port, sluiceAddr, upstream, dir))
		cmd := exec.Command(bin, "run", "--config", cf, "--adapter", "caddyfile")
		// Caddy keeps files under $HOME and the XDG directories: keep
		// them in the test's directory.
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		p := startProc(t, fmt.Sprintf("caddy (attempt %d)", attempt+1), cmd)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(waitTimeout)
		for !p.exited() && time.Now().Before(deadline) {
			// Connect only: a request would be counted by the limit.
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				return port
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !p.exited() {
			t.Fatalf("caddy does not accept connections on %s within %v\n%s", addr, waitTimeout, p.log)
		}
		t.Logf("caddy ended at start (%v); trying another port\n%s", p.err, p.log)
	}
	t.Fatalf("caddy did not start in 3 attempts")
	return 0
}

// TestCaddyForwardAuth puts a real Caddy in front of an upstream, with
// forward_auth asking the sluice binary: a client sees 200s while the
// limit lasts, then 429 with Retry-After, and the refused requests never
// reach the upstream.
func TestCaddyForwardAuth(t *testing.T) {
	t.Parallel()
	bin := requireCaddy(t)
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(up.Close)

	dir := t.TempDir()
	cfg := proctest.WriteFile(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  per-ip: {algorithm: sliding_log, limit: 3, period: 1h}
proxy:
  trusted_proxies: [127.0.0.1/32]
  rules:
    - name: api
      limits: [{limit: per-ip, key: ip}]
`)
	s := startSluice(t, "sluice", "--config", cfg)
	port := startCaddy(t, bin, s.http, up.URL)

	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 4 {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/items/%d", port, i))
		if err != nil {
			t.Fatalf("request %d through caddy: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i < 3 {
			if want := fmt.Sprintf("upstream /items/%d", i); resp.StatusCode != 200 || string(body) != want {
				t.Errorf("request %d through caddy = %d %q, want 200 %q", i, resp.StatusCode, body, want)
			}
			continue
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || err != nil || ra < 1 || ra > 3600 {
			t.Errorf("request %d through caddy = %d, Retry-After %q; want 429 with 1 to 3600 seconds", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(string(body), `"status":429`) {
			t.Errorf("request %d: Content-Type %q, body %s; want Sluice's problem+json", i, ct, body)
		}
		if rl := resp.Header.Get("RateLimit"); !strings.HasPrefix(rl, `"per-ip";r=0;`) {
			t.Errorf("request %d: RateLimit = %q, want per-ip with 0 remaining", i, rl)
		}
	}
	if got := hits.Load(); got != 3 {
		t.Errorf("the upstream saw %d requests, want 3", got)
	}
}
