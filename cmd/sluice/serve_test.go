package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// waitTimeout bounds every wait of these tests for the service.
const waitTimeout = 15 * time.Second

// instance is a sluice serve running in-process, started by startServe.
type instance struct {
	http, grpc string // bound addresses, host:port
	admin      string // the admin listener's, when the configuration has one
	readyFile  string
	// auth, when not empty, is the Authorization header do sends.
	auth    string
	stderr  *testkit.Log
	cancel  context.CancelFunc
	done    chan error
	stopped bool
	err     error
}

// startServe runs `sluice serve` with args (and a --ready-file) in-process
// and waits until it listens. The service stops when the test ends.
func startServe(t *testing.T, args ...string) *instance {
	t.Helper()
	in := &instance{
		readyFile: filepath.Join(t.TempDir(), "ready.json"),
		stderr:    &testkit.Log{},
		done:      make(chan error, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	args = append([]string{"serve", "--ready-file", in.readyFile}, args...)
	go func() { in.done <- run(ctx, args, strings.NewReader(""), io.Discard, in.stderr) }()
	t.Cleanup(func() {
		if !in.stopped {
			if err := in.stop(t); err != nil {
				t.Errorf("sluice serve ended with %v\n%s", err, in.stderr)
			}
		}
	})
	deadline := time.Now().Add(waitTimeout)
	for {
		b, err := os.ReadFile(in.readyFile)
		if err == nil {
			var ri readyInfo
			if err := json.Unmarshal(b, &ri); err != nil {
				t.Fatalf("ready file %s holds %q: %v", in.readyFile, b, err)
			}
			in.http, in.grpc, in.admin = ri.HTTP, ri.GRPC, ri.Admin
			return in
		}
		select {
		case err := <-in.done:
			in.stopped, in.err = true, err
			t.Fatalf("sluice %q ended before listening: %v\n%s", args, err, in.stderr)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice %q wrote no ready file within %v\n%s", args, waitTimeout, in.stderr)
		}
	}
}

// stop cancels the service's context, as SIGTERM does, and returns what
// run returned.
func (in *instance) stop(t *testing.T) error {
	t.Helper()
	if in.stopped {
		return in.err
	}
	in.cancel()
	select {
	case in.err = <-in.done:
	case <-time.After(waitTimeout):
		t.Fatalf("sluice serve did not stop within %v\n%s", waitTimeout, in.stderr)
	}
	in.stopped = true
	return in.err
}

// url returns the service's URL for path.
func (in *instance) url(path string) string { return "http://" + in.http + path }

// do sends a request to the service and returns the status, the headers
// and the body.
func (in *instance) do(t *testing.T, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, in.url(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if in.auth != "" {
		req.Header.Set("Authorization", in.auth)
	}
	resp, b := testkit.DoHTTP(t, http.DefaultClient, req)
	return resp.StatusCode, resp.Header, b
}

// check asks POST /v1/check for one decision and returns status and body.
func (in *instance) check(t *testing.T, limit, key string) (int, string) {
	t.Helper()
	code, _, body := in.do(t, "POST", "/v1/check", fmt.Sprintf(`{"limit":%q,"key":%q}`, limit, key))
	return code, body
}

// metric returns the value of the sample of /metrics whose name and
// labels are series, such as `sluice_decisions_total{limit="a",outcome="allowed"}`,
// and "" when there is none.
func (in *instance) metric(t *testing.T, series string) string {
	t.Helper()
	code, _, body := in.do(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	v, _ := testkit.SeriesValue(body, series)
	return v
}

// writeConfig writes a configuration file at path, in place (truncated,
// then written, as many editors do), and returns path.
var writeConfig = testkit.WriteFile

func TestServeDefaultConfig(t *testing.T) {
	t.Parallel()
	in := startServe(t, "--http", "127.0.0.1:0")
	code, body := in.check(t, "demo", "alice")
	if want := `{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":6000}` + "\n"; code != 200 || body != want {
		t.Errorf("POST /v1/check demo alice = %d %q, want 200 %q", code, body, want)
	}
	for path, want := range map[string]string{
		"/healthz": `{"status":"ok"}`,
		"/readyz":  `"status":"ready"`,
	} {
		if code, _, body := in.do(t, "GET", path, ""); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d %q, want 200 with %s", path, code, body, want)
		}
	}
	for series, want := range map[string]string{
		`sluice_decisions_total{limit="demo",outcome="allowed"}`: "1",
		`sluice_decisions_total{limit="demo",outcome="denied"}`:  "0",
		`sluice_config_limits`:                "1",
		`sluice_config_reload_failures_total`: "0",
		`sluice_store_keys`:                   "1",
	} {
		if got := in.metric(t, series); got != want {
			t.Errorf("metric %s = %q, want %q", series, got, want)
		}
	}
	if in.metric(t, "go_goroutines") == "" || in.metric(t, "process_open_fds") == "" {
		t.Errorf("/metrics lacks the Go and process collectors")
	}
	if want := "msg=listening protocol=http addr=" + in.http; !strings.Contains(in.stderr.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, in.stderr)
	}
	if err := in.stop(t); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := os.Stat(in.readyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready file outlives the service: %v", err)
	}
	testkit.WantAll(t, "log", in.stderr.String(), "msg=\"shutting down\"", "msg=stopped")
}

// TestServeJSONLogs checks that --log-format json writes one JSON object
// per line, the listening addresses among them.
func TestServeJSONLogs(t *testing.T) {
	t.Parallel()
	in := startServe(t, "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	in.check(t, "demo", "bob")
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.SplitSeq(strings.TrimSpace(in.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line %q is not JSON: %v", line, err)
			continue
		}
		if rec["msg"] == "listening" && rec["protocol"] == "http" && rec["addr"] == in.http {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON log line says the service listens on %s:\n%s", in.http, in.stderr)
	}
}

// badConfig has three problems, on lines 6, 8 and 12.
const badConfig = `listen:
  http: 127.0.0.1:0
limits:
  api-key:
    algorithm: token_bucket
    limit: -3
    period: 1s
    burst: -1
proxy:
  rules:
    - limits:
        - {limit: apikey, key: ip}
`

var badConfigProblems = []string{
	`:6: limits.api-key.limit: `,
	`:8: limits.api-key.burst: `,
	`:12: proxy.rules[0].limits[0].limit: no limit named "apikey"`,
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := writeConfig(t, filepath.Join(dir, "bad.yaml"), badConfig)
	r := runSluice(t, nil, "serve", "--config", bad)
	if r.code != 1 {
		t.Fatalf("sluice serve --config bad.yaml: exit %d, want 1\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != len(badConfigProblems)+1 {
		t.Fatalf("stderr has %d lines, want one per problem and a summary:\n%s", len(lines), r.stderr)
	}
	for i, want := range badConfigProblems {
		if !strings.HasPrefix(lines[i], bad+want) {
			t.Errorf("stderr line %d = %q, want it to start with %q", i+1, lines[i], bad+want)
		}
	}
	if want := "sluice: serve: " + bad + " has 3 problems; the service did not start"; lines[3] != want {
		t.Errorf("last line = %q, want %q", lines[3], want)
	}

	r = runSluice(t, nil, "serve", "--config", filepath.Join(dir, "missing.yaml"))
	if r.code != 1 || !strings.Contains(r.stderr, "missing.yaml: no such file or directory") {
		t.Errorf("serve with a missing file: exit %d, stderr %q; want 1 and the file named", r.code, r.stderr)
	}
}

func TestServeListenError(t *testing.T) {
	t.Parallel()
	in := startServe(t, "--http", "127.0.0.1:0")
	r := runSluice(t, nil, "serve", "--http", in.http)
	if r.code != 1 || !strings.Contains(r.stderr, "sluice: serve: listen.http: listen tcp "+in.http) {
		t.Errorf("serve on a taken port: exit %d, stderr %q; want 1 and the address", r.code, r.stderr)
	}
	r = runSluice(t, nil, "serve", "--http", "127.0.0.1:0", "--grpc", in.http)
	if r.code != 1 || !strings.Contains(r.stderr, "sluice: serve: listen.grpc: listen tcp "+in.http) {
		t.Errorf("serve with gRPC on a taken port: exit %d, stderr %q; want 1 and the address", r.code, r.stderr)
	}
}

func TestServeFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"argument", []string{"sluice.yaml"}, `serve: unexpected argument "sluice.yaml" (flags only; the file is --config FILE)`},
		{"log format", []string{"--log-format", "xml"}, `serve: --log-format must be text or json, got "xml"`},
		{"log level", []string{"--log-level", "loud"}, `serve: --log-level: unknown level "loud" (want debug, info, warn or error)`},
		{"negative watch", []string{"--watch", "-1s"}, `serve: --watch must not be negative, got -1s`},
		{"negative shutdown", []string{"--shutdown-timeout", "-1s"}, `serve: --shutdown-timeout must not be negative`},
		{"negative max keys", []string{"--max-keys", "-1"}, `serve: --max-keys must not be negative, got -1`},
		{"negative header timeout", []string{"--read-header-timeout", "-1s"}, `serve: --read-header-timeout must not be negative, got -1s`},
		{"no header timeout", []string{"--read-header-timeout", "0"}, `serve: --read-header-timeout must be positive`},
		{"no idle timeout", []string{"--idle-timeout", "0"}, `serve: --idle-timeout must be positive`},
		{"negative check read timeout", []string{"--check-read-timeout", "-1s"}, `serve: --check-read-timeout must not be negative, got -1s`},
		{"no decision log size", []string{"--decision-log-max-size", "0"}, `serve: --decision-log-max-size must be 1 to 1048576 (MiB), got 0`},
		{"huge decision log size", []string{"--decision-log-max-size", "17592186044416"}, `serve: --decision-log-max-size must be 1 to 1048576 (MiB), got 17592186044416`},
		{"too many decision log files", []string{"--decision-log-files", "1001"}, `serve: --decision-log-files must be 1 to 1000, got 1001`},
		{"http address", []string{"--http", "8080"}, `serve: --http: "8080" is not an address host:port`},
		{"grpc address", []string{"--grpc", "localhost"}, `serve: --grpc: "localhost" is not an address host:port`},
		{"unknown flag", []string{"--port", "1"}, "sluice: serve: unknown flag --port\n"},
		{"misspelt flag", []string{"--htttp", ":8080"}, "sluice: serve: unknown flag --htttp; did you mean --http?\n"},
		{"misspelt flag, one dash", []string{"-confg=x.yaml"}, "sluice: serve: unknown flag -confg; did you mean --config?\n"},
		{"duration without unit", []string{"--watch", "5"}, `sluice: serve: --watch "5": a duration needs a unit, such as 5s, 5m or 5ms` + "\n"},
		{"bad duration", []string{"--watch", "soon"}, `sluice: serve: --watch "soon": not a duration (Go syntax: 250ms, 1s, 1m, 24h)` + "\n"},
		{"bad number", []string{"--max-keys", "lots"}, `sluice: serve: --max-keys "lots": not a whole number` + "\n"},
		{"no value", []string{"--config"}, "sluice: serve: --config needs a value\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runSluice(t, nil, append([]string{"serve"}, tt.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("sluice serve %q: exit %d, stderr %q; want 2 and %q", tt.args, r.code, r.stderr, tt.want)
			}
			// The flag package's findings are one line, and nothing else.
			if strings.HasPrefix(tt.want, "sluice: ") && r.stderr != tt.want {
				t.Errorf("sluice serve %q: stderr %q, want exactly %q", tt.args, r.stderr, tt.want)
			}
		})
	}
}

