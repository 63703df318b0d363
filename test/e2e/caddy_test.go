package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// RequireCaddyEnv is the environment variable that turns a missing caddy
// into a test failure instead of a skip.
const RequireCaddyEnv = "SLUICE_REQUIRE_CADDY"

func requireCaddy(t *testing.T) string {
	t.Helper()
	return requireProgram(t, "caddy", RequireCaddyEnv)
}

// caddyfile puts the Caddyfile snippet of docs/configuration.md (its
// site example.com, Sluice's forward-auth in front of an upstream) on a
// loopback port, with no admin endpoint, no TLS and its storage in dir.
func caddyfile(t *testing.T, snippet string, port int, sluiceAddr, upstream, dir string) string {
	t.Helper()
	site := replace(t, "Caddyfile", snippet, "example.com {", fmt.Sprintf("http://127.0.0.1:%d {", port))
	site = replace(t, "Caddyfile", site, docSluiceAddr, sluiceAddr)
	site = replace(t, "Caddyfile", site, docUpstreamAddr, strings.TrimPrefix(upstream, "http://"))
	return fmt.Sprintf(`{
	admin off
	auto_https off
	storage file_system {
		root %s
	}
}

%s`, filepath.Join(dir, "storage"), site)
}

// startCaddy runs caddy with a Caddyfile from caddyfile on a free port
// (see startGateway) and returns the port.
func startCaddy(t *testing.T, bin, snippet, sluiceAddr, upstream string) int {
	t.Helper()
	return startGateway(t, "caddy", func(dir string, port int) *exec.Cmd {
		cf := testkit.WriteFile(t, filepath.Join(dir, "Caddyfile"), caddyfile(t, snippet, port, sluiceAddr, upstream, dir))
		cmd := exec.Command(bin, "run", "--config", cf, "--adapter", "caddyfile")
		// Caddy keeps files under $HOME and the XDG directories: keep
		// them in the test's directory.
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		return cmd
	})
}

// TestCaddyForwardAuth runs the Caddyfile snippet of
// docs/configuration.md, taken from the page, in a real Caddy in front of
// an upstream, with forward_auth asking the sluice binary with the page's
// configuration: two requests from one client reach the upstream and
// their responses carry the RateLimit fields (copy_headers, header_down),
// the third gets Sluice's 429 (Retry-After, RateLimit fields,
// problem+json body), an X-Forwarded-For the client writes does not move
// it to another bucket, and the refused requests never reach the
// upstream.
func TestCaddyForwardAuth(t *testing.T) {
	t.Parallel()
	bin := requireCaddy(t)
	docs := loadGatewayDocs(t)
	up, hits := startUpstream(t)
	s := startDocSluice(t, docs)
	port := startCaddy(t, bin, docs.caddy, s.http, up.URL)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	client := clientFrom("127.0.0.1")
	checkAdmitted(t, " through caddy", client, base)
	checkLimited(t, "request 2 through caddy", get(t, client, base+"/items/2"))
	checkLimited(t, "request 3 with a forged X-Forwarded-For", get(t, client, base+"/items/3", "X-Forwarded-For", "203.0.113.7"))
	if got := hits.Load(); got != 2 {
		t.Errorf("the upstream saw %d requests, want 2", got)
	}
}
