package server

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// loginUpstream is a login service: POST /login with the form fields
// username and password answers 200 for the password "right", 401 for
// another, and 400 for a body it cannot parse. It counts the attempts that
// reach it per account and remembers the digest of the last body.
type loginUpstream struct {
	mu       sync.Mutex
	attempts map[string]int
	lastBody string // sha256 and length of the last body received
}

func (u *loginUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(b)
	u.mu.Lock()
	u.lastBody = fmt.Sprintf("%d:%s", len(b), hex.EncodeToString(sum[:8]))
	u.mu.Unlock()
	vs, err := url.ParseQuery(string(b))
	if err != nil || vs.Get("username") == "" {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.attempts[vs.Get("username")]++
	u.mu.Unlock()
	if vs.Get("password") != "right" {
		http.Error(w, "wrong password", http.StatusUnauthorized)
		return
	}
	w.Write([]byte("welcome"))
}

func (u *loginUpstream) count(user string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[user]
}

func (u *loginUpstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastBody
}

// loginFixture runs examples/login.yaml in front of a loginUpstream, with
// edit applied to the file's text.
func loginFixture(t *testing.T, edit func(string) string) (*loginUpstream, *httptest.Server) {
	t.Helper()
	return loginFixtureOn(t, nil, edit)
}

// loginFixtureOn is loginFixture on the clock c (nil: the system's).
func loginFixtureOn(t *testing.T, c *teststore.Clock, edit func(string) string) (*loginUpstream, *httptest.Server) {
	t.Helper()
	up := &loginUpstream{attempts: make(map[string]int)}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	data, err := os.ReadFile("../../../examples/login.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(data), "upstream: http://127.0.0.1:9000", "upstream: "+upstream.URL, 1)
	if edit != nil {
		yaml = edit(yaml)
	}
	cfg, err := config.Parse("login.yaml", []byte(yaml), config.Formats{})
	if err != nil {
		t.Fatalf("examples/login.yaml: %v", err)
	}
	var opts memstore.Options
	sopts := Options{Registry: prometheus.NewRegistry(), ReadTimeout: time.Minute}
	if c != nil {
		opts.Now, sopts.Now = c.Now, c.Now
	}
	h, err := New(cfg, memstore.New(opts), sopts)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return up, front
}

// login posts a form to /login from the client address ip (sent as
// X-Forwarded-For; the test client is the trusted proxy 127.0.0.1).
func login(t *testing.T, front *httptest.Server, ip, user, password string) *http.Response {
	t.Helper()
	form := url.Values{"username": {user}, "password": {password}}.Encode()
	return postLogin(t, front, ip, "application/x-www-form-urlencoded", strings.NewReader(form), int64(len(form)))
}

// postLogin posts body, of the given length and content type, to /login
// from the client address ip, and returns the response with its body read.
func postLogin(t *testing.T, front *httptest.Server, ip, contentType string, body io.Reader, length int64) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", front.URL+"/login", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestLoginExample runs examples/login.yaml: 5 failed logins per account
// per 15 minutes, and 50 per IP per hour.
func TestLoginExample(t *testing.T) {
	up, front := loginFixture(t, nil)
	const ip = "198.51.100.1"
	// Five failures for alice reach the service.
	for i := range 5 {
		if resp := login(t, front, ip, "alice", "guess"); resp.StatusCode != 401 {
			t.Fatalf("failure %d for alice = %d, want 401 from the service", i+1, resp.StatusCode)
		}
	}
	// The sixth attempt is refused before it reaches the service, even
	// with the right password.
	resp := login(t, front, ip, "alice", "right")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("sixth attempt for alice = %d, want 429", resp.StatusCode)
	}
	if got := up.count("alice"); got != 5 {
		t.Errorf("the service saw %d attempts for alice, want 5", got)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "900" {
		t.Errorf("Retry-After = %q, want 900 (the first failure leaves the 15-minute log then)", ra)
	}
	if got := resp.Header.Get("RateLimit-Policy"); !strings.Contains(got, `"login-account";q=5;w=900`) {
		t.Errorf("RateLimit-Policy = %q, want login-account's", got)
	}
	// Other accounts are unaffected, from the same address.
	if resp := login(t, front, ip, "bob", "guess"); resp.StatusCode != 401 {
		t.Errorf("bob's failure = %d, want 401", resp.StatusCode)
	}
	if resp := login(t, front, ip, "bob", "right"); resp.StatusCode != 200 {
		t.Errorf("bob's login = %d, want 200", resp.StatusCode)
	}
	// Successful logins are not counted: carol logs in 20 times.
	for i := range 20 {
		if resp := login(t, front, ip, "carol", "right"); resp.StatusCode != 200 {
			t.Fatalf("carol's login %d = %d, want 200", i+1, resp.StatusCode)
		}
	}
	if got := up.count("carol"); got != 20 {
		t.Errorf("the service saw %d logins of carol, want 20", got)
	}
	// 50 failures per IP per hour, over any accounts: this address has 6
	// (5 alice, 1 bob); 44 more pass, the next is refused.
	for i := range 44 {
		if resp := login(t, front, ip, fmt.Sprintf("user%d", i), "guess"); resp.StatusCode != 401 {
			t.Fatalf("failure %d from %s = %d, want 401", i+7, ip, resp.StatusCode)
		}
	}
	if resp := login(t, front, ip, "dave", "right"); resp.StatusCode != 429 {
		t.Errorf("attempt after 50 failures from one address = %d, want 429", resp.StatusCode)
	}
	if got := up.count("dave"); got != 0 {
		t.Errorf("the service saw dave %d times, want 0", got)
	}
	// Another address is unaffected.
	if resp := login(t, front, "198.51.100.2", "dave", "right"); resp.StatusCode != 200 {
		t.Errorf("dave from another address = %d, want 200", resp.StatusCode)
	}
	if want := fmt.Sprintf("%d:", len("password=right&username=dave")); !strings.HasPrefix(up.last(), want) {
		t.Errorf("the service received %s, want the whole body (%s...)", up.last(), want)
	}
}

// TestLoginBodies sends bodies that are huge, malformed, chunked and
// streamed slowly: the body never causes an error by itself; a huge or
// malformed one gives no account key (the per-IP limit still applies) and
// reaches the service intact; one slower than proxy.body.timeout gets 408.
func TestLoginBodies(t *testing.T) {
	up, front := loginFixture(t, func(y string) string {
		y = strings.Replace(y, "max_bytes: 65536 ", "max_bytes: 1024  ", 1)
		return strings.Replace(y, "timeout: 10s ", "timeout: 300ms", 1)
	})
	post := func(ip, contentType string, body io.Reader, length int64) *http.Response {
		t.Helper()
		return postLogin(t, front, ip, contentType, body, length)
	}
	const form = "application/x-www-form-urlencoded"

	t.Run("huge", func(t *testing.T) {
		// 1 MiB of form past the 1 KiB read: no account key, so eve's
		// failures are counted per IP only; the body arrives whole.
		body := "username=eve&password=guess&pad=" + strings.Repeat("x", 1<<20)
		for i := range 7 {
			resp := post("198.51.100.20", form, strings.NewReader(body), int64(len(body)))
			if resp.StatusCode != 401 {
				t.Fatalf("huge attempt %d = %d, want 401 (no account key: not limited per account)", i+1, resp.StatusCode)
			}
		}
		sum := sha256.Sum256([]byte(body))
		if want := fmt.Sprintf("%d:%s", len(body), hex.EncodeToString(sum[:8])); up.last() != want {
			t.Errorf("the service received %s, want %s", up.last(), want)
		}
		// Chunked, without a length: the same.
		resp := post("198.51.100.20", form, io.MultiReader(strings.NewReader(body)), -1)
		if resp.StatusCode != 401 || !strings.HasPrefix(up.last(), fmt.Sprint(len(body), ":")) {
			t.Errorf("chunked huge body = %d, service got %s", resp.StatusCode, up.last())
		}
	})

	t.Run("malformed", func(t *testing.T) {
		for i := range 7 {
			resp := post("198.51.100.21", form, strings.NewReader("username=%zz&password"), -1)
			if resp.StatusCode != 400 {
				t.Fatalf("malformed attempt %d = %d, want the service's 400", i+1, resp.StatusCode)
			}
		}
		if up.last() != "21:"+hex.EncodeToString(sha(t, "username=%zz&password")) {
			t.Errorf("the service received %s, want the malformed body as sent", up.last())
		}
		// 400 is not a failed login: the address is not charged.
		if resp := login(t, front, "198.51.100.21", "frank", "right"); resp.StatusCode != 200 {
			t.Errorf("a login after malformed bodies = %d, want 200", resp.StatusCode)
		}
	})

	t.Run("slow within the timeout", func(t *testing.T) {
		status, took := slowPost(t, front, "username=gina&password=right", 5*time.Millisecond)
		if status != "200" {
			t.Errorf("a body sent over %v = %s, want 200", took, status)
		}
	})

	t.Run("slower than the timeout", func(t *testing.T) {
		before := up.count("hank")
		status, took := slowPost(t, front, "username=hank&password=right&"+strings.Repeat("p", 30), 50*time.Millisecond)
		if status != "408" {
			t.Errorf("a body that takes too long = %s, want 408", status)
		}
		if took > 2*time.Second {
			t.Errorf("the 408 took %v, want about the 300ms timeout", took)
		}
		if up.count("hank") != before {
			t.Error("a body that did not arrive in time reached the service")
		}
	})
}

func sha(t *testing.T, s string) []byte {
	t.Helper()
	sum := sha256.Sum256([]byte(s))
	return sum[:8]
}

// slowPost sends a login form over a raw connection, one byte every gap,
// and returns the response's status code and how long it took.
func slowPost(t *testing.T, front *httptest.Server, body string, gap time.Duration) (string, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	begin := time.Now()
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nX-Forwarded-For: 198.51.100.30\r\n\r\n", len(body))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < len(body); i++ {
			select {
			case <-done:
				return
			case <-time.After(gap):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	})
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	return resp.Status[:3], time.Since(begin)
}

// TestLoginPenalty runs examples/login.yaml, whose per-account limit has a
// penalty, on a clock the test moves: five wrong passwords reach the
// service; the sixth attempt is refused and blocks the account for 15
// minutes; attempts during the block are refused without counting; after
// it, five more failures and the next attempt block it for 30 minutes;
// an operator's unblock lets the right password in at once.
func TestLoginPenalty(t *testing.T) {
	clock := teststore.NewClock(start)
	up, front := loginFixtureOn(t, clock, func(y string) string {
		return y + "admin: {token: " + ovToken + "}\n"
	})
	const ip = "198.51.100.7"
	fail5 := func(when string) {
		t.Helper()
		for i := range 5 {
			if resp := login(t, front, ip, "alice", "guess"); resp.StatusCode != 401 {
				t.Fatalf("%s: failure %d = %d, want 401 from the service", when, i+1, resp.StatusCode)
			}
		}
	}
	refused := func(when, retryAfter string) {
		t.Helper()
		resp := login(t, front, ip, "alice", "right")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != retryAfter {
			t.Fatalf("%s: attempt = %d, Retry-After %q; want 429, %s", when, resp.StatusCode, resp.Header.Get("Retry-After"), retryAfter)
		}
	}
	fail5("at 0")
	refused("the sixth attempt, an offence", "900")
	// During the block: refused, not counted, however many.
	clock.Advance(5 * time.Minute)
	for range 10 {
		refused("during the first block", "600")
	}
	if got := up.count("alice"); got != 5 {
		t.Fatalf("the service saw %d attempts, want 5", got)
	}
	// The block and the log's 15 minutes are over: five more tries reach
	// the service, and the next is the second offence, blocked 30m.
	clock.Advance(10 * time.Minute)
	fail5("after the first block")
	refused("the second offence", "1800")
	clock.Advance(29 * time.Minute)
	refused("a minute before the second block ends", "60")
	// Another account is not affected.
	if resp := login(t, front, ip, "bob", "right"); resp.StatusCode != 200 {
		t.Fatalf("bob = %d, want 200", resp.StatusCode)
	}
	// The operator lifts alice's block: she logs in at once.
	req, err := http.NewRequest("POST", front.URL+"/v1/unblock/login-account/alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ovToken)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"was_blocked":true`) {
		t.Fatalf("unblock = %d %s, want 200 and was_blocked", resp.StatusCode, body)
	}
	if resp := login(t, front, ip, "alice", "right"); resp.StatusCode != 200 {
		t.Fatalf("alice after the unblock = %d, want 200", resp.StatusCode)
	}
	// Her offences are forgotten: the next offence blocks for 15m again.
	fail5("after the unblock")
	refused("the first offence after the unblock", "900")
}
