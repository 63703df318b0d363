package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// TestPerIP checks the one-line middleware: each client address has its
// own budget, forged forwarding headers change nothing, IPv6 clients are
// grouped by /64, and a refusal is a 429 with Retry-After and the quota
// fields.
func TestPerIP(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	h := httplimit.PerIP(sluice.SlidingWindow(2, time.Hour))(ok)
	do := func(addr string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	steps := []struct {
		name   string
		addr   string
		header []string
		want   int
	}{
		{"first", "192.0.2.1:1000", nil, 200},
		{"second, another port", "192.0.2.1:1001", nil, 200},
		{"third", "192.0.2.1:1002", nil, 429},
		{"forged X-Forwarded-For", "192.0.2.1:1003", []string{"X-Forwarded-For", "198.51.100.7"}, 429},
		{"forged X-Real-IP", "192.0.2.1:1004", []string{"X-Real-IP", "198.51.100.8"}, 429},
		{"forged Forwarded", "192.0.2.1:1005", []string{"Forwarded", "for=198.51.100.9"}, 429},
		{"another address", "192.0.2.2:1000", nil, 200},
		{"IPv6", "[2001:db8:1:2::1]:443", nil, 200},
		{"IPv6, same /64", "[2001:db8:1:2::ffff]:443", nil, 200},
		{"IPv6, same /64 again", "[2001:db8:1:2:3::]:443", nil, 429},
		{"IPv6, another /64", "[2001:db8:1:3::1]:443", nil, 200},
	}
	for _, s := range steps {
		w := do(s.addr, s.header...)
		if w.Code != s.want {
			t.Errorf("%s: status %d, want %d", s.name, w.Code, s.want)
		}
		if !strings.HasPrefix(w.Header().Get("RateLimit"), `"default";r=`) {
			t.Errorf("%s: RateLimit %q", s.name, w.Header().Get("RateLimit"))
		}
		if w.Code == 429 && (w.Header().Get("Retry-After") == "" || w.Header().Get("Content-Type") != "application/problem+json") {
			t.Errorf("%s: a refusal without Retry-After or problem+json: %v", s.name, w.Header())
		}
	}

	// Each PerIP has its own store.
	other := httplimit.PerIP(sluice.SlidingWindow(2, time.Hour))(ok)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1000"
	other.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Errorf("a second PerIP shares the first one's budget: %d", w.Code)
	}
}

// TestPerIPInvalidPolicy checks that an invalid policy stops the program
// where the middleware is built, naming what is wrong.
func TestPerIPInvalidPolicy(t *testing.T) {
	defer func() {
		msg, _ := recover().(string)
		if !strings.HasPrefix(msg, "httplimit.PerIP: ") || !strings.Contains(msg, "limit") {
			t.Errorf("recover() = %q, want a panic naming the policy's problem", msg)
		}
	}()
	httplimit.PerIP(sluice.SlidingWindow(0, time.Minute))
	t.Error("PerIP accepted a limit of 0")
}
