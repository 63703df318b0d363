package redisstore

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// exactness stands in for a service of 4 instances with 2 Redis clients
// each, every client used by several goroutines, hammering one key with a
// slow limit (100 per hour, burst 100) on Redis's own clock: exactly 100
// requests must be admitted, for every algorithm.
func exactness(t *testing.T, addrs []string) {
	const (
		instances  = 4
		clients    = 2
		goroutines = 4 // per client
		attempts   = 13
		limit      = 100
	)
	// One prefix for all the clients: they share the key's state.
	prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
	var stores []*Store
	for range instances * clients {
		st, err := New(Options{Addrs: addrs, Prefix: prefix, Failure: FailError, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	for _, a := range sluice.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			p := sluice.Policy{Algorithm: a, Limit: limit, Period: time.Hour}
			if a.HasBurst() {
				p.Burst = limit
			}
			for try := 0; ; try++ {
				key := fmt.Sprintf("hot-%s-%d", a, try)
				before := redisMicros(t, stores[0])
				admitted, failed := hammer(t, stores, goroutines, attempts, sluice.Request{Policy: &p, Key: key, Cost: 1})
				after := redisMicros(t, stores[0])
				if failed > 0 {
					t.Fatalf("%d calls failed", failed)
				}
				period := int64(time.Hour / time.Microsecond)
				if a == sluice.FixedWindowAlgorithm && before/period != after/period && try < 2 {
					t.Logf("the run crossed a window boundary; running it again")
					continue
				}
				if admitted != limit {
					t.Errorf("%d instances × %d clients × %d goroutines × %d attempts admitted %d under %v, want exactly %d",
						instances, clients, goroutines, attempts, admitted, p, limit)
				}
				return
			}
		})
	}
}

// hammer sends attempts requests from each of goroutines goroutines per
// store, all at once, and counts the admitted and the failed ones.
func hammer(t *testing.T, stores []*Store, goroutines, attempts int, req sluice.Request) (admitted, failed int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, st := range stores {
		for range goroutines {
			wg.Go(func() {
				<-start
				for range attempts {
					d, err := st.Allow(t.Context(), time.Time{}, req)
					switch {
					case err != nil || d.Degraded:
						bad.Add(1)
					case d.Allowed:
						ok.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return ok.Load(), bad.Load()
}

// redisMicros returns Redis's TIME in µs, through st's client.
func redisMicros(t *testing.T, st *Store) int64 {
	t.Helper()
	c, err := st.conn(t.Context())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tm, err := c.Do(t.Context(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME = %v, %v", tm, err)
	}
	s, err1 := strconv.ParseInt(tm[0], 10, 64)
	us, err2 := strconv.ParseInt(tm[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME = %v", tm)
	}
	return s*1_000_000 + us
}

func TestExactness(t *testing.T) {
	srv := testkit.StartRedis(t)
	exactness(t, []string{srv.Addr})
}
