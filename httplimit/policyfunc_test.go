package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestPolicyFuncOwnPolicy: a PolicyFunc that returns the limit's own
// Policy for most keys (a per-key override) reports it as the static
// field does, and the override's numbers for the overridden key.
func TestPolicyFuncOwnPolicy(t *testing.T) {
	own := sluice.TokenBucket(10, time.Second, 0).Named("api")
	m, err := New(memstore.New(memstore.Options{}), []Limit{
		{Policy: own, Key: Header("X-Key"), PolicyFunc: func(_ *http.Request, key string) (sluice.Policy, bool) {
			if key == "vip" {
				return sluice.TokenBucket(500, time.Second, 0).Named("api"), true
			}
			return own, true
		}},
		{Policy: sluice.FixedWindow(100, time.Minute).Named("per-ip")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ key, want string }{
		{"k1", `"api";q=10;w=1, "per-ip";q=100;w=60`},
		{"vip", `"api";q=500;w=1, "per-ip";q=100;w=60`},
		{"k2", `"api";q=10;w=1, "per-ip";q=100;w=60`},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Key", tt.key)
		w := httptest.NewRecorder()
		if !m.Check(w, r) {
			t.Fatalf("%s refused", tt.key)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != tt.want {
			t.Errorf("%s: RateLimit-Policy = %q, want %q", tt.key, got, tt.want)
		}
	}
	// Without the key, the first limit does not apply.
	w := httptest.NewRecorder()
	m.Check(w, httptest.NewRequest("GET", "/", nil))
	if got, want := w.Header().Get("RateLimit-Policy"), `"per-ip";q=100;w=60`; got != want {
		t.Errorf("without a key: RateLimit-Policy = %q, want %q", got, want)
	}
}
