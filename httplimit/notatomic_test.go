package httplimit

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
)

// TestNotAtomic checks that limits the store can never decide together
// answer 500 without Retry-After, even with FailOpen: not a 503 that
// invites retries failing the same way, nor a pass that lifts the limits
// for good. Limits on one key are still decided.
func TestNotAtomic(t *testing.T) {
	store := teststore.NewApart()
	apart := mustNew(t, store, []Limit{
		{Policy: sluice.FixedWindow(3, time.Hour).Named("per-ip")},
		{Policy: sluice.FixedWindow(3, time.Hour).Named("per-user"), Key: Header("X-User")},
	}, &Options{FailOpen: true})
	resp := serve(apart.Handler(okHandler), request("192.0.2.1:1000", "X-User", "u1"))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Retry-After") != "" ||
		!strings.Contains(string(body), "cannot decide this request's limits all or nothing") {
		t.Errorf("limits on two keys the store cannot decide together: %d, Retry-After %q, %s; want 500 without Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	together := mustNew(t, store, []Limit{
		{Policy: sluice.FixedWindow(3, time.Hour).Named("per-user"), Key: Header("X-User")},
		{Policy: sluice.FixedWindow(10, time.Hour).Named("per-user-hourly"), Key: Header("X-User")},
	}, nil)
	if resp := serve(together.Handler(okHandler), request("192.0.2.1:1000", "X-User", "u1")); resp.StatusCode != http.StatusOK {
		t.Errorf("limits on one key: %d, want 200", resp.StatusCode)
	}
}
