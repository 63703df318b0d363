package plans_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plans"
)

func TestCache(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tbl := &mapTable{m: map[string]string{"k1": "pro"}}
	c := plans.NewCache(tbl, plans.CacheOptions{TTL: 5 * time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	lookup := func(key, wantPlan string, wantOK bool, wantCalls int) {
		t.Helper()
		p, ok, err := c.Plan(ctx, key)
		if p != wantPlan || ok != wantOK || err != nil {
			t.Errorf("Plan(%q) = %q, %v, %v, want %q, %v, nil", key, p, ok, err, wantPlan, wantOK)
		}
		if tbl.calls != wantCalls {
			t.Errorf("after Plan(%q) the table was asked %d times, want %d", key, tbl.calls, wantCalls)
		}
	}
	lookup("k1", "pro", true, 1)
	lookup("k1", "pro", true, 1) // cached
	lookup("k2", "", false, 2)
	lookup("k2", "", false, 2) // absence is cached too
	tbl.m["k1"] = "free"
	now = now.Add(4999 * time.Millisecond)
	lookup("k1", "pro", true, 2) // still fresh: the staleness is at most the TTL
	now = now.Add(time.Millisecond)
	lookup("k1", "free", true, 3)

	// A failing table: the expired answer is served, with a StaleError.
	tbl.err = errors.New("redis down")
	now = now.Add(time.Hour)
	p, ok, err := c.Plan(ctx, "k1")
	var stale *plans.StaleError
	if p != "free" || !ok || !errors.As(err, &stale) || !errors.Is(err, tbl.err) {
		t.Errorf("Plan on a failing table = %q, %v, %v, want the expired answer and a StaleError", p, ok, err)
	}
	// A key never seen gets the error alone.
	if p, ok, err := c.Plan(ctx, "k9"); p != "" || ok || !errors.Is(err, tbl.err) || errors.As(err, &stale) {
		t.Errorf("Plan(k9) on a failing table = %q, %v, %v, want the table's error", p, ok, err)
	}
	// And FromTable uses the stale answer.
	s := testSet(t)
	pick := plans.FromTable(c, nil)
	if name, ok := pick(httptest.NewRequest("GET", "/", nil), "k1"); s.Resolve(name, ok).Name != "free" {
		t.Errorf("FromTable with a stale entry picked %q, %v, want the stale free", name, ok)
	}
}

// TestCacheBounded: however many keys are looked up, the cache holds at
// most Size, and recently used keys stay.
func TestCacheBounded(t *testing.T) {
	tbl := &mapTable{m: map[string]string{}}
	c := plans.NewCache(tbl, plans.CacheOptions{Size: 100, TTL: time.Hour})
	ctx := context.Background()
	for i := range 10_000 {
		c.Plan(ctx, fmt.Sprint("k", i))
		c.Plan(ctx, "hot") // used all the time
		if n := c.Len(); n > 100 {
			t.Fatalf("after %d keys the cache holds %d entries, want at most 100", i+1, n)
		}
	}
	calls := tbl.calls
	c.Plan(ctx, "hot")
	if tbl.calls != calls {
		t.Error("a key used on every lookup was evicted")
	}
}
