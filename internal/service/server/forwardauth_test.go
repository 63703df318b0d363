package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// TestForwardAuthPathTricks checks that a rule selected by match cannot
// be passed by writing X-Forwarded-Uri's path another way: once the login
// and api rules refuse a client, the same resource written with repeated
// slashes or dot segments is refused by the same limit, and written with
// encoded dots or slashes gets 400, which the gateway turns into a
// refusal.
func TestForwardAuthPathTricks(t *testing.T) {
	f := newFixture(t, testYAML)
	ask := func(method, uri string) (int, string) {
		rec := f.do("GET", "/v1/forward-auth", "", "RemoteAddr", "10.0.0.1:5555",
			"X-Forwarded-Method", method, "X-Forwarded-Uri", uri, "X-Forwarded-For", "203.0.113.5", "X-API-Key", "k9")
		return rec.Code, rec.Body.String()
	}
	for _, rule := range []struct {
		name, method, path string
		same, ambiguous    []string
	}{
		{"login", "POST", "/login",
			[]string{"//login", "/./login", "/x/../login", "/x/./../login?next=/", "/%6Cogin", "/a/b/../../login"},
			[]string{"/x/%2e%2e/login", "/%2e/login", "/%2flogin", "/x/..%2flogin", "/api/%2e%2e/login", "/x/..;/login", "/x/..%5clogin", "/login%00"}},
		{"api", "GET", "/api/items",
			[]string{"//api/items", "/./api/items", "/x/../api/items", "//api//items", "/login/../api/items"},
			[]string{"/x/%2e%2e/api/items", "/%2e/api/items", "/%2fapi/items", "/x/..%2fapi/items", "/api%2Fitems"}},
	} {
		for i, want := range []int{200, 200, 429} {
			if got, body := ask(rule.method, rule.path); got != want {
				t.Fatalf("%s %s, request %d = %d %s, want %d", rule.method, rule.path, i, got, body, want)
			}
		}
		for _, uri := range rule.same {
			if got, body := ask(rule.method, uri); got != http.StatusTooManyRequests {
				t.Errorf("%s %s after the %s rule refused = %d %s, want 429", rule.method, uri, rule.name, got, body)
			}
		}
		for _, uri := range rule.ambiguous {
			got, body := ask(rule.method, uri)
			if got != http.StatusBadRequest || !strings.Contains(body, `"detail":"X-Forwarded-Uri: the path has`) {
				t.Errorf("%s %s after the %s rule refused = %d %s, want 400 with a problem+json body", rule.method, uri, rule.name, got, body)
			}
		}
	}
	// Paths in normal form that no rule selects pass; a URI that is not a
	// path is refused.
	for _, uri := range []string{"/items/a%20b", "/logout", "/%7Euser/"} {
		if got, body := ask("POST", uri); got != http.StatusOK {
			t.Errorf("POST %s = %d %s, want 200", uri, got, body)
		}
	}
	if got, body := ask("POST", "http://example.com/login"); got != http.StatusBadRequest || !strings.Contains(body, "does not start with /") {
		t.Errorf("absolute X-Forwarded-Uri = %d %s, want 400", got, body)
	}
}

// TestForwardAuthUntrustedPeer checks that a forward-auth request whose
// X-Forwarded-* fields are ignored, because its peer is not in
// trusted_proxies, is counted, and logged once per peer under each
// configuration, up to maxLoggedPeers peers.
func TestForwardAuthUntrustedPeer(t *testing.T) {
	c := teststore.NewClock(start)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h, err := New(parse(t, testYAML), memstore.New(memstore.Options{Now: c.Now}), Options{
		Registry: reg, Metrics: m, Now: c.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, reg: reg}
	ask := func(peer string, header ...string) {
		t.Helper()
		rec := f.do("GET", "/v1/forward-auth", "", append([]string{"RemoteAddr", peer}, header...)...)
		if rec.Code != http.StatusOK {
			t.Fatalf("forward-auth from %s = %d %s, want 200", peer, rec.Code, rec.Body)
		}
	}
	untrusted := func() float64 { return counter(t, reg, "sluice_forward_auth_untrusted_total") }
	lines := func() int { return strings.Count(logs.String(), "\n") }

	// The gateway at 198.51.100.1 is missing from trusted_proxies: its
	// logins match no rule and all pass, but not silently.
	for range 3 {
		ask("198.51.100.1:40000", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login")
	}
	ask("198.51.100.1:40001", "X-Forwarded-For", "203.0.113.5") // another connection, the same peer
	if got := untrusted(); got != 4 {
		t.Errorf("sluice_forward_auth_untrusted_total = %v, want 4", got)
	}
	log := logs.String()
	testkit.WantAll(t, "log", log, "level=WARN", "proxy.trusted_proxies", "peer=198.51.100.1 ", "sluice_forward_auth_untrusted_total")
	if lines() != 1 {
		t.Errorf("%d log lines for one peer, want 1:\n%s", lines(), log)
	}

	// A trusted proxy, and a caller without X-Forwarded-* fields, are
	// neither counted nor logged.
	ask("10.0.0.1:1", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/items")
	ask("198.51.100.9:1")
	if got := untrusted(); got != 4 || lines() != 1 {
		t.Errorf("after a trusted and a plain request: counter %v, %d log lines; want 4 and 1", got, lines())
	}

	// Each new peer is logged once, up to maxLoggedPeers.
	for i := range maxLoggedPeers + 10 {
		ask(fmt.Sprintf("[2001:db8::%x]:1", i), "X-Forwarded-Uri", "/login")
	}
	if got, want := untrusted(), float64(4+maxLoggedPeers+10); got != want {
		t.Errorf("sluice_forward_auth_untrusted_total = %v, want %v", got, want)
	}
	if lines() != maxLoggedPeers {
		t.Errorf("%d log lines for %d peers, want %d", lines(), maxLoggedPeers+11, maxLoggedPeers)
	}

	// A reload that still misses the gateway says so again.
	if err := h.Reload(parse(t, testYAML)); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	ask("198.51.100.1:40000", "X-Forwarded-Uri", "/login")
	if !strings.Contains(logs.String(), "peer=198.51.100.1 ") {
		t.Errorf("after a reload, the peer is not logged again:\n%s", logs.String())
	}
}
