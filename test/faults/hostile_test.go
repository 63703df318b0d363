package faults

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// adminToken is the admin token of the hostile-input tests.
const adminToken = "faults-admin-token-0123456789"

// post sends body to addr's path and returns the status and the answer.
func post(t *testing.T, c *http.Client, method, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, b := testkit.DoHTTP(t, c, req)
	return resp.StatusCode, b
}

func checkBody(t *testing.T, limit, key string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"limit": limit, "key": key})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serviceKeys are hostile keys that fit the decision API: its body is at
// most 64 KiB, and it takes keys as JSON strings (valid UTF-8).
func serviceKeys() []string {
	long := strings.Repeat("k", 60_000)
	sum := sha256.Sum256([]byte(long))
	return []string{
		"{", "}", "{}", "{a}", "a", "a}b{", "{k:a}", "k:a", "}:tb:1:24h0m0s:0:one", "a:b", "a%3Ab", "a%3ab", "%",
		"#", "#" + hex.EncodeToString(sum[:16]), "a\nb", "a\r\nb", "\x00", "a\x00b", "a\x00c", "é", "\ufffd",
		" ", "*", "?", "[a]", "a\u2028b", long, long + "y", "y" + long,
	}
}

// TestHostileKeysService sends hostile keys to a running service's
// POST /v1/check, with the memory store and with the Redis store: every
// key is its own (its first request admitted, its second denied, whatever
// the other keys did); on Redis, each is one Redis key with one hash tag;
// and a key of a megabyte is refused (400) without touching the store.
func TestHostileKeysService(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			store := "store: {backend: memory}"
			var srv *testkit.RedisServer
			if backend == "redis" {
				srv = testkit.StartRedis(t)
				store = testkit.RedisStoreYAML("h:", 5*time.Second, srv.Addr)
			}
			svc := startOneLimit(t, `listen: {http: "127.0.0.1:0"}`+"\n"+store)
			c := newClient(t, 2)
			url := "http://" + svc.http + "/v1/check"
			keys := serviceKeys()
			for round, want := range []string{`{"allowed":true,`, `{"allowed":false,`} {
				for _, k := range keys {
					code, body := post(t, c, "POST", url, checkBody(t, "one", k))
					if code != 200 || !strings.HasPrefix(body, want) || strings.Contains(body, "degraded") {
						t.Errorf("round %d: check %q = %d %s, want %s...", round, short(k), code, body, want)
					}
				}
			}
			huge := strings.Repeat("k", 1<<20)
			if code, body := post(t, c, "POST", url, checkBody(t, "one", huge)); code != 400 || !strings.Contains(body, "larger than 65536 bytes") {
				t.Errorf("check with a 1 MB key = %d %s, want 400: the body is larger than 65536 bytes", code, body)
			}
			if srv == nil {
				return
			}
			stored := srv.Keys(t, "h:*")
			if len(stored) != len(keys) {
				t.Errorf("Redis holds %d keys for %d distinct keys", len(stored), len(keys))
			}
			for _, s := range stored {
				if strings.Count(s, "{") != 1 || strings.Count(s, "}") != 1 || len(s) > 200 || strings.ContainsAny(s, "\x00\r\n") {
					t.Errorf("Redis key %q: want one hash tag, no control bytes, at most 200 bytes", short(s))
				}
			}
		})
	}
}

// startOneLimit starts the sluice binary (startService) with a file of
// head (the listeners, and the store or admin sections) and one limit,
// "one": a token bucket of 1 a day.
func startOneLimit(t *testing.T, head string, args ...string) *service {
	t.Helper()
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), head+`
limits:
  one: {algorithm: token_bucket, limit: 1, period: 24h}
`)
	return startService(t, "sluice", append([]string{"--config", cfg}, args...)...)
}

// TestInvalidUTF8KeysAreOneKey shows what the decision API does with a
// key that is not valid UTF-8: JSON strings are text, so Go's decoder
// replaces each invalid byte with U+FFFD, and keys that differ only there
// are one key. docs/guarantees.md says so; binary keys must be encoded
// (hex, base64) by the caller.
func TestInvalidUTF8KeysAreOneKey(t *testing.T) {
	t.Parallel()
	svc := startOneLimit(t, `listen: {http: "127.0.0.1:0"}`)
	c := newClient(t, 1)
	url := "http://" + svc.http + "/v1/check"
	for i, tt := range []struct {
		body, want string
	}{
		{"{\"limit\":\"one\",\"key\":\"\xff\"}", `{"allowed":true,`},
		{"{\"limit\":\"one\",\"key\":\"\xfe\"}", `{"allowed":false,`},
		{`{"limit":"one","key":"\ufffd"}`, `{"allowed":false,`},
	} {
		if code, body := post(t, c, "POST", url, tt.body); code != 200 || !strings.HasPrefix(body, tt.want) {
			t.Errorf("check %d = %d %s, want %s...", i, code, body, tt.want)
		}
	}
}

