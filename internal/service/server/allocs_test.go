//go:build !race

package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestCheckAllocs bounds the allocations of the commonest POST /v1/check,
// one check read by fastCheck and allowed (without the metrics of
// sluice serve around it): the key, the http.MaxBytesReader, and the
// RateLimit and RateLimit-Policy header values (httplimit's
// TestWriteHeadersIETF); the limit is looked up in the body's bytes. The
// service benchmark's server CPU per decision depends on it
// (docs/BENCHMARKS.md). Not under the race detector, whose allocation
// counts are not those of a normal build.
func TestCheckAllocs(t *testing.T) {
	yaml := strings.Replace(testYAML, "limit: 100, period: 1m", "limit: 1000000000, period: 1s", 1)
	f := newFixture(t, yaml)
	body := []byte(`{"limit":"per-ip","key":"203.0.113.7"}`)
	rd := bytes.NewReader(body)
	req := httptest.NewRequest("POST", "/v1/check", rd)
	nop := io.NopCloser(rd)
	f.checkAllocs(t, "POST /v1/check", req, func() { rd.Reset(body); req.Body = nop }, 4)
}

// TestForwardAuthAllocs bounds the allocations of an admitted
// forward-auth request by rule name with a trusted gateway's
// X-Forwarded-* headers: its query, the request rebuilt from the headers
// and its URL, the route match, and the RateLimit header values: 10 in
// all; normalising a path already in normal form allocates nothing.
func TestForwardAuthAllocs(t *testing.T) {
	f := newFixture(t, `
limits:
  api-key: {algorithm: token_bucket, limit: 1000000000, period: 1s}
proxy:
  trusted_proxies: [192.0.2.0/24]
  rules:
    - name: api
      limits: [{limit: api-key, key: "header:X-API-Key"}]
`)
	req := httptest.NewRequest("GET", "/v1/forward-auth?rule=api", nil)
	req.RemoteAddr = "192.0.2.10:40000"
	req.Header.Set("X-API-Key", "k1")
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/api/items?page=2")
	f.checkAllocs(t, "forward-auth", req, nil, 10)
}

// checkAllocs serves req, after calling reset (if not nil) to make it
// ready again, and fails unless it is answered 200 with at most max
// allocations per call.
func (f *fixture) checkAllocs(t *testing.T, what string, req *http.Request, reset func(), max float64) {
	t.Helper()
	rec := testkit.NewWriter()
	call := func() {
		if reset != nil {
			reset()
		}
		rec.Reset()
		f.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s = %d, want 200", what, rec.Code)
		}
	}
	call()
	if n := testing.AllocsPerRun(200, call); n > max {
		t.Errorf("%s: %v allocations per call, want at most %v", what, n, max)
	}
}
