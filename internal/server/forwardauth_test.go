package server

import (
	"net/http"
	"strings"
	"testing"
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
