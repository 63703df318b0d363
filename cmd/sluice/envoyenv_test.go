package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/tracing"
	"github.com/sluicehq/sluice/internal/testkit"
)

// lookupIn returns a lookup function over the variables of env
// ("NAME=value").
func lookupIn(env ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// gatewayEnv is the environment Envoy Gateway's rate limit deployment
// sets (internal/infrastructure/kubernetes/ratelimit: the variables of
// its default deployment, with Redis, Prometheus and tracing on), apart
// from CONFIG_TYPE, which the caller adds.
var gatewayEnv = []string{
	"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
	"LOG_LEVEL=info", "USE_STATSD=false",
	"CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
	"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
	"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis.svc:6379", "REDIS_TLS=true",
	"REDIS_TLS_CLIENT_CERT=/redis-certs/tls.crt", "REDIS_TLS_CLIENT_KEY=/redis-certs/tls.key",
	"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
}

func TestEnvoyEnvGateway(t *testing.T) {
	e, warnings, err := parseEnvoyEnv(lookupIn(append(slices.Clone(gatewayEnv), "CONFIG_TYPE=FILE")...))
	if err != nil {
		t.Fatalf("parseEnvoyEnv(Envoy Gateway's environment) = %v", err)
	}
	for _, w := range []string{"GRPC_SERVER_TLS_CA_CERT", "PROMETHEUS_MAPPER_YAML"} {
		if !slices.ContainsFunc(warnings, func(s string) bool { return strings.HasPrefix(s, w+" ") }) {
			t.Errorf("warnings %q name no %s", warnings, w)
		}
	}
	if len(warnings) != 2 {
		t.Errorf("warnings = %q, want 2", warnings)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"http", e.httpAddr, "0.0.0.0:8080"},
		{"grpc", e.grpcAddr, "0.0.0.0:8081"},
		{"debug", e.debugAddr, "0.0.0.0:6070"},
		{"runtime dir", e.runtimeDir, "/data/ratelimit/config"},
		{"ignore dot files", e.ignoreDot, true},
		{"prometheus", e.promAddr + e.promPath, ":19001/metrics"},
		{"redis", strings.Join(e.redis.addrs, ","), "redis.redis.svc:6379"},
		{"redis tls", e.redis.tls, true},
		{"redis timeout", e.redis.timeout.String(), "10s"},
		{"log level", e.logLevel, "info"},
		{"grpc tls", e.grpcTLS != nil && e.grpcTLS.clientCA == "", true},
		{"xds node", e.xdsClient.nodeID, "envoy-ratelimit"},
		{"xds backoff", e.xdsClient.backoffInitial.String() + " " + e.xdsClient.backoffMax.String(), "10s 1m0s"},
		{"max connection age", e.maxConnAge.String(), "24h0m0s"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestEnvoyEnvProblems(t *testing.T) {
	base := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379", "USE_STATSD=false"}
	cases := []struct {
		env  []string
		want string // the start of a problem
	}{
		{nil, "REDIS_SOCKET_TYPE: \"unix\""},
		{[]string{"PORT=http"}, "PORT: \"http\" is not a port"},
		{[]string{"GRPC_UDS=/tmp/rl.sock"}, "GRPC_UDS: set to"},
		{[]string{"BACKEND_TYPE=memcache"}, "BACKEND_TYPE: \"memcache\""},
		{[]string{"REDIS_PERSECOND=true"}, "REDIS_PERSECOND: set to"},
		{[]string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"}, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: set to"},
		{[]string{"REDIS_TYPE=SENTINEL"}, "REDIS_URL: \"127.0.0.1:6379\": with REDIS_TYPE=SENTINEL"},
		{[]string{"LOG_LEVEL=loud"}, "LOG_LEVEL: \"loud\""},
		{[]string{"CONFIG_TYPE=HTTP"}, "CONFIG_TYPE: \"HTTP\""},
		{[]string{"GRPC_SERVER_USE_TLS=true"}, "GRPC_SERVER_USE_TLS: is true but"},
		{[]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR=2"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR: \"2\""},
		{[]string{"MAX_CONCURRENT_REQUESTS=32"}, "MAX_CONCURRENT_REQUESTS: set to"},
		{[]string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=9090"}, "PROMETHEUS_ADDR: \"9090\""},
	}
	for _, c := range cases {
		env := c.env
		if env != nil {
			env = append(slices.Clone(base), env...)
		}
		_, _, err := parseEnvoyEnv(lookupIn(env...))
		if err == nil {
			t.Errorf("parseEnvoyEnv(%q) = nil error, want %s...", c.env, c.want)
			continue
		}
		if !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(p string) bool { return strings.HasPrefix(p, c.want) }) {
			t.Errorf("parseEnvoyEnv(%q) = %v, want a problem starting %s", c.env, err, c.want)
		}
	}
	// Every refused variable, set to another value than its default,
	// stops the start and is named.
	for _, v := range envoyVars {
		if v.how != refused {
			continue
		}
		val := "true"
		if v.def != "false" {
			val = "1"
		}
		_, _, err := parseEnvoyEnv(lookupIn(append(slices.Clone(base), v.name+"="+val)...))
		if err == nil || !strings.Contains(err.Error(), v.name+":") {
			t.Errorf("%s=%s: error %v, want one naming it", v.name, val, err)
		}
	}
	// Every warned variable, set, is named in a warning and stops nothing.
	for _, v := range envoyVars {
		if v.how != warned || v.name == "USE_STATSD" {
			continue
		}
		_, warnings, err := parseEnvoyEnv(lookupIn(append(slices.Clone(base), v.name+"=7")...))
		if err != nil || !slices.ContainsFunc(warnings, func(s string) bool { return strings.HasPrefix(s, v.name+" ") }) {
			t.Errorf("%s=7: warnings %q, error %v; want a warning naming it and no error", v.name, warnings, err)
		}
	}
	// A statsd setting left at the reference's default (true) is warned
	// about: no statsd is sent.
	_, warnings, err := parseEnvoyEnv(lookupIn("REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379"))
	if err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], "USE_STATSD") {
		t.Errorf("without USE_STATSD: warnings %q, %v; want one naming USE_STATSD", warnings, err)
	}
}

