package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkDecide is one request through the engine on the memory store,
// every decision admitted: one enforced check (what the middleware and
// the check API do for one limit), and the store's Allow alone, the floor
// the engine adds to.
func BenchmarkDecide(b *testing.B) {
	p := sluice.TokenBucket(1_000_000_000, time.Hour, 0).Named("per-ip")
	ctx := context.Background()
	b.Run("one", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		defer st.Close()
		checks := []engine.Check{check(&p, "192.0.2.1", 1)}
		res := make([]engine.CheckResult, 1)
		var o engine.Outcome
		b.ReportAllocs()
		for b.Loop() {
			engine.Decide(ctx, st, time.Time{}, checks, res, &o)
			if !o.Allowed {
				b.Fatal("refused")
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		defer st.Close()
		req := sluice.Request{Policy: &p, Key: "192.0.2.1", Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			if d, err := st.Allow(ctx, time.Time{}, req); err != nil || !d.Allowed {
				b.Fatal("refused")
			}
		}
	})
}