// TestEveryCommandUsage checks that each command prints its usage for -h
// and for `sluice help NAME`, and that `sluice help` lists it.
func TestEveryCommandUsage(t *testing.T) {
	t.Parallel()
	list := runSluice(t, nil, "help")
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(list.stdout, fmt.Sprintf("  %-10s %s\n", c.name, c.summary)) {
				t.Errorf("sluice help does not list %s:\n%s", c.name, list.stdout)
			}
			if !strings.HasPrefix(c.usage, "Usage: sluice "+c.name) {
				t.Errorf("usage of %s starts %q", c.name, c.usage[:min(len(c.usage), 40)])
			}
			r := runSluice(t, nil, c.name, "-h")
			if r.code != 0 || r.stdout != c.usage || r.stderr != "" {
				t.Errorf("sluice %s -h: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", c.name, r.code, r.stdout, r.stderr)
			}
			r = runSluice(t, nil, "help", c.name)
			if r.code != 0 || r.stdout != c.usage {
				t.Errorf("sluice help %s: exit %d, stdout %q; want 0 and the usage", c.name, r.code, r.stdout)
			}
		})
	}
}

// problemLine matches a configuration problem as validate prints it.
var problemLine = regexp.MustCompile(`^[^:]+\.yaml:\d+: [a-z_.\[\]0-9-]+: .+$`)

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeConfig(t, filepath.Join(dir, "good.yaml"), "limits:\n  a: {algorithm: gcra, limit: 5, period: 1s}\n")
	bad := writeConfig(t, filepath.Join(dir, "bad.yaml"), badConfig)
	missing := filepath.Join(dir, "missing.yaml")

	r := runSluice(t, nil, "validate", good)
	if r.code != 0 || r.stdout != "ok: "+good+"\n" || r.stderr != "" {
		t.Errorf("validate good.yaml: exit %d, stdout %q, stderr %q; want 0 and ok", r.code, r.stdout, r.stderr)
	}

	r = runSluice(t, nil, "validate", bad)
	if r.code != 1 || r.stdout != "" {
		t.Errorf("validate bad.yaml: exit %d, stdout %q; want 1 and nothing", r.code, r.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != len(badConfigProblems) {
		t.Fatalf("validate bad.yaml printed %d lines, want %d:\n%s", len(lines), len(badConfigProblems), r.stderr)
	}
	for i, want := range badConfigProblems {
		if !strings.HasPrefix(lines[i], bad+want) || !problemLine.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want FILE:LINE: PATH: MESSAGE starting %q", i+1, lines[i], bad+want)
		}
	}

	r = runSluice(t, nil, "validate", good, missing, bad)
	if r.code != 1 || r.stdout != "ok: "+good+"\n" || !strings.HasPrefix(r.stderr, missing+": no such file or directory\n"+bad+":6: ") {
		t.Errorf("validate good missing bad: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	r = runSluice(t, strings.NewReader("limits:\n  a: {algorithm: gcra, limit: 5, period: 1s}\n"), "validate", "-")
	if r.code != 0 || r.stdout != "ok: <stdin>\n" {
		t.Errorf("validate - (good): exit %d, stdout %q", r.code, r.stdout)
	}
	r = runSluice(t, strings.NewReader("limits:\n  a: {algorithm: gcra, limit: 5, period: 1 s}\n"), "validate", "-")
	if want := "<stdin>:2: limits.a.period: "; r.code != 1 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("validate - (bad): exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
	}

	r = runSluice(t, nil, "validate")
	if r.code != 2 || !strings.Contains(r.stderr, "validate: name a configuration file") {
		t.Errorf("validate without a file: exit %d, stderr %q", r.code, r.stderr)
	}

	// Valid, but limiting nothing: a warning.
	r = runSluice(t, strings.NewReader("store: {backend: memory}\n"), "validate", "-")
	if want := "warning: <stdin>:1: limits: no limits are defined (and no envoy section): this configuration limits nothing"; r.code != 0 || r.stdout != "ok: <stdin>\n" || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("validate - (no limits): exit %d, stdout %q, stderr %q; want 0, ok and %q", r.code, r.stdout, r.stderr, want)
	}

	// The example message of validate -h is one validate prints.
	r = runSluice(t, strings.NewReader("limits:\n  api-key: {algorithm: token_bucket, limit: 10, period: 1s, burst: -1}\n"), "validate", "-")
	msg, _ := strings.CutPrefix(strings.TrimSpace(r.stderr), "<stdin>:2: ")
	if r.code != 1 || !strings.Contains(strings.Join(strings.Fields(validateUsage), " "), msg) {
		t.Errorf("validate -h's example %q is not what validate prints for a negative burst: %q", validateUsage, r.stderr)
	}
}

// TestServeAdminListener checks that with listen.admin the admin
// endpoints move there, behind the token, and the probes stay on both.
func TestServeAdminListener(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-test-token"
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0", admin: "127.0.0.1:0"}
admin: {token: "`+token+`"}
limits:
  a: {algorithm: gcra, limit: 5, period: 1s}
`)
	in := startServe(t, "--config", path)
	if in.admin == "" || in.admin == in.http {
		t.Fatalf("ready file: admin %q, http %q; want an admin address of its own", in.admin, in.http)
	}
	admin := &instance{http: in.admin}
	get := func(in *instance, path, auth string) int {
		req, _ := http.NewRequest("GET", in.url(path), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name string
		in   *instance
		path string
		auth string
		want int
	}{
		{"metrics on admin with the token", admin, "/metrics", "Bearer " + token, 200},
		{"metrics on admin without the token", admin, "/metrics", "", 401},
		{"metrics on admin with a wrong token", admin, "/metrics", "Bearer " + token + "x", 401},
		{"metrics on http", in, "/metrics", "Bearer " + token, 404},
		{"healthz on admin", admin, "/healthz", "", 200},
		{"readyz on http", in, "/readyz", "", 200},
	}
	for _, tt := range tests {
		if got := get(tt.in, tt.path, tt.auth); got != tt.want {
			t.Errorf("%s: GET %s = %d, want %d", tt.name, tt.path, got, tt.want)
		}
	}
	if code, _ := in.check(t, "a", "k"); code != 200 {
		t.Errorf("POST /v1/check on http = %d, want 200", code)
	}
	if code, _ := admin.check(t, "a", "k"); code == 200 {
		t.Errorf("POST /v1/check on the admin listener = %d, want it refused", code)
	}
	if !strings.Contains(in.stderr.String(), "msg=listening protocol=admin addr="+in.admin) {
		t.Errorf("the log does not name the admin address:\n%s", in.stderr)
	}
}

// TestAdminEndpointsLogged: serve says at start where the admin
// endpoints are served, and when a proxying listen.http serves none.
func TestAdminEndpointsLogged(t *testing.T) {
	t.Parallel()
	const limits = "limits:\n  a: {algorithm: fixed_window, limit: 5, period: 1m}\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"one listener", `listen: {http: "127.0.0.1:0"}` + "\n",
			"served on listen.http without a token; overrides are read-only (writing them needs admin.token or admin.token_file)"},
		{"proxy alone", `listen: {http: "127.0.0.1:0"}` + "\nproxy: {upstream: \"http://127.0.0.1:1\"}\n",
			"no admin endpoint is served: listen.http proxies to the upstream, so the status page, /v1/status, /v1/explain, /metrics and /v1/overrides need listen.admin"},
		{"proxy and admin listener", `listen: {http: "127.0.0.1:0", admin: "127.0.0.1:0"}` + "\nproxy: {upstream: \"http://127.0.0.1:1\"}\n",
			"served on listen.admin without a token; overrides are read-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), tt.yaml+limits)
			in := startServe(t, "--config", path)
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(in.stderr.String(), "msg=\"admin endpoints\"") || !strings.Contains(in.stderr.String(), tt.want) {
				t.Errorf("the log does not say %q:\n%s", tt.want, in.stderr)
			}
		})
	}
}

// TestServeCheckReadTimeout runs the service with --check-read-timeout
// 200ms and the default --read-timeout of a minute, on real loopback
// connections: a POST /v1/check whose body stops halfway is answered 408
// and its connection closed after 200 ms, not a minute; a check whose
// body comes in two parts within it is decided, and its keep-alive
// connection serves the next check after the 200 ms; and an upload
// through the proxy that pauses longer than 200 ms reaches the upstream
// whole.
func TestServeCheckReadTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d bytes, %v", n, err)
	}))
	t.Cleanup(upstream.Close)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  a: {algorithm: token_bucket, limit: 1000, period: 1s}
proxy:
  upstream: %q
  rules:
    - name: uploads
      match: {path_prefix: /upload}
      limits: [{limit: a, key: ip}]
`, upstream.URL))
	in := startServe(t, "--config", path, "--check-read-timeout", timeout.String())

	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", in.http)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	body := `{"limit":"a","key":"k"}`
	head := func(path string, n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, n)
	}
	read := func(br *bufio.Reader) (*http.Response, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	t.Run("stalled check", func(t *testing.T) {
		c, br := dial()
		// The clock starts before the write: the service may start its
		// timer before io.WriteString returns here.
		sent := time.Now()
		io.WriteString(c, head("/v1/check", len(body))+body[:len(body)/2])
		resp, b := read(br)
		took := time.Since(sent)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(b, "the request body did not arrive within 200ms") {
			t.Errorf("a check whose body stops halfway = %d %s, want 408 saying 200ms", resp.StatusCode, b)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("after the 408, reading the connection: %v, want EOF (closed by the service)", err)
		}
		t.Logf("a stalled check body was answered and its connection closed %v after it stopped", time.Since(sent).Round(time.Millisecond))
		if took < timeout || took > timeout+2*time.Second {
			t.Errorf("a stalled check body was answered after %v, want about %v", took, timeout)
		}
	})

	t.Run("check in two parts", func(t *testing.T) {
		c, br := dial()
		io.WriteString(c, head("/v1/check", len(body))+body[:5])
		time.Sleep(timeout / 4) // the client pauses mid-body, within the timeout
		io.WriteString(c, body[5:])
		if resp, b := read(br); resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
			t.Fatalf("a check whose body came in two parts = %d %s, want 200", resp.StatusCode, b)
		}
		// The same connection, after the check's timeout has passed.
		time.Sleep(timeout + timeout/2) // the keep-alive connection idles past the timeout
		io.WriteString(c, head("/v1/check", len(body))+body)
		if resp, b := read(br); resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
			t.Errorf("the next check on the connection = %d %s, want 200", resp.StatusCode, b)
		}
	})

	t.Run("slow upload through the proxy", func(t *testing.T) {
		c, br := dial()
		upload := strings.Repeat("u", 1000)
		io.WriteString(c, head("/upload", len(upload))+upload[:500])
		time.Sleep(3 * timeout) // the upload stalls well past the check's timeout
		io.WriteString(c, upload[500:])
		if resp, b := read(br); resp.StatusCode != 200 || b != "read 1000 bytes, <nil>" {
			t.Errorf("an upload that paused %v = %d %q, want 200 and the upstream read all 1000 bytes", 3*timeout, resp.StatusCode, b)
		}
	})
}