// TestEnvoyEnvYAML checks that the environment's Redis settings become
// a valid configuration with the same meaning.
func TestEnvoyEnvYAML(t *testing.T) {
	e, _, err := parseEnvoyEnv(lookupIn("REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=mymaster,10.0.0.1:26379,10.0.0.2:26379",
		"REDIS_AUTH=app:secret", "REDIS_SENTINEL_AUTH=sentinel-secret", "CACHE_KEY_PREFIX=rl:", "REDIS_TIMEOUT=2s", "USE_STATSD=false"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := envoyEnvConfig(t, e)
	r := cfg.Store().Redis
	if r.Sentinel == nil || r.Sentinel.MasterSet != "mymaster" || r.Sentinel.Password != "sentinel-secret" ||
		strings.Join(r.Addrs, ",") != "10.0.0.1:26379,10.0.0.2:26379" || r.Username != "app" || r.Password != "secret" ||
		r.Prefix != "rl:" || cfg.Store().Timeout.String() != "2s" || cfg.Store().OnError != config.OnErrorFail {
		t.Errorf("store from the environment = %+v (%+v), timeout %v, on_error %v", r, r.Sentinel, cfg.Store().Timeout, cfg.Store().OnError)
	}
}

// TestEnvoyEnvDocs checks that docs/envoy.md's table names every
// variable of the reference.
func TestEnvoyEnvDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range envoyVarNames() {
		if !strings.Contains(string(b), "| `"+name+"` |") {
			t.Errorf("docs/envoy.md has no row for %s", name)
		}
	}
}

// startEnvoyEnv runs sluice serve --envoy-env in-process with the
// variables of env set (t.Setenv: the test cannot run in parallel).
func startEnvoyEnv(t *testing.T, env ...string) *instance {
	t.Helper()
	setEnv(t, env...)
	return startServe(t, "--envoy-env", "--watch", "20ms")
}

// setEnv sets the variables of env, each NAME=VALUE, for t (t.Setenv).
func setEnv(t *testing.T, env ...string) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// runtimeRoot makes a RUNTIME_ROOT holding files, by their names below
// its domain directory RUNTIME_ROOT/sub/config (RUNTIME_ROOT/config for
// an empty sub), and returns the root and that directory.
func runtimeRoot(t *testing.T, sub string, files map[string]string) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, sub, "config")
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteFile(t, path, content)
	}
	return root, dir
}

// fileEnv is the environment of sluice serve --envoy-env in FILE mode
// on a memory store, with its domains under RUNTIME_ROOT root, on
// loopback ports that the system picks, and extra.
func fileEnv(root string, extra ...string) []string {
	return append([]string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"BACKEND_TYPE=memory", "USE_STATSD=false", "RUNTIME_ROOT=" + root}, extra...)
}

