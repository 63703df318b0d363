package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// echo is an upstream that answers with what it received.
type echo struct {
	hits atomic.Int64
}

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	switch strings.TrimPrefix(r.URL.Path, "/base") {
	case "/stream":
		// Two chunks, the second only after the client has seen the first.
		fmt.Fprintln(w, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "late")
		return
	case "/ws":
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo until the client closes
		return
	}
	sum := sha256.New()
	n, _ := io.Copy(sum, r.Body)
	fmt.Fprintf(w, "%s %s host=%s xff=%s xfh=%s xfp=%s len=%d sha=%s\n", r.Method, r.URL.RequestURI(), r.Host,
		r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"),
		n, hex.EncodeToString(sum.Sum(nil))[:16])
}

// proxyFixture serves the test configuration with proxy.upstream set to
// an echo upstream, on a real listener.
func proxyFixture(t *testing.T) (*fixture, *echo, *httptest.Server) {
	t.Helper()
	up := &echo{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	yaml := strings.Replace(testYAML, "proxy:\n", "proxy:\n  upstream: "+upstream.URL+"/base\n", 1)
	f := newFixture(t, yaml)
	front := httptest.NewServer(f.h)
	t.Cleanup(front.Close)
	return f, up, front
}

func get(t *testing.T, client *http.Client, method, url string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	return testkit.DoHTTP(t, client, req)
}

func TestProxy(t *testing.T) {
	f, up, front := proxyFixture(t)
	c := front.Client()
	// A request no rule selects passes unlimited, keeping its Host, with
	// the client's address in X-Forwarded-For (a forged one is dropped:
	// the test client is not a trusted proxy).
	for range 5 {
		resp, body := get(t, c, "GET", front.URL+"/items?x=1", nil, "Host", "shop.example", "X-Forwarded-For", "6.6.6.6")
		want := "GET /base/items?x=1 host=shop.example xff=127.0.0.1 xfh=shop.example xfp=http len=0"
		if resp.StatusCode != 200 || !strings.HasPrefix(body, want) {
			t.Fatalf("unmatched = %d %q, want 200 %q", resp.StatusCode, body, want)
		}
		if resp.Header.Get("RateLimit") != "" {
			t.Errorf("unmatched request has RateLimit %q", resp.Header.Get("RateLimit"))
		}
	}
	// POST /login is limited per client: 2 pass, the third is refused
	// before it reaches the upstream.
	hits := up.hits.Load()
	for i, want := range []int{200, 200, 429} {
		resp, body := get(t, c, "POST", front.URL+"/login", strings.NewReader("user=a&pw=b"))
		if resp.StatusCode != want {
			t.Fatalf("login %d = %d %q, want %d", i, resp.StatusCode, body, want)
		}
		switch want {
		case 200:
			if !strings.HasPrefix(body, "POST /base/login host=127.0.0.1") || !strings.Contains(body, "len=11") {
				t.Errorf("login %d reached the upstream as %q", i, body)
			}
			if got := resp.Header.Get("RateLimit"); got != fmt.Sprintf(`"tiny";r=%d;t=40`, 1-i) {
				t.Errorf("login %d RateLimit = %q", i, got)
			}
		case 429:
			if resp.Header.Get("Retry-After") != "40" || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("refused login: Retry-After %q, Content-Type %q", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
			}
		}
	}
	if got := up.hits.Load() - hits; got != 2 {
		t.Errorf("the upstream saw %d logins, want 2", got)
	}
	// The service's own endpoints are not proxied.
	resp, body := get(t, c, "POST", front.URL+"/v1/check", strings.NewReader(`{"limit":"api-key","key":"k"}`))
	if resp.StatusCode != 200 || !strings.HasPrefix(body, `{"allowed":true,"limit":10,`) {
		t.Errorf("/v1/check behind the proxy = %d %q", resp.StatusCode, body)
	}
	// Nor are the admin endpoints served to the proxy's clients, since
	// no admin token is configured.
	if resp, body := get(t, c, "GET", front.URL+"/metrics", nil); resp.StatusCode != 404 || !strings.Contains(body, "listen.admin") {
		t.Errorf("/metrics on a proxying listener without an admin token = %d %s, want 404 naming listen.admin", resp.StatusCode, body)
	}
	if !strings.Contains(scrape(t, f.h.Admin()), `sluice_http_requests_total{code="429",handler="proxy"} 1`) {
		t.Errorf("metrics lack the proxy's 429")
	}
}

func TestProxyTrustedForwarding(t *testing.T) {
	up := &echo{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	// The test client connects from 127.0.0.1; make it a trusted proxy.
	yaml := strings.Replace(testYAML, "trusted_proxies: [10.0.0.1]", "upstream: "+upstream.URL+"\n  trusted_proxies: [127.0.0.1]", 1)
	f := newFixture(t, yaml)
	front := httptest.NewServer(f.h)
	defer front.Close()
	c := front.Client()
	_, body := get(t, c, "GET", front.URL+"/a", nil, "X-Forwarded-For", "203.0.113.9", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "api.example")
	if want := "GET /a host=127.0.0.1"; !strings.HasPrefix(body, want) {
		t.Errorf("body = %q, want prefix %q", body, want)
	}
	if want := "xff=203.0.113.9, 127.0.0.1 xfh=api.example xfp=https"; !strings.Contains(body, want) {
		t.Errorf("body = %q, want %q", body, want)
	}
	// The login limit counts the client behind the trusted proxy.
	for i, want := range []int{200, 200, 429} {
		resp, _ := get(t, c, "POST", front.URL+"/login", nil, "X-Forwarded-For", "203.0.113.9")
		if resp.StatusCode != want {
			t.Errorf("login %d = %d, want %d", i, resp.StatusCode, want)
		}
	}
	if resp, _ := get(t, c, "POST", front.URL+"/login", nil, "X-Forwarded-For", "203.0.113.10"); resp.StatusCode != 200 {
		t.Errorf("another client behind the proxy = %d, want 200", resp.StatusCode)
	}
}

func TestProxyStreaming(t *testing.T) {
	_, _, front := proxyFixture(t)
	// A large request body arrives intact.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	sum := sha256.Sum256(big)
	_, body := get(t, front.Client(), "PUT", front.URL+"/upload", bytes.NewReader(big))
	if want := fmt.Sprintf("len=%d sha=%s", len(big), hex.EncodeToString(sum[:])[:16]); !strings.Contains(body, want) {
		t.Errorf("upload reached the upstream as %q, want %q", body, want)
	}
	// A response is passed on as it is written, not when it ends.
	resp, err := front.Client().Get(front.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Errorf("first streamed line = %q, %v", line, err)
	}
}

func TestProxyWebSocket(t *testing.T) {
	_, _, front := proxyFixture(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade = %d, want 101", resp.StatusCode)
	}
	fmt.Fprint(conn, "ping through the proxy")
	buf := make([]byte, len("ping through the proxy"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping through the proxy" {
		t.Errorf("echo = %q, %v", buf, err)
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	upstream := httptest.NewServer(http.NotFoundHandler())
	url := upstream.URL
	upstream.Close() // nothing listens there any more
	f := newFixture(t, strings.Replace(testYAML, "proxy:\n", "proxy:\n  upstream: "+url+"\n", 1))
	rec := f.do("GET", "/anything", "")
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "the upstream did not answer") {
		t.Errorf("upstream down = %d %s, want 502", rec.Code, rec.Body)
	}
	// Without an upstream, other paths are not found.
	g := newFixture(t, testYAML)
	if rec := g.do("GET", "/anything", ""); rec.Code != http.StatusNotFound {
		t.Errorf("no upstream = %d, want 404", rec.Code)
	}
}

// TestProxyPathTricks checks that a rule cannot be passed by writing its
// path another way: once the login and api rules refuse a client, the
// same resource written with dot segments, repeated slashes or encoded
// dots and slashes never reaches the upstream, while paths in normal form
// pass, and the upstream gets the normal form that the rules matched.
func TestProxyPathTricks(t *testing.T) {
	f, up, front := proxyFixture(t)
	c := front.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	// The upstream gets the path the rules match: unreserved characters
	// decoded, other escapes in upper case, the query as sent.
	for _, tt := range []struct{ path, want string }{
		{"/%7Euser/caf%c3%a9?q=%2F", "GET /base/~user/caf%C3%A9?q=%2F "},
		{"/items/a%20b;v=1/", "GET /base/items/a%20b;v=1/ "},
		{"/%6Cogin", "GET /base/login "},
	} {
		if resp, body := get(t, c, "GET", front.URL+tt.path, nil); resp.StatusCode != 200 || !strings.HasPrefix(body, tt.want) {
			t.Errorf("GET %s = %d %q, want 200 %q", tt.path, resp.StatusCode, body, tt.want)
		}
	}

	for _, rule := range []struct {
		name, method, path string
		tricks             []string
	}{
		{"login", "POST", "/login", []string{"/x/%2e%2e/login", "/%2e/login", "/%2flogin", "/x/..%2flogin", "/api/%2e%2e/login",
			"/%2E%2E/login", "/x/..;/login", "/x/%2e%2e;/login", "/login%00", `/x\..\login`, "/x/..%5clogin"}},
		{"api", "GET", "/api/items", []string{"/x/%2e%2e/api/items", "/%2e/api/items", "/%2fapi/items", "/x/..%2fapi/items",
			"/api%2Fitems", "/login/%2e%2e/api/items", "/x/..;/api/items"}},
	} {
		for i, want := range []int{200, 200, 429} {
			if resp, body := get(t, c, rule.method, front.URL+rule.path, nil, "X-API-Key", "k"); resp.StatusCode != want {
				t.Fatalf("%s %s, request %d = %d %q, want %d", rule.method, rule.path, i, resp.StatusCode, body, want)
			}
		}
		hits := up.hits.Load()
		for _, p := range rule.tricks {
			resp, body := get(t, c, rule.method, front.URL+p, nil, "X-API-Key", "k")
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(body, "Sluice does not forward this request: the path has") {
				t.Errorf("%s %s after the %s rule refused = %d %q, want 400 problem+json", rule.method, p, rule.name, resp.StatusCode, body)
			}
		}
		// Literal dot segments and repeated slashes are redirected to the
		// normal path by the ServeMux, where the rule refuses them.
		for _, p := range []string{"/x/.." + rule.path, "/" + rule.path, "/." + rule.path} {
			resp, body := get(t, c, rule.method, front.URL+p, nil, "X-API-Key", "k")
			if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != rule.path {
				t.Errorf("%s %s = %d (Location %q) %q, want 307 to %s", rule.method, p, resp.StatusCode, resp.Header.Get("Location"), body, rule.path)
			}
		}
		if got := up.hits.Load() - hits; got != 0 {
			t.Errorf("the upstream saw %d requests of the refused %s client, want 0", got, rule.name)
		}
	}
	if got := counter(t, f.reg, "sluice_http_requests_total", "400", "proxy"); got != 18 {
		t.Errorf("sluice_http_requests_total of the proxy's 400 = %v, want 18", got)
	}

	// A request the ServeMux does not clean cannot reach Sluice's own
	// paths upstream either.
	hits := up.hits.Load()
	if rec := f.do("CONNECT", "//v1/status", ""); rec.Code != http.StatusNotFound || up.hits.Load() != hits {
		t.Errorf("CONNECT //v1/status = %d %s, want 404 without reaching the upstream", rec.Code, rec.Body)
	}
}

// closedAfter is a request body as the server hands it to the proxy: its
// bytes, after which a read fails, as one does once the server has closed
// the body on writing the response (HTTP/1).
type closedAfter struct{ r io.Reader }

func (b *closedAfter) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, http.ErrBodyReadAfterClose
	}
	return n, err
}

// TestProxyBodyOfKnownLength: a request body of known length is sent
// upstream without being read past its length, so a body the server has
// closed by then (its response under way) breaks nothing.
func TestProxyBodyOfKnownLength(t *testing.T) {
	f, _, _ := proxyFixture(t)
	req := httptest.NewRequest("POST", "/items", nil)
	req.Body, req.ContentLength = io.NopCloser(&closedAfter{strings.NewReader("0123456789")}), 10
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "POST /base/items ") || !strings.Contains(rec.Body.String(), " len=10 ") {
		t.Errorf("POST with a body of 10 bytes = %d %q, want it forwarded whole", rec.Code, rec.Body)
	}
}
