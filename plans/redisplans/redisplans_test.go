package redisplans_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/plans/redisplans"
)

func TestTable(t *testing.T) {
	srv := testkit.StartRedis(t)
	client := testkit.RedisClient(t, srv.Addr)
	if _, err := srv.Do("HSET", "sluice:plans", "k1", "pro", "k2", "free", "k3", ""); err != nil {
		t.Fatal(err)
	}
	tbl := redisplans.New(client, "sluice:plans", 200*time.Millisecond)
	ctx := context.Background()
	for _, tt := range []struct {
		key, plan string
		ok        bool
	}{{"k1", "pro", true}, {"k2", "free", true}, {"k3", "", false}, {"k4", "", false}} {
		p, ok, err := tbl.Plan(ctx, tt.key)
		if p != tt.plan || ok != tt.ok || err != nil {
			t.Errorf("Plan(%q) = %q, %v, %v, want %q, %v, nil", tt.key, p, ok, err, tt.plan, tt.ok)
		}
	}
	// A hash change applies to a cached table once the TTL passes.
	now := time.Unix(1_700_000_000, 0)
	c := plans.NewCache(tbl, plans.CacheOptions{TTL: time.Second, Now: func() time.Time { return now }})
	if p, _, _ := c.Plan(ctx, "k1"); p != "pro" {
		t.Fatalf("cached k1 = %q", p)
	}
	srv.Do("HSET", "sluice:plans", "k1", "free")
	if p, _, _ := c.Plan(ctx, "k1"); p != "pro" {
		t.Errorf("within the TTL k1 = %q, want pro", p)
	}
	now = now.Add(time.Second)
	if p, _, _ := c.Plan(ctx, "k1"); p != "free" {
		t.Errorf("after the TTL k1 = %q, want free", p)
	}
	// A value of another type is an error, not a plan.
	srv.Do("SET", "sluice:plans2", "x")
	if _, _, err := redisplans.New(client, "sluice:plans2", 0).Plan(ctx, "k1"); err == nil {
		t.Error("HGET on a string key gave no error")
	}
	// Redis down: the table fails, the cache serves what it saw.
	srv.Kill()
	now = now.Add(time.Hour)
	if _, _, err := tbl.Plan(ctx, "k2"); err == nil {
		t.Error("Plan with Redis down gave no error")
	}
	p, ok, err := c.Plan(ctx, "k1")
	var stale *plans.StaleError
	if p != "free" || !ok || !errors.As(err, &stale) {
		t.Errorf("cached Plan with Redis down = %q, %v, %v, want free and a StaleError", p, ok, err)
	}
}