func TestEnvoyEnvEndpoints(t *testing.T) {
	root, _ := runtimeRoot(t, "rl", map[string]string{
		"a.yaml":       "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"nested/b.yml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
		".hidden.yaml": "this is not a domain",
	})
	in := startEnvoyEnv(t, fileEnv(root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_IGNOREDOTFILES=true",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_PATH=/prom")...)
	if code, _, body := in.do(t, "GET", "/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("GET /healthcheck = %d %q, want 200 OK", code, body)
	}
	ask := `{"domain":"a","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	code, _, body := in.do(t, "POST", "/json", ask)
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(body), &resp); code != 200 || err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("POST /json = %d %s (%v), want 200 and OK", code, body, err)
	}
	if !strings.Contains(body, "RateLimit-Limit") {
		t.Errorf("POST /json = %s, want the reference's headers (LIMIT_RESPONSE_HEADERS_ENABLED)", body)
	}
	code, _, body = in.do(t, "POST", "/json", ask)
	if err := protojson.Unmarshal([]byte(body), &resp); code != 429 || err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second POST /json = %d %s (%v), want 429 and OVER_LIMIT", code, body, err)
	}
	if code, _, body := in.do(t, "POST", "/json", `{"domain":"b","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); code != 200 || !strings.Contains(body, `"requestsPerUnit":5`) {
		t.Errorf("POST /json to the nested file's domain = %d %s, want 200 and its limit 5", code, body)
	}
	if code, _, body := in.do(t, "POST", "/json", `{"domain":`); code != 400 {
		t.Errorf("POST /json with a broken body = %d %s, want 400", code, body)
	}
	if code, _, _ := in.do(t, "GET", "/json", ""); code != 405 {
		t.Errorf("GET /json = %d, want 405", code)
	}
	b, err := os.ReadFile(in.readyFile)
	if err != nil {
		t.Fatal(err)
	}
	var metricsAddr string
	if _, after, ok := strings.Cut(string(b), `"metrics":"`); ok {
		metricsAddr, _, _ = strings.Cut(after, `"`)
	}
	if metricsAddr == "" {
		t.Fatalf("the ready file %s names no metrics listener", b)
	}
	req, _ := http.NewRequest("GET", "http://"+metricsAddr+"/prom", nil)
	resp2, mbody := testkit.DoHTTP(t, http.DefaultClient, req)
	if resp2.StatusCode != 200 || !strings.Contains(mbody, "sluice_rls_decisions_total") {
		t.Errorf("GET /prom on PROMETHEUS_ADDR = %d, want Sluice's series:\n%.500s", resp2.StatusCode, mbody)
	}
	if err := in.stop(t); err != nil {
		t.Errorf("stop: %v", err)
	}
}

func TestEnvoyEnvStartRefused(t *testing.T) {
	root, dir := runtimeRoot(t, "", map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"b.yaml": "domain: a\ndescriptors:\n  - key: j\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
	})
	setEnv(t, fileEnv(root, "LIMIT_REQUEST_HEADERS_ENABLED=true")...)
	r := runSluice(t, nil, "serve", "--envoy-env")
	testkit.WantAll(t, "stderr", r.stderr, "LIMIT_REQUEST_HEADERS_ENABLED: set to \"true\"", "1 problem in the environment")
	t.Setenv("LIMIT_REQUEST_HEADERS_ENABLED", "false")
	r = runSluice(t, nil, "serve", "--envoy-env")
	testkit.WantAll(t, "stderr", r.stderr, filepath.Join(dir, "b.yaml")+":4: [0].descriptors[0].rate_limit.unit: unknown unit \"fortnight\"",
		"the service did not start")
}

// TestEnvoyEnvReferenceSettings: MERGE_DOMAIN_CONFIG joins a domain given
// by two files, SHADOW_MODE answers OK over the limit, LIMIT_*_HEADER
// name the headers, and refused hits are counted unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (the reference's
// config_test.go TestMergeDomainConfig, ratelimit_test.go
// TestServiceGlobalShadowMode and TestServiceWithCustomRatelimitHeaders).
func TestEnvoyEnvReferenceSettings(t *testing.T) {
	root, _ := runtimeRoot(t, "", map[string]string{
		"a.yaml": "domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"b.yaml": "domain: m\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
	})
	in := startEnvoyEnv(t, fileEnv(root, "MERGE_DOMAIN_CONFIG=true", "SHADOW_MODE=true",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-Limit", "LIMIT_REMAINING_HEADER=X-Left", "LIMIT_RESET_HEADER=X-Reset")...)
	ask := func(key string, hits ...int) (int, *rlsv3.RateLimitResponse) {
		h := 1
		if len(hits) > 0 {
			h = hits[0]
		}
		code, _, body := in.do(t, "POST", "/json", fmt.Sprintf(`{"domain":"m","hitsAddend":%d,"descriptors":[{"entries":[{"key":%q,"value":"v"}]}]}`, h, key))
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("POST /json = %d %s: %v", code, body, err)
		}
		return code, &resp
	}
	if _, resp := ask("b"); resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Errorf("b of the second file = %v, want its limit 2 (merged domain)", resp)
	}
	ask("a")
	code, resp := ask("a")
	if code != 200 || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a over its limit in SHADOW_MODE = %d %v, want 200, OK overall and the status OVER_LIMIT", code, resp)
	}
	names := map[string]bool{}
	for _, h := range resp.ResponseHeadersToAdd {
		names[h.Key] = true
	}
	if !names["X-Limit"] || !names["X-Left"] || !names["X-Reset"] {
		t.Errorf("headers = %v, want X-Limit, X-Left and X-Reset", resp.ResponseHeadersToAdd)
	}
	// Refused hits are counted (the reference's default): after 1 of 2,
	// a refused request of 2 leaves 3 counted, so 1 more is refused too
	// (without counting, it would fit).
	if _, resp := ask("b", 2); resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("b, 2 more after 1 of 2 = %v, want OVER_LIMIT", resp.Statuses[0])
	}
	if _, resp := ask("b"); resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("b, 1 more = %v, want OVER_LIMIT (the refused 2 were counted)", resp.Statuses[0])
	}
}

