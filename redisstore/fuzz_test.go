package redisstore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// FuzzScriptArgs feeds arbitrary policies, keys, costs and times through the
// Go layer into the Lua scripts of a private redis-server and checks that
// every answer is the memory store's: the same decision, or the same kind
// of error. A policy the Redis store refuses as beyond its exact range
// (ErrUnsupportedPolicy) is the one allowed difference.
func FuzzScriptArgs(f *testing.F) {
	srv := testkit.StartRedis(f)
	st := newTestStore(f, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	f.Add(uint8(0), int64(10), int64(1_000_000), int64(0), "key", int64(1), int64(1_767_225_600_000_000), int64(250_000))
	f.Add(uint8(2), int64(7), int64(1_000_000), int64(3), "{tag}:x\n\x00", int64(2), int64(1_767_225_659_999_999), int64(1))
	f.Add(uint8(3), int64(100), int64(60_000_000), int64(0), "", int64(100), int64(1_767_225_659_000_000), int64(1_000_000))
	f.Add(uint8(4), int64(3), int64(10_000_000), int64(0), "log", int64(4), int64(0), int64(0))
	f.Add(uint8(5), int64(1_000_000_000), int64(31_536_000_000_000), int64(0), "big", int64(999_999_999), int64(1<<51), int64(1<<40))
	f.Add(uint8(1), int64(-1), int64(0), int64(-5), "bad", int64(0), int64(-1), int64(-1))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, alg uint8, limit, periodUS, burst int64, key string, cost, atUS, gapUS int64) {
		p := sluice.Policy{Algorithm: sluice.Algorithm(alg % 7), Limit: limit, Burst: burst,
			Period: time.Duration(periodUS%(1<<53)) * time.Microsecond}
		// Caller times must lie between 1970 and 2112 for the Redis store.
		at := time.UnixMicro(abs(atUS) % (1 << 52))
		later := at.Add(time.Duration(abs(gapUS)%(1<<40)) * time.Microsecond)
		if later.UnixMicro() >= 1<<52 {
			later = at
		}
		// A key of its own per input, so that inputs do not share state.
		req := sluice.Request{Policy: &p, Key: fmt.Sprintf("%d|%s", n.Add(1), key), Cost: cost}
		mem := memstore.New(memstore.Options{})
		for _, when := range []time.Time{at, later} {
			dm, errm := mem.Allow(t.Context(), when, req)
			dr, errr := st.Allow(t.Context(), when, req)
			if errors.Is(errr, ErrUnsupportedPolicy) && errm == nil {
				return
			}
			for _, kind := range []error{sluice.ErrInvalidPolicy, sluice.ErrInvalidCost, sluice.ErrCostExceedsCapacity} {
				if errors.Is(errm, kind) != errors.Is(errr, kind) {
					t.Fatalf("Allow(%v, %+v) at %v: memory store says %v, Redis store %v", p, req, when, errm, errr)
				}
			}
			if (errm == nil) != (errr == nil) {
				t.Fatalf("Allow(%v, %+v) at %v: memory store says %v, Redis store %v", p, req, when, errm, errr)
			}
			if errm == nil && dm != dr {
				t.Fatalf("Allow(%v, %+v) at %v = %+v from Redis, want %+v as from memory", p, req, when, dr, dm)
			}
		}
	})
}

func abs(x int64) int64 {
	if x < 0 {
		if x == -x { // MinInt64
			return 0
		}
		return -x
	}
	return x
}
