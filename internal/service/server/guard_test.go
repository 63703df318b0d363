package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/service/config"
)

// tokensConfig parses yaml as the file sluice.yaml of dir, whose
// tokens.txt holds tokens.
func tokensConfig(t *testing.T, dir, yaml, tokens string) *config.Config {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "tokens.txt"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(filepath.Join(dir, "sluice.yaml"), []byte(yaml), config.Formats{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDecisionTokens checks listen.tokens_file: the decision endpoints
// need a token (401 with WWW-Authenticate: Bearer without one or with a
// wrong one), a right one is served, a reload rotates them, and the
// reverse proxy's traffic and the probes need none.
func TestDecisionTokens(t *testing.T) {
	up := &echo{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	dir := t.TempDir()
	yaml := "listen: {tokens_file: tokens.txt}\n" + strings.Replace(testYAML, "proxy:\n", "proxy:\n  upstream: "+upstream.URL+"\n", 1)
	f := newFixture(t, testYAML)
	if err := f.h.Reload(tokensConfig(t, dir, yaml, "# clients\nedge-0123456789abcdef\nweb-0123456789abcdef\n")); err != nil {
		t.Fatal(err)
	}
	const check = `{"limit":"per-ip","key":"alice"}`
	type call struct {
		method, path, body string
	}
	calls := []call{
		{"POST", "/v1/check", check},
		{"GET", "/v1/forward-auth", ""},
		{"GET", "/v1/explain?limit=per-ip&key=alice", ""},
	}
	status := func(c call, auth string) *httptest.ResponseRecorder {
		if auth == "" {
			return f.do(c.method, c.path, c.body)
		}
		return f.do(c.method, c.path, c.body, "Authorization", auth)
	}
	for _, c := range calls {
		for _, auth := range []string{"", "Bearer nope-0123456789abcdef", "Basic ZWRnZS0wMTIzNDU2Nzg5YWJjZGVm", "Bearer edge-0123456789abcde"} {
			rec := status(c, auth)
			if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") != `Bearer realm="sluice"` {
				t.Errorf("%s %s with %q = %d (WWW-Authenticate %q), want 401 with Bearer", c.method, c.path, auth, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
		}
		for _, auth := range []string{"Bearer edge-0123456789abcdef", "bearer web-0123456789abcdef"} {
			if rec := status(c, auth); rec.Code != http.StatusOK {
				t.Errorf("%s %s with %q = %d %s, want 200", c.method, c.path, auth, rec.Code, rec.Body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/app/page"} {
		if rec := f.do("GET", path, ""); rec.Code != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200 (not behind the decision tokens)", path, rec.Code)
		}
	}
	if up.hits.Load() != 1 {
		t.Errorf("the upstream saw %d requests, want 1 (/app/page)", up.hits.Load())
	}

	// Rotation: web's token replaced; edge's kept.
	if err := f.h.Reload(tokensConfig(t, dir, yaml, "edge-0123456789abcdef\nweb-fedcba9876543210\n")); err != nil {
		t.Fatal(err)
	}
	for auth, want := range map[string]int{"Bearer web-0123456789abcdef": 401, "Bearer web-fedcba9876543210": 200, "Bearer edge-0123456789abcdef": 200} {
		if rec := status(calls[0], auth); rec.Code != want {
			t.Errorf("after rotation, /v1/check with %q = %d, want %d", auth, rec.Code, want)
		}
	}

	// With an admin token, /v1/explain takes it, not the decision tokens.
	if err := f.h.Reload(tokensConfig(t, dir, "admin: {token: admin-0123456789abcdef}\n"+yaml, "edge-0123456789abcdef\n")); err != nil {
		t.Fatal(err)
	}
	for auth, want := range map[string]int{"Bearer edge-0123456789abcdef": 401, "Bearer admin-0123456789abcdef": 200} {
		if rec := status(calls[2], auth); rec.Code != want {
			t.Errorf("with an admin token, /v1/explain with %q = %d, want %d", auth, rec.Code, want)
		}
	}
}

// TestReservedPaths sends each admin path, with the admin token, to
// listen.http of a service with an upstream and listen.admin, and checks
// that the upstream never sees one: each is answered 404 with a
// problem+json body naming listen.admin. Unknown paths under /v1/ are
// kept too, on the split listener and on the single one.
func TestReservedPaths(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	t.Cleanup(upstream.Close)
	const token = "admin-0123456789abcdef"
	yaml := "listen: {admin: 127.0.0.1:9090}\nadmin: {token: " + token + "}\n" + strings.Replace(testYAML, "proxy:\n", "proxy:\n  upstream: "+upstream.URL+"\n", 1)
	f := newFixture(t, yaml)
	public := httptest.NewServer(f.h.Public())
	t.Cleanup(public.Close)
	single := httptest.NewServer(f.h)
	t.Cleanup(single.Close)

	send := func(base, method, path string) (int, map[string]any, string) {
		t.Helper()
		resp, body := get(t, http.DefaultClient, method, base+path, nil, "Authorization", "Bearer "+token)
		var p map[string]any
		json.Unmarshal([]byte(body), &p)
		return resp.StatusCode, p, resp.Header.Get("Content-Type")
	}
	admin := []struct{ method, path string }{
		{"GET", "/v1/status"},
		{"GET", "/v1/explain?limit=per-ip&key=alice"},
		{"GET", "/metrics"},
		{"GET", "/v1/overrides"},
		{"GET", "/v1/overrides/per-ip"},
		{"PUT", "/v1/overrides/per-ip/alice"},
		{"DELETE", "/v1/overrides/per-ip/alice"},
		{"GET", "/v1/%73tatus"},
	}
	for _, a := range admin {
		code, p, ct := send(public.URL, a.method, a.path)
		detail, _ := p["detail"].(string)
		if code != http.StatusNotFound || ct != "application/problem+json" || !strings.Contains(detail, "served on listen.admin") {
			t.Errorf("%s %s on listen.http = %d %s %q, want 404 problem+json naming listen.admin", a.method, a.path, code, ct, detail)
		}
	}
	for _, base := range []string{public.URL, single.URL} {
		for _, path := range []string{"/v1/nothing", "/v1", "/metrics/extra", "/v1/check/more"} {
			code, p, _ := send(base, "GET", path)
			detail, _ := p["detail"].(string)
			if code != http.StatusNotFound || !strings.Contains(detail, "never forwards them") {
				t.Errorf("GET %s = %d %q, want 404 saying it is not forwarded", path, code, detail)
			}
		}
	}
	// The application's own paths still go through.
	if code, _, _ := send(public.URL, "GET", "/v2/items"); code != http.StatusOK {
		t.Errorf("GET /v2/items = %d, want 200 from the upstream", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "GET /v2/items ") {
		t.Errorf("the upstream saw %q, want only GET /v2/items", seen)
	}
}