// forwarded records the X-Forwarded-For that reached an upstream.
type forwarded struct {
	mu  sync.Mutex
	xff []string
}

func (f *forwarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.xff = append(f.xff, r.Header.Get("X-Forwarded-For"))
	f.mu.Unlock()
	io.WriteString(w, "upstream\n")
}

func (f *forwarded) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.xff...)
}

// TestSpoofedForwardedForService runs the service as a reverse proxy and
// as a forward-auth server, limiting per client address, and sends
// requests from 127.0.0.1 that claim other clients in X-Forwarded-For,
// X-Real-IP and Forwarded. When 127.0.0.1 is not a trusted proxy, the
// claims change nothing: the peer is one client, limited after 3
// requests, and the upstream receives X-Forwarded-For: 127.0.0.1 alone.
// When it is trusted, each claimed client is counted on its own.
func TestSpoofedForwardedForService(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		trusted string
		want    []int
	}{
		{"untrusted peer", "10.9.9.9", []int{200, 200, 200, 429, 429, 429}},
		{"trusted peer", "127.0.0.1", []int{200, 200, 200, 200, 200, 200}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := &forwarded{}
			upstream := httptest.NewServer(up)
			defer upstream.Close()
			cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
limits:
  proxied: {algorithm: token_bucket, limit: 3, period: 24h}
  checked: {algorithm: token_bucket, limit: 3, period: 24h}
proxy:
  upstream: %s
  trusted_proxies: [%s]
  rules:
    - name: p
      match: {path_prefix: /p/}
      limits: [{limit: proxied, key: ip}]
    - name: fa
      match: {path_prefix: /never/}
      limits: [{limit: checked, key: ip}]
`, upstream.URL, tt.trusted))
			svc := startService(t, "sluice", "--config", cfg)
			c := newClient(t, 1)
			for _, path := range []string{"/p/x", "/v1/forward-auth?rule=fa"} {
				for i, want := range tt.want {
					spoof := fmt.Sprintf("203.0.113.%d", i+1)
					code, _ := post(t, c, "GET", "http://"+svc.http+path, "",
						"X-Forwarded-For", spoof, "X-Real-IP", spoof, "Forwarded", "for="+spoof)
					if code != want {
						t.Errorf("GET %s claiming %s: %d, want %d", path, spoof, code, want)
					}
				}
			}
			got := up.all()
			if len(got) == 0 {
				t.Fatal("no request reached the upstream")
			}
			for i, xff := range got {
				want := "127.0.0.1"
				if tt.trusted == "127.0.0.1" {
					want = fmt.Sprintf("203.0.113.%d, 127.0.0.1", i+1)
				}
				if xff != want {
					t.Errorf("request %d reached the upstream with X-Forwarded-For %q, want %q", i, xff, want)
				}
			}
		})
	}
}

// endless sends a request whose chunked body never ends, on a raw
// connection, and returns the answer's status line, how many body bytes
// had been written when it came, and how long it took; it fails t unless
// the server then closes the connection within readTimeout (plus 3 s). The body is
// prefix and then 'a' forever; writing stops at the answer, at an error
// (the server closed the connection), or after 1 GiB.
func endless(t *testing.T, addr, head, prefix string, readTimeout time.Duration) (status string, written int64, took time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(conn, head+"Transfer-Encoding: chunked\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		first := []byte(prefix)
		for sent.Load() < 1<<30 {
			select {
			case <-done:
				return
			default:
			}
			data := chunk
			if first != nil {
				data, first = append(first, chunk[len(first):]...), nil
			}
			if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(data), data); err != nil {
				return
			}
			sent.Add(int64(len(data)))
		}
	})
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	written, took = sent.Load(), time.Since(start)
	close(done)
	if err != nil {
		conn.Close()
		wg.Wait()
		t.Fatalf("no answer to an endless body after %v (%d bytes sent): %v", took, written, err)
	}
	// The writer stops: the server, which said Connection: close, reads
	// on only within its read timeout (net/http discards up to 256 KiB of
	// a body its handler left, hoping for its end), then closes.
	if !resp.Close { // (ReadResponse moves Connection: close here)
		t.Errorf("the answer to an endless body lacks Connection: close: %v", resp.Header)
	}
	io.Copy(io.Discard, resp.Body)
	answered := time.Now()
	conn.SetReadDeadline(answered.Add(readTimeout + 3*time.Second))
	_, err = io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection stayed open %v after the answer to an endless body", readTimeout+3*time.Second)
	} else {
		t.Logf("the service closed the connection %v after its answer", time.Since(answered).Round(time.Millisecond))
	}
	conn.Close()
	wg.Wait()
	return resp.Status, written, took
}

// TestEndlessBody sends bodies that never end to the endpoints that read
// a body (the decision API, at most 64 KiB, and an override's PUT, at most
// 4 KiB): each is refused with 400 promptly, after the service has read
// little more than its limit; when the client then stops sending, the
// service closes the connection within --read-timeout; and it keeps
// serving.
func TestEndlessBody(t *testing.T) {
	t.Parallel()
	const readTimeout = 2 * time.Second
	svc := startOneLimit(t, `listen: {http: "127.0.0.1:0"}
admin: {token: "`+adminToken+`"}`, "--read-timeout", readTimeout.String())
	for _, tt := range []struct {
		name, head, prefix string
	}{
		{"decision API", "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", `{"limit":"one","key":"`},
		{"override", "PUT /v1/overrides/one/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + adminToken + "\r\nContent-Type: application/json\r\n", `{"limit":5,"period":"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, written, took := endless(t, svc.http, tt.head, tt.prefix, readTimeout)
			t.Logf("%s: %s after %v and %d bytes sent", tt.name, status, took.Round(time.Millisecond), written)
			if !strings.HasPrefix(status, "400") && !strings.HasPrefix(status, "413") {
				t.Errorf("an endless body got %s, want 400 or 413", status)
			}
			// The kernel's socket buffers hold some megabytes on loopback;
			// a server that read the whole body would never answer.
			if took > 5*time.Second || written > 64<<20 {
				t.Errorf("the answer came after %v and %d bytes, want it promptly", took, written)
			}
		})
	}
	if code, _ := post(t, newClient(t, 1), "POST", "http://"+svc.http+"/v1/check", checkBody(t, "one", "k")); code != 200 {
		t.Errorf("a check after the endless bodies = %d, want 200", code)
	}
}

