package e2e

import (
	"context"
	"encoding/json"
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
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// RequireNginxEnv is the environment variable that turns a missing nginx
// into a test failure instead of a skip.
const RequireNginxEnv = "SLUICE_REQUIRE_NGINX"

// requireNginx finds nginx, also in /usr/sbin, where Debian installs it
// and a user's PATH may not look.
func requireNginx(t *testing.T) string {
	t.Helper()
	return requireProgram(t, "nginx", RequireNginxEnv, "/usr/sbin/nginx")
}

// requireProgram returns the path of the program name, on PATH or at one
// of the paths also; when there is none it skips t with how to install
// the program, or fails t when the environment variable env is 1.
func requireProgram(t *testing.T, name, env string, also ...string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	for _, p := range also {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found on PATH: install it with `apt-get install %s` (Debian/Ubuntu; scripts/deps.sh does); set %s=1 to make this a failure", name, name, env)
	if os.Getenv(env) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// nginxConf wraps locations in a server on a loopback port, in an nginx
// that runs in the foreground as one process (so as root it keeps its
// user and needs no `user` line), logs to standard error and keeps its
// pid and temporary files in dir.
func nginxConf(port int, dir, locations string) string {
	var temp strings.Builder
	for _, k := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&temp, "    %s_temp_path %s;\n", k, filepath.Join(dir, k))
	}
	return fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %s;
error_log stderr notice;
events { worker_connections 64; }
http {
    access_log off;
%s    server {
        listen 127.0.0.1:%d;
%s
    }
}
`, filepath.Join(dir, "nginx.pid"), temp.String(), port, locations)
}

// startNginx runs nginx with the given locations on a free port (see
// startGateway) and returns the port.
func startNginx(t *testing.T, bin, name, locations string) int {
	t.Helper()
	return startGateway(t, name, func(dir string, port int) *exec.Cmd {
		conf := testkit.WriteFile(t, filepath.Join(dir, "nginx.conf"), nginxConf(port, dir, locations))
		// -e: the log of the start, before the configuration is read
		// (by default a file under /var/log that may not be writable).
		return exec.Command(bin, "-p", dir, "-c", conf, "-e", "stderr")
	})
}

// startGateway runs the command that command returns for a directory of
// its own and a free port, and waits until it accepts connections on the
// port; it tries a few ports, in case another process takes one first. It
// returns the port.
func startGateway(t *testing.T, name string, command func(dir string, port int) *exec.Cmd) int {
	t.Helper()
	for attempt := range 3 {
		dir := t.TempDir()
		port := testkit.FreePort(t)
		p := startProc(t, fmt.Sprintf("%s (attempt %d)", name, attempt+1), command(dir, port))
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		accepts := false
		testkit.WaitFor(t, waitTimeout, name+" to accept connections on "+addr+" or end", func() bool {
			// Connect only: a request would be counted by the limit.
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				accepts = true
			}
			return accepts || p.Exited()
		})
		if accepts {
			return port
		}
		t.Logf("%s ended at start (%v); trying another port\n%s", name, p.Err(), p.log)
	}
	t.Fatalf("%s did not start in 3 attempts", name)
	return 0
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address local (any of 127.0.0.0/8 works on Linux), so that
// nginx sees distinct clients.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
		},
	}
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   string
}

// get sends GET url with the header fields kv (name, value, ...).
func get(t *testing.T, c *http.Client, url string, kv ...string) answer {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, b := testkit.DoHTTP(t, c, req)
	return answer{resp.StatusCode, resp.Header, b}
}

// problem is the part of an RFC 9457 body the tests look at.
type problem struct {
	Type       string   `json:"type"`
	Status     int      `json:"status"`
	RetryAfter int      `json:"retry-after"`
	Violated   []string `json:"violated-policies"`
}

// checkLimited checks that a is Sluice's 429 for the documented
// per-client limit, carried through the gateway.
func checkLimited(t *testing.T, what string, a answer) {
	t.Helper()
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if a.status != 429 || err != nil || ra < 1 || ra > 60 {
		t.Errorf("%s = %d, Retry-After %q; want 429 with 1 to 60 seconds\n%s", what, a.status, a.header.Get("Retry-After"), a.body)
	}
	if got := a.header.Get("RateLimit"); !strings.HasPrefix(got, `"per-client";r=0;t=`) {
		t.Errorf("%s: RateLimit = %q, want per-client with 0 remaining", what, got)
	}
	if got, want := a.header.Get("RateLimit-Policy"), `"per-client";q=2;w=60`; got != want {
		t.Errorf("%s: RateLimit-Policy = %q, want %q", what, got, want)
	}
	var p problem
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal([]byte(a.body), &p) != nil {
		t.Errorf("%s: Content-Type %q, body %q; want Sluice's problem+json", what, ct, a.body)
		return
	}
	if p.Status != 429 || p.RetryAfter != ra || len(p.Violated) != 1 || p.Violated[0] != "per-client" ||
		!strings.HasSuffix(p.Type, "#quota-exceeded") {
		t.Errorf("%s: body %s; want status 429, retry-after %d (as the field) and violated-policies [per-client]", what, a.body, ra)
	}
}

// startUpstream starts the upstream of the gateway tests: it answers
// "upstream PATH" and counts the requests that reach it.
func startUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	hits := new(atomic.Int64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	return up, hits
}

// startDocSluice starts the sluice binary with the configuration of
// docs/configuration.md's gateway section.
func startDocSluice(t *testing.T, docs gatewayDocs) *sluice {
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), docConfig(t, docs))
	return startSluice(t, "sluice", "--config", cfg)
}

// checkAdmitted sends the first two requests of client to base (via names
// the gateway in messages): both reach the upstream, and their responses
// carry the RateLimit fields of the page's two-per-minute limit.
func checkAdmitted(t *testing.T, via string, client *http.Client, base string) {
	t.Helper()
	for i := range 2 {
		a := get(t, client, fmt.Sprintf("%s/items/%d", base, i))
		if want := fmt.Sprintf("upstream /items/%d", i); a.status != 200 || a.body != want {
			t.Errorf("request %d%s = %d %q, want 200 %q", i, via, a.status, a.body, want)
		}
		if got, want := a.header.Get("RateLimit"), fmt.Sprintf(`"per-client";r=%d;t=60`, 1-i); got != want {
			t.Errorf("request %d: RateLimit = %q, want %q", i, got, want)
		}
		if got, want := a.header.Get("RateLimit-Policy"), `"per-client";q=2;w=60`; got != want {
			t.Errorf("request %d: RateLimit-Policy = %q, want %q", i, got, want)
		}
	}
}

// TestNginxAuthRequest runs the nginx snippet of docs/configuration.md,
// taken from the page, in a real nginx in front of a test upstream and
// the sluice binary with the page's configuration: two requests from one
// client reach the upstream with their RateLimit fields, the third gets
// Sluice's 429 (Retry-After, RateLimit fields, problem+json body), and an
// X-Forwarded-For the client writes does not move it to another bucket.
// With Sluice stopped, the snippet as written lets requests through (fail
// open) and without its fail-open line answers 503 (fail closed); and a
// Sluice that has no such rule (404) gets the 503 even from the fail-open
// snippet.
func TestNginxAuthRequest(t *testing.T) {
	t.Parallel()
	bin := requireNginx(t)
	docs := loadGatewayDocs(t)
	up, hits := startUpstream(t)
	s := startDocSluice(t, docs)
	locations := func(sluiceAddr string) string {
		l := replace(t, "nginx snippet", docs.nginx, docSluiceAddr, sluiceAddr)
		return replace(t, "nginx snippet", l, docUpstreamAddr, strings.TrimPrefix(up.URL, "http://"))
	}
	open := startNginx(t, bin, "nginx (fail open)", locations(s.http))
	base := fmt.Sprintf("http://127.0.0.1:%d", open)

	alice := clientFrom("127.0.0.1")
	checkAdmitted(t, "", alice, base)
	checkLimited(t, "request 2", get(t, alice, base+"/items/2"))
	// The client's own X-Forwarded-For does not choose its bucket...
	checkLimited(t, "request 3 with a forged X-Forwarded-For", get(t, alice, base+"/items/3", "X-Forwarded-For", "203.0.113.7"))
	// ...while another client has its own.
	if a := get(t, clientFrom("127.0.0.2"), base+"/items/4"); a.status != 200 {
		t.Errorf("another client's first request = %d %q, want 200", a.status, a.body)
	}
	if got := hits.Load(); got != 3 {
		t.Errorf("the upstream saw %d requests, want 3 (the refused ones never reach it)", got)
	}

	// Sluice stopped: the snippet as written fails open...
	s.Signal(syscall.SIGTERM)
	if !s.Wait(stopTimeout) {
		t.Fatalf("sluice did not stop within %v of SIGTERM", stopTimeout)
	}
	if a := get(t, alice, base+"/items/5"); a.status != 200 || a.body != "upstream /items/5" {
		t.Errorf("fail open, Sluice stopped: %d %q, want the upstream's 200", a.status, a.body)
	}
	// ...and without its fail-open line, fails closed.
	var kept []string
	for line := range strings.SplitSeq(locations(s.http), "\n") {
		if !strings.Contains(line, "# fail open") {
			kept = append(kept, line)
		}
	}
	if len(kept) != strings.Count(docs.nginx, "\n") {
		t.Fatalf("the nginx snippet has no single line marked \"# fail open\":\n%s", docs.nginx)
	}
	closed := startNginx(t, bin, "nginx (fail closed)", strings.Join(kept, "\n"))
	checkUnavailable(t, "fail closed, Sluice stopped", get(t, alice, fmt.Sprintf("http://127.0.0.1:%d/items/6", closed)))

	// A Sluice without the rule the snippet names answers 404, and the
	// client gets the 503 even from the fail-open snippet.
	cfg2 := testkit.WriteFile(t, filepath.Join(t.TempDir(), "other.yaml"), replace(t, "Sluice configuration", docConfig(t, docs), "name: api", "name: other"))
	s2 := startSluice(t, "sluice (no rule api)", "--config", cfg2)
	norule := startNginx(t, bin, "nginx (no rule)", locations(s2.http))
	checkUnavailable(t, "fail open, no rule api", get(t, alice, fmt.Sprintf("http://127.0.0.1:%d/items/7", norule)))
	if got := hits.Load(); got != 4 {
		t.Errorf("the upstream saw %d requests, want 4", got)
	}
}

// checkUnavailable checks that a is the snippet's 503.
func checkUnavailable(t *testing.T, what string, a answer) {
	t.Helper()
	var p problem
	if a.status != 503 || a.header.Get("Retry-After") != "1" || a.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(a.body), &p) != nil || p.Status != 503 || !strings.HasSuffix(p.Type, "#temporary-reduced-capacity") {
		t.Errorf("%s: %d, Retry-After %q, Content-Type %q, body %q; want 503 with Retry-After 1 and a problem+json body",
			what, a.status, a.header.Get("Retry-After"), a.header.Get("Content-Type"), a.body)
	}
}
