//go:build !race

package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/benchhttp"
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
	rec := benchhttp.NewWriter()
	call := func() {
		rd.Reset(body)
		req.Body = nop
		rec.Reset()
		f.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("POST /v1/check = %d, want 200", rec.Code)
		}
	}
	call()
	if n := testing.AllocsPerRun(200, call); n > 4 {
		t.Errorf("POST /v1/check: %v allocations per call, want at most 4", n)
	}
}
