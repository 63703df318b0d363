package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/teststore"
)

// TestCheckNotAtomic checks that /v1/check answers 422, saying why and
// what to do, to checks whose keys the store can never decide together,
// under on_error: allow too (a 503 would invite retries that fail the
// same way); checks of several limits on one key are decided.
func TestCheckNotAtomic(t *testing.T) {
	cfg := parse(t, "store: {backend: redis, redis: {addrs: ['127.0.0.1:1']}, on_error: allow}\n"+testYAML)
	h, err := New(cfg, teststore.NewApart(), Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h}
	rec := f.check(`{"checks":[{"limit":"api-key","key":"a"},{"limit":"per-ip","key":"b"}]}`)
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "retrying cannot help") ||
		!strings.Contains(rec.Body.String(), "same key") {
		t.Errorf("checks on keys a and b = %d %s, want 422 saying retrying cannot help and to use the same key", rec.Code, rec.Body)
	}
	if rec := f.check(`{"checks":[{"limit":"api-key","key":"a"},{"limit":"per-ip","key":"a"}]}`); rec.Code != http.StatusOK {
		t.Errorf("checks on key a = %d %s, want 200", rec.Code, rec.Body)
	}
}