// TestSlowloris opens connections to a running service that send their
// headers one byte every 250 ms and never finish, with
// --read-header-timeout 1s and --idle-timeout 1s: the service closes each
// of them about a second after it opened, none gets an answer, other
// clients are served promptly meanwhile, and an idle keep-alive
// connection is closed after a second too.
func TestSlowloris(t *testing.T) {
	t.Parallel()
	n := 100
	if testScale().long {
		n = 1000
	}
	const headerTimeout = time.Second
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  big: {algorithm: token_bucket, limit: 1000000, period: 1s}
`)
	svc := startService(t, "sluice", "--config", cfg, "--read-header-timeout", headerTimeout.String(), "--idle-timeout", "1s")

	type slow struct {
		closedAfter time.Duration
		answered    bool
	}
	results := make([]slow, n)
	var wg sync.WaitGroup
	for i := range n {
		conn, err := net.Dial("tcp", svc.http)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		opened := time.Now()
		conn.SetDeadline(opened.Add(10 * time.Second))
		wg.Go(func() {
			defer conn.Close()
			closed := make(chan struct{})
			wg.Go(func() {
				// The drip: never more than 40 bytes, never a blank line.
				for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Drip: aaaaaaaaaaaaaaaaaaa") {
					select {
					case <-closed:
						return
					case <-time.After(250 * time.Millisecond):
					}
					if _, err := conn.Write([]byte{b}); err != nil {
						return
					}
				}
			})
			b, _ := io.ReadAll(conn) // until the server closes, or the deadline
			results[i] = slow{closedAfter: time.Since(opened), answered: bytes.Contains(b, []byte("200 OK"))}
			close(closed)
		})
	}

	// Meanwhile, others are served promptly.
	c := newClient(t, 1)
	var slowest time.Duration
	for deadline := time.Now().Add(headerTimeout); time.Now().Before(deadline); {
		start := time.Now()
		if code, _ := post(t, c, "POST", "http://"+svc.http+"/v1/check", checkBody(t, "big", "k")); code != 200 {
			t.Errorf("a check during the slow connections = %d, want 200", code)
		}
		slowest = max(slowest, time.Since(start))
		time.Sleep(20 * time.Millisecond) // a client's pace while the slow connections hold
	}
	wg.Wait()
	var latest time.Duration
	for i, r := range results {
		latest = max(latest, r.closedAfter)
		if r.answered {
			t.Errorf("slow connection %d got an answer", i)
		}
	}
	t.Logf("%d slow connections: the last closed by the service %v after it opened; other clients' slowest check took %v", n, latest.Round(time.Millisecond), slowest.Round(time.Millisecond))
	if latest > headerTimeout+2*time.Second {
		t.Errorf("a slow connection stayed open %v, want it closed about %v after it opened", latest, headerTimeout)
	}
	if slowest > 500*time.Millisecond {
		t.Errorf("a check took %v while slow connections were open, want it prompt", slowest)
	}

	// An idle keep-alive connection is closed after --idle-timeout.
	conn, err := net.Dial("tcp", svc.http)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idle := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("reading an idle connection: %v, want EOF (closed by the service)", err)
	}
	if d := time.Since(idle); d > 3*time.Second {
		t.Errorf("an idle connection stayed open %v, want about 1s", d)
	} else {
		t.Logf("an idle keep-alive connection was closed after %v", d.Round(time.Millisecond))
	}
}

// TestHugeHeaders sends a running service request headers of 100 KiB,
// over its 64 KiB limit: it answers 431 without reading on, and keeps
// serving.
func TestHugeHeaders(t *testing.T) {
	t.Parallel()
	svc := startOneLimit(t, `listen: {http: "127.0.0.1:0"}`)
	c := newClient(t, 1)
	code, _ := post(t, c, "POST", "http://"+svc.http+"/v1/check", checkBody(t, "one", "k"), "X-Pad", strings.Repeat("p", 100<<10))
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with 100 KiB of headers = %d, want 431", code)
	}
	if code, _ := post(t, c, "POST", "http://"+svc.http+"/v1/check", checkBody(t, "one", "k")); code != 200 {
		t.Errorf("a check after it = %d, want 200", code)
	}
}

// TestAdminListenerService runs the service with listen.admin and an
// admin token: the admin endpoints (metrics, status, explain, the status
// page and the overrides API) answer only on the admin listener and only
// with the token; the probes answer on both listeners without it; the
// public listener serves no admin endpoint; and a configuration reload
// has no HTTP endpoint at all (it is SIGHUP or the file watcher).
func TestAdminListenerService(t *testing.T) {
	t.Parallel()
	svc := startOneLimit(t, `listen: {http: "127.0.0.1:0", admin: "127.0.0.1:0"}
admin: {token: "`+adminToken+`"}`)
	if svc.admin == "" || svc.admin == svc.http {
		t.Fatalf("ready file: admin %q, http %q; want an admin listener of its own", svc.admin, svc.http)
	}
	c := newClient(t, 1)
	bearer := "Bearer " + adminToken
	type req struct{ method, path, body string }
	admin := []req{
		{"GET", "/metrics", ""},
		{"GET", "/v1/status", ""},
		{"GET", "/v1/explain?limit=one&key=k", ""},
		{"GET", "/", ""},
		{"GET", "/v1/overrides", ""},
		{"PUT", "/v1/overrides/one/k", `{"limit":5,"period":"1h"}`},
		{"DELETE", "/v1/overrides/one/k", ""},
	}
	do := func(addr string, r req, auth string) int {
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		code, _ := post(t, c, r.method, "http://"+addr+r.path, r.body, hdr...)
		return code
	}
	for _, r := range admin {
		name := r.method + " " + r.path
		if code := do(svc.admin, r, ""); code != 401 {
			t.Errorf("%s on the admin listener without the token = %d, want 401", name, code)
		}
		if code := do(svc.admin, r, "Bearer not-the-admin-token-000"); code != 401 {
			t.Errorf("%s on the admin listener with a wrong token = %d, want 401", name, code)
		}
		if code := do(svc.admin, r, bearer); code/100 != 2 {
			t.Errorf("%s on the admin listener with the token = %d, want 2xx", name, code)
		}
		if code := do(svc.http, r, bearer); code != 404 {
			t.Errorf("%s on the public listener = %d, want 404", name, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		for _, addr := range []string{svc.http, svc.admin} {
			if code := do(addr, req{"GET", path, ""}, ""); code != 200 {
				t.Errorf("GET %s on %s without a token = %d, want 200 (a probe)", path, addr, code)
			}
		}
	}
	for _, r := range []req{{"POST", "/v1/reload", ""}, {"POST", "/reload", ""}, {"POST", "/-/reload", ""}} {
		if code := do(svc.admin, r, bearer); code/100 == 2 {
			t.Errorf("%s %s on the admin listener = %d: want no reload endpoint", r.method, r.path, code)
		}
	}
	if code := do(svc.admin, req{"POST", "/v1/check", checkBody(t, "one", "k")}, bearer); code == 200 {
		t.Errorf("POST /v1/check on the admin listener = 200, want it refused (decisions are on listen.http)")
	}
	if code := do(svc.http, req{"POST", "/v1/check", checkBody(t, "one", "k")}, ""); code != 200 {
		t.Errorf("POST /v1/check on the public listener = %d, want 200", code)
	}
}
