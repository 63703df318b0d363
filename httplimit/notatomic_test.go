package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// apartStore is a memory store whose AllowAll refuses requests on
// different keys, as the Redis store on a cluster refuses keys in
// different hash slots.
type apartStore struct{ *memstore.Store }

func (s apartStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	for _, r := range reqs[1:] {
		if r.Key != reqs[0].Key {
			return sluice.Decision{}, fmt.Errorf("apart: %w", sluice.ErrNotAtomic)
		}
	}
	return s.Store.AllowAll(ctx, now, reqs, out)
}

// TestNotAtomic checks that limits the store can never decide together
// answer 500 without Retry-After, even with FailOpen: not a 503 that
// invites retries failing the same way, nor a pass that lifts the limits
// for good. Limits on one key are still decided.
func TestNotAtomic(t *testing.T) {
	store := apartStore{memstore.New(memstore.Options{})}
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
