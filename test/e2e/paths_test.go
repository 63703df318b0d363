package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// startPathRules runs `sluice serve`, named name, with a login rule (POST
// /login) and an /api/ rule, three requests per client each, and the
// proxy section's extra lines (upstream, trusted_proxies).
func startPathRules(t *testing.T, name, proxy string) *sluice {
	t.Helper()
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  login: {algorithm: sliding_log, limit: 3, period: 1h}
  api: {algorithm: sliding_log, limit: 3, period: 1h}
proxy:
%s
  rules:
    - name: login
      match: {path_prefix: /login, methods: [POST]}
      limits: [{limit: login, key: ip}]
    - name: api
      match: {path_prefix: /api/}
      limits: [{limit: api, key: ip}]
`, proxy))
	return startSluice(t, name, "--config", cfg)
}

// The paths of the tests below: the login and /api/ rules' own paths,
// the same resources written in ways that nginx resolves to them (which
// Sluice refuses with 400), and written with literal dot segments or
// repeated slashes (which Sluice resolves as nginx does).
var (
	loginTricks = []string{"/x/%2e%2e/login", "/%2e/login", "/%2flogin", "/x/..%2flogin", "/api/%2e%2e/login",
		"/a/%2E%2E/login", "/x/%2E./login", "/%2f/login"}
	apiTricks = []string{"/x/%2e%2e/api/items", "/%2e/api/items", "/%2fapi/items", "/x/..%2fapi/items",
		"/api%2fitems", "/login/%2e%2e/api/items"}
	loginLiteral = []string{"/x/../login", "//login", "/./login", "/x/./../login"}
	apiLiteral   = []string{"/x/../api/items", "//api/items", "/./api/items", "//api//items"}
)

// send sends a request without a body and does not follow redirects.
func send(t *testing.T, c *http.Client, method, url string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc := *c
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, b := testkit.DoHTTP(t, &nc, req)
	return answer{resp.StatusCode, resp.Header, b}
}

// checkBadPath checks that a is Sluice's 400 for a path that servers
// read in different ways.
func checkBadPath(t *testing.T, what string, a answer) {
	t.Helper()
	var p problem
	if a.status != 400 || a.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(a.body), &p) != nil || p.Status != 400 || !strings.Contains(a.body, "the path has") {
		t.Errorf("%s = %d %q, want Sluice's 400 with a problem+json body", what, a.status, a.body)
	}
}

// TestNginxPathTricks runs the sluice binary as a reverse proxy in front
// of a real nginx whose /login and /api/ locations answer with the URI
// they got. nginx itself resolves /x/%2e%2e/login, /%2e/login,
// /%2flogin, /x/..%2flogin and /api/%2e%2e/login to its /login (checked
// first, so that the test shows the hole it closes). Through Sluice,
// once a client has used its three logins, each of those paths is
// refused with 400 and literal dot segments and repeated slashes are
// redirected to /login, where the limit refuses them: nginx's /login
// never answers that client again. The same holds for the /api/ rule,
// while other paths, another client and other methods still pass, and
// nginx gets the path in the normal form the rules matched.
func TestNginxPathTricks(t *testing.T) {
	t.Parallel()
	bin := requireNginx(t)
	port := startNginx(t, bin, "nginx (upstream)", `
        location = /login { return 200 "login $request_uri\n"; }
        location /api/ { return 200 "api $request_uri\n"; }
        location / { return 200 "other $request_uri\n"; }`)
	upstream := fmt.Sprintf("http://127.0.0.1:%d", port)
	alice, bob := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")

	// nginx's own reading of the paths.
	for _, p := range loginTricks {
		if a := send(t, alice, "POST", upstream+p); a.status != 200 || !strings.HasPrefix(a.body, "login ") {
			t.Errorf("nginx alone: POST %s = %d %q, want its /login", p, a.status, a.body)
		}
	}
	for _, p := range apiTricks {
		if a := send(t, alice, "GET", upstream+p); a.status != 200 || !strings.HasPrefix(a.body, "api ") {
			t.Errorf("nginx alone: GET %s = %d %q, want its /api/", p, a.status, a.body)
		}
	}

	s := startPathRules(t, "sluice (proxy)", "  upstream: "+upstream)
	base := "http://" + s.http

	for _, rule := range []struct {
		name, method, path, handler string
		tricks, literal             []string
	}{
		{"login", "POST", "/login", "login", loginTricks, loginLiteral},
		{"api", "GET", "/api/items", "api", apiTricks, apiLiteral},
	} {
		for i := range 3 {
			if a := send(t, alice, rule.method, base+rule.path); a.status != 200 || a.body != rule.handler+" "+rule.path+"\n" {
				t.Fatalf("%s %s, request %d = %d %q, want nginx's %s", rule.method, rule.path, i, a.status, a.body, rule.handler)
			}
		}
		if a := send(t, alice, rule.method, base+rule.path); a.status != 429 {
			t.Fatalf("%s %s, request 3 = %d %q, want 429", rule.method, rule.path, a.status, a.body)
		}
		for _, p := range rule.tricks {
			checkBadPath(t, rule.method+" "+p+" through Sluice", send(t, alice, rule.method, base+p))
		}
		for _, p := range rule.literal {
			a := send(t, alice, rule.method, base+p)
			if a.status != 307 || a.header.Get("Location") != rule.path {
				t.Errorf("%s %s through Sluice = %d (Location %q) %q, want 307 to %s", rule.method, p, a.status, a.header.Get("Location"), a.body, rule.path)
				continue
			}
			if a := send(t, alice, rule.method, base+a.header.Get("Location")); a.status != 429 {
				t.Errorf("%s %s after the redirect from %s = %d %q, want 429", rule.method, rule.path, p, a.status, a.body)
			}
		}
		// Another client has its own budget.
		if a := send(t, bob, rule.method, base+rule.path); a.status != 200 || !strings.HasPrefix(a.body, rule.handler+" ") {
			t.Errorf("another client: %s %s = %d %q, want nginx's %s", rule.method, rule.path, a.status, a.body, rule.handler)
		}
	}

	// Paths no rule selects pass, in normal form: unreserved characters
	// decoded, other escapes in upper case, the query as sent.
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/login", "login /login\n"},
		{"POST", "/logout", "other /logout\n"},
		{"GET", "/%7Euser/caf%c3%a9?q=%2F", "other /~user/caf%C3%A9?q=%2F\n"},
		{"GET", "/items/a%20b;v=1/", "other /items/a%20b;v=1/\n"},
	} {
		if a := send(t, alice, tt.method, base+tt.path); a.status != 200 || a.body != tt.want {
			t.Errorf("%s %s through Sluice = %d %q, want 200 %q", tt.method, tt.path, a.status, a.body, tt.want)
		}
	}
}

// TestNginxAuthRequestPathTricks runs the nginx snippet of
// docs/configuration.md with forward-auth selecting the rule by match
// (the snippet without ?rule=), in front of a test upstream: after a
// client's three logins, the /login resource written with repeated
// slashes or dot segments gets Sluice's 429, and written in ways servers
// read differently gets the snippet's 503 (Sluice's 400); none reaches
// the upstream. The same for the /api/ rule. With nginx's address
// missing from trusted_proxies, requests pass unlimited, but Sluice logs
// nginx's address and counts them.
func TestNginxAuthRequestPathTricks(t *testing.T) {
	t.Parallel()
	bin := requireNginx(t)
	docs := loadGatewayDocs(t)
	up, hits := startUpstream(t)
	snippet := replace(t, "nginx snippet", docs.nginx, "?rule=api&deny_status=403", "?deny_status=403")
	snippet = replace(t, "nginx snippet", snippet, docUpstreamAddr, strings.TrimPrefix(up.URL, "http://"))
	gateway := func(name, trusted string) (string, *sluice) {
		s := startPathRules(t, name, "  trusted_proxies: ["+trusted+"]")
		port := startNginx(t, bin, "nginx ("+name+")", replace(t, "nginx snippet", snippet, docSluiceAddr, s.http))
		return fmt.Sprintf("http://127.0.0.1:%d", port), s
	}
	base, _ := gateway("sluice", "127.0.0.1/32")
	alice := clientFrom("127.0.0.1")

	gatewayTricks(t, base, alice, hits, func(what string, a answer) {
		t.Helper()
		if a.status != 429 || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, `"violated-policies":[`) {
			t.Errorf("%s = %d %q, want Sluice's 429", what, a.status, a.body)
		}
	}, func(what string, a answer) {
		t.Helper()
		checkUnavailable(t, what+" (Sluice's 400)", a)
	})
	if a := send(t, alice, "GET", base+"/items/1"); a.status != 200 || a.body != "upstream /items/1" {
		t.Errorf("GET /items/1 = %d %q, want the upstream's 200", a.status, a.body)
	}

	// nginx missing from trusted_proxies: the forward-auth requests match
	// no rule and pass, as the configuration says, but not silently.
	open, s := gateway("sluice (nginx not trusted)", "10.0.0.1/32")
	for i := range 5 {
		if a := send(t, alice, "POST", open+"/login"); a.status != 200 {
			t.Fatalf("untrusted nginx: login %d = %d %q, want 200", i, a.status, a.body)
		}
	}
	if n := strings.Count(s.log.String(), "X-Forwarded-* fields ignored"); n != 1 ||
		!strings.Contains(s.log.String(), "peer=127.0.0.1 ") || !strings.Contains(s.log.String(), "level=WARN") {
		t.Errorf("the log has %d lines about the ignored fields, want 1 at WARN naming peer 127.0.0.1:\n%s", n, s.log)
	}
	if m := get(t, http.DefaultClient, "http://"+s.http+"/metrics"); !strings.Contains(m.body, "\nsluice_forward_auth_untrusted_total 5\n") {
		t.Errorf("/metrics lacks sluice_forward_auth_untrusted_total 5")
	}
}

// TestCaddyForwardAuthPathTricks runs the Caddyfile snippet of
// docs/configuration.md with forward-auth selecting the rule by match
// (without ?rule=): after a client's three logins, the /login resource
// written with repeated slashes or dot segments gets Sluice's 429, and
// written in ways servers read differently gets Sluice's 400, which
// Caddy passes on; none reaches the upstream. The same for the /api/
// rule.
func TestCaddyForwardAuthPathTricks(t *testing.T) {
	t.Parallel()
	bin := requireCaddy(t)
	docs := loadGatewayDocs(t)
	up, hits := startUpstream(t)
	snippet := replace(t, "Caddyfile", docs.caddy, "uri /v1/forward-auth?rule=api", "uri /v1/forward-auth")
	s := startPathRules(t, "sluice", "  trusted_proxies: [127.0.0.1/32]")
	base := fmt.Sprintf("http://127.0.0.1:%d", startCaddy(t, bin, snippet, s.http, up.URL))
	alice := clientFrom("127.0.0.1")

	gatewayTricks(t, base, alice, hits, func(what string, a answer) {
		t.Helper()
		if a.status != 429 || !strings.Contains(a.body, `"violated-policies":[`) {
			t.Errorf("%s = %d %q, want Sluice's 429", what, a.status, a.body)
		}
	}, func(what string, a answer) {
		t.Helper()
		checkBadPath(t, what+" through Caddy", a)
	})
}

// gatewayTricks sends, through a gateway at base, three admitted requests
// of each rule (POST /login, GET /api/items), then the rule's path again
// and its literal variants, which limited must accept as the limit's
// refusal, and its tricks, which trick must accept as Sluice's refusal;
// the upstream must see none of the refused requests.
func gatewayTricks(t *testing.T, base string, c *http.Client, hits *atomic.Int64, limited, trick func(what string, a answer)) {
	t.Helper()
	for _, rule := range []struct {
		method, path string
		same, tricks []string
	}{
		{"POST", "/login", loginLiteral, loginTricks},
		{"GET", "/api/items", apiLiteral, apiTricks},
	} {
		for i := range 3 {
			if a := send(t, c, rule.method, base+rule.path); a.status != 200 || a.body != "upstream "+rule.path {
				t.Fatalf("%s %s, request %d = %d %q, want the upstream's 200", rule.method, rule.path, i, a.status, a.body)
			}
		}
		before := hits.Load()
		for _, p := range append([]string{rule.path}, rule.same...) {
			limited(rule.method+" "+p, send(t, c, rule.method, base+p))
		}
		for _, p := range rule.tricks {
			trick(rule.method+" "+p, send(t, c, rule.method, base+p))
		}
		if got := hits.Load() - before; got != 0 {
			t.Errorf("the upstream saw %d more requests of the refused client, want 0", got)
		}
	}
}
