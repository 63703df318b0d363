package server

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/memstore"
)

// serve sends one request to handler h.
func serve(h http.Handler, method, target, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestListeners checks which endpoints each of the three handlers serves.
func TestListeners(t *testing.T) {
	f := newFixture(t, testYAML)
	check := `{"limit":"tiny","key":"k"}`
	for _, tt := range []struct {
		handler      string
		method, path string
		want         int
	}{
		{"all", "POST", "/v1/check", 200},
		{"all", "GET", "/v1/forward-auth?rule=api", 200},
		{"all", "GET", "/healthz", 200},
		{"all", "GET", "/readyz", 200},
		{"all", "GET", "/metrics", 200},
		{"all", "GET", "/v1/status", 200},
		{"all", "GET", "/v1/explain?limit=tiny&key=k", 200},
		{"all", "GET", "/", 200}, // the status page: no upstream
		{"all", "GET", "/other", 404},

		{"public", "POST", "/v1/check", 200},
		{"public", "GET", "/v1/forward-auth?rule=api", 200},
		{"public", "GET", "/healthz", 200},
		{"public", "GET", "/readyz", 200},
		{"public", "GET", "/metrics", 404},
		{"public", "GET", "/v1/status", 404},
		{"public", "GET", "/v1/explain?limit=tiny&key=k", 404},
		{"public", "GET", "/", 404},

		{"admin", "POST", "/v1/check", 404},
		{"admin", "GET", "/v1/forward-auth?rule=api", 404},
		{"admin", "GET", "/healthz", 200},
		{"admin", "GET", "/readyz", 200},
		{"admin", "GET", "/metrics", 200},
		{"admin", "GET", "/v1/status", 200},
		{"admin", "GET", "/v1/explain?limit=tiny&key=k", 200},
		{"admin", "GET", "/", 200},
		{"admin", "POST", "/", 404},
	} {
		t.Run(tt.handler+" "+tt.method+" "+tt.path, func(t *testing.T) {
			h := map[string]http.Handler{"all": f.h, "public": f.h.Public(), "admin": f.h.Admin()}[tt.handler]
			body := ""
			if tt.method == "POST" {
				body = check
			}
			if rec := serve(h, tt.method, tt.path, body); rec.Code != tt.want {
				t.Errorf("%s %s = %d %s, want %d", tt.method, tt.path, rec.Code, rec.Body, tt.want)
			}
		})
	}
	rec := serve(f.h.Admin(), "POST", "/v1/check", check)
	if want := `{"error":"no such admin endpoint: /v1/check (the decision API, forward-auth and the proxy are on listen.http)"}` + "\n"; rec.Body.String() != want {
		t.Errorf("the admin listener answers /v1/check with %s, want %s", rec.Body, want)
	}
}

// TestRootWithUpstream checks that with an upstream, / goes upstream on the
// Handler and the public listener, and is the status page on the admin
// one.
func TestRootWithUpstream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.Path)
	}))
	defer up.Close()
	f := newFixture(t, "limits:\n  l: {algorithm: gcra, limit: 5, period: 1s}\nproxy:\n  upstream: "+up.URL+"\n")
	for _, tt := range []struct {
		name string
		h    http.Handler
		want string
	}{
		{"all", f.h, "upstream GET /"},
		{"public", f.h.Public(), "upstream GET /"},
		{"admin", f.h.Admin(), "<!doctype html>"},
	} {
		rec := serve(tt.h, "GET", "/", "")
		if !strings.HasPrefix(rec.Body.String(), tt.want) {
			t.Errorf("%s: GET / = %d %.40q, want %q", tt.name, rec.Code, rec.Body, tt.want)
		}
	}
	if rec := serve(f.h, "POST", "/", ""); rec.Body.String() != "upstream POST /" {
		t.Errorf("POST / = %q, want the upstream's answer", rec.Body)
	}
}

const adminToken = "s3cret-admin-token-0123456789"

func TestAdminToken(t *testing.T) {
	yaml := testYAML + "admin:\n  token: " + adminToken + "\n"
	h, err := New(parse(t, yaml), memstore.New(memstore.Options{}), Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tt := range []struct {
		name, auth string
		want       int
	}{
		{"none", "", 401},
		{"wrong bearer", "Bearer nope", 401},
		{"prefix of the token", "Bearer " + adminToken[:20], 401},
		{"token with more", "Bearer " + adminToken + "x", 401},
		{"right bearer", "Bearer " + adminToken, 200},
		{"bearer in lower case", "bearer " + adminToken, 200},
		{"basic", basic("ops", adminToken), 200},
		{"basic without user", basic("", adminToken), 200},
		{"basic wrong", basic("ops", "nope"), 401},
		{"basic not base64", "Basic !!!", 401},
		{"other scheme", "Digest " + adminToken, 401},
		{"no scheme", adminToken, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, hh := range []http.Handler{h, h.Admin()} {
				for _, path := range []string{"/", "/v1/status", "/v1/explain?limit=tiny&key=k", "/metrics"} {
					rec := serve(hh, "GET", path, "", "Authorization", tt.auth)
					if rec.Code != tt.want {
						t.Errorf("GET %s with %q = %d, want %d", path, tt.auth, rec.Code, tt.want)
					}
					if tt.want == 401 {
						if got := rec.Header().Values("WWW-Authenticate"); len(got) != 2 || !strings.HasPrefix(got[0], "Bearer ") || !strings.HasPrefix(got[1], "Basic ") {
							t.Errorf("WWW-Authenticate = %q, want a Bearer and a Basic challenge", got)
						}
					}
				}
			}
		})
	}
	// The probes and the public endpoints need no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		for _, hh := range []http.Handler{h, h.Public(), h.Admin()} {
			if rec := serve(hh, "GET", path, ""); rec.Code != 200 {
				t.Errorf("GET %s without a token = %d, want 200", path, rec.Code)
			}
		}
	}
	if rec := serve(h.Public(), "POST", "/v1/check", `{"limit":"tiny","key":"k"}`); rec.Code != 200 {
		t.Errorf("POST /v1/check without a token = %d, want 200", rec.Code)
	}

	// A reload changes the token at once.
	if err := h.Reload(parse(t, testYAML+"admin:\n  token: a-brand-new-token-0123456789\n")); err != nil {
		t.Fatal(err)
	}
	if rec := serve(h, "GET", "/v1/status", "", "Authorization", "Bearer "+adminToken); rec.Code != 401 {
		t.Errorf("the old token after a reload: %d, want 401", rec.Code)
	}
	if rec := serve(h, "GET", "/v1/status", "", "Authorization", "Bearer a-brand-new-token-0123456789"); rec.Code != 200 {
		t.Errorf("the new token after a reload: %d, want 200", rec.Code)
	}
	if err := h.Reload(parse(t, testYAML)); err != nil {
		t.Fatal(err)
	}
	if rec := serve(h, "GET", "/v1/status", ""); rec.Code != 200 {
		t.Errorf("no token configured: %d, want 200", rec.Code)
	}
}
