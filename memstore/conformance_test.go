package memstore_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestConformance(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return memstore.New(memstore.Options{})
	}, sluicetest.Leases(), sluicetest.Usage(), sluicetest.Penalties())
}

// TestConformanceStoreClock runs the suite as for a store that ignores
// caller time, on the memory store's own clock, with more goroutines and a
// single shard, so that the subset run without caller time is exercised.
func TestConformanceStoreClock(t *testing.T) {
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return memstore.New(memstore.Options{Shards: 1})
	}, sluicetest.StoreClock(), sluicetest.Concurrency(32), sluicetest.Leases(), sluicetest.Usage(), sluicetest.Penalties())
}