func TestCommandLineAsRatelimit(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"/bin/ratelimit", nil, "serve --envoy-env"},
		{"ratelimit", []string{"--watch", "5s"}, "serve --envoy-env --watch 5s"},
		{"/usr/local/bin/sluice", []string{"serve"}, "serve"},
		{"/bin/ratelimit-check", []string{"version"}, "version"},
	} {
		if got := strings.Join(commandLine(c.argv0, c.args), " "); got != c.want {
			t.Errorf("commandLine(%q, %q) = %q, want %q", c.argv0, c.args, got, c.want)
		}
	}
}

// TestEnvoyEnvTracing: TRACING_ENABLED turns traces on with the
// reference's protocol, sampling rate and service name, the endpoint from
// OTEL_EXPORTER_OTLP_ENDPOINT; without it, an endpoint in the environment
// turns nothing on; bad values are problems naming the variable.
// envoyEnvConfig returns the configuration that e's sluice.yaml parses
// to, as serve --envoy-env loads it.
func envoyEnvConfig(t *testing.T, e *envoyEnv) *config.Config {
	t.Helper()
	data, err := e.sluiceYAML()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(envoyEnvSource, data, formats)
	if err != nil {
		t.Fatalf("config.Parse(%s) = %v", data, err)
	}
	return cfg
}

func TestEnvoyEnvTracing(t *testing.T) {
	base := []string{"BACKEND_TYPE=memory", "USE_STATSD=false"}
	e, warnings, err := parseEnvoyEnv(lookupIn(append(slices.Clone(base), "TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=grpc",
		"TRACING_SAMPLING_RATE=0.25", "TRACING_SERVICE_NAME=edge-ratelimit", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317")...))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("parseEnvoyEnv = %q, %v", warnings, err)
	}
	cfg := envoyEnvConfig(t, e)
	if tr := cfg.Tracing(); tr == nil || tr.Protocol != "grpc" || !tr.SampleSet || tr.SampleRatio != 0.25 || e.tracingService != "edge-ratelimit" {
		t.Errorf("tracing from the environment = %+v, service %q; want grpc, 0.25, edge-ratelimit", tr, e.tracingService)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	off, _, err := parseEnvoyEnv(lookupIn(append(slices.Clone(base), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318")...))
	if err != nil {
		t.Fatal(err)
	}
	cfg = envoyEnvConfig(t, off)
	if cfg.Tracing() != nil || off.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || !tracing.Enabled(os.Getenv) || tracing.Enabled(off.getenv) {
		t.Errorf("without TRACING_ENABLED: section %+v, endpoint %q; want no tracing, the endpoint hidden", cfg.Tracing(), off.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}

	_, _, err = parseEnvoyEnv(lookupIn(append(slices.Clone(base), "TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=zipkin", "TRACING_SAMPLING_RATE=2")...))
	var ee *envError
	if !errors.As(err, &ee) || !slices.ContainsFunc(ee.problems, func(p string) bool { return strings.HasPrefix(p, "TRACING_EXPORTER_PROTOCOL: ") }) ||
		!slices.ContainsFunc(ee.problems, func(p string) bool { return strings.HasPrefix(p, "TRACING_SAMPLING_RATE: ") }) {
		t.Errorf("bad tracing settings: %v; want problems naming TRACING_EXPORTER_PROTOCOL and TRACING_SAMPLING_RATE", err)
	}
}
