package redis

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/splitmix"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Flood benchmark (docs/BENCHMARKS.md, "Refused floods"): one abusive key
// hammered by floodCallers callers, every request but a few refused, while
// goodCallers callers decide 1,000 well-behaved keys at a steady pace. Each
// store runs twice: with the flood (b.N flood decisions) and without it
// (b.N well-behaved decisions), so that the well-behaved keys' p99 can be
// compared with and without the flood. Stores: the memory store, the Redis
// store with local refusals (its default) and without.
//
//	cd bench && go test ./redis -run '^$' -bench Flood -benchtime 2s -count 3
//
// Each flood caller yields to the scheduler after each decision, as the
// handler of a request from the network would wait for the next one.
//
// Metrics: decisions/s (of the flood, or of the well-behaved keys without
// it), cpu-ns/decision (the process's CPU time, user and system, over
// those decisions: every goroutine's, the well-behaved callers' and the
// Redis client's included; it moves less than decisions/s with what else
// the machine runs), good-p99-µs (the well-behaved keys' p99 latency), and
// for the Redis
// store redis-calls/1k (flood decisions that reached Redis per 1,000 flood
// decisions, an upper bound on the scripts the flood costs: several can
// share a batch) and scripts/1k (every script Redis ran, the well-behaved
// keys' included, per 1,000 flood decisions).
const (
	floodCallers = 64
	goodCallers  = 8
	goodKeys     = 1000
	// goodPause is each well-behaved caller's pause between decisions:
	// 8 callers make at most 4,000 decisions a second.
	goodPause = 2 * time.Millisecond
)

func BenchmarkFlood(b *testing.B) {
	srv := testkit.StartRedis(b)
	stores := []struct {
		name string
		new  func(b *testing.B) sluice.Store
	}{
		{"memory", func(b *testing.B) sluice.Store {
			st := memstore.New(memstore.Options{})
			b.Cleanup(func() { st.Close() })
			return st
		}},
		{"redis-local", func(b *testing.B) sluice.Store { return floodRedis(b, srv.Addr, redisstore.LocalRefusals{}) }},
		{"redis-nolocal", func(b *testing.B) sluice.Store {
			return floodRedis(b, srv.Addr, redisstore.LocalRefusals{Off: true})
		}},
	}
	for _, s := range stores {
		for _, flood := range []string{floodNone, floodClosed, floodPaced, floodSpin} {
			if flood == floodSpin && s.name != "redis-local" {
				continue // the control needs one store only
			}
			b.Run(fmt.Sprintf("store=%s/flood=%s", s.name, flood), func(b *testing.B) {
				floodRun(b, srv, s.new(b), flood)
			})
		}
	}
}

func floodRedis(b *testing.B, addr string, lr redisstore.LocalRefusals) *redisstore.Store {
	st := teststore.RedisOn(b, redisstore.Options{Addrs: []string{addr}, Prefix: fmt.Sprintf("flood%d:", time.Now().UnixNano()),
		Failure: redisstore.FailError, Timeout: 10 * time.Second, LocalRefusals: lr})
	return st
}

// The flood's policy admits 10 a minute; the well-behaved keys' never
// refuses at the pace they go.
var (
	floodPolicy = sluice.TokenBucket(10, time.Minute, 10).Named("flood")
	goodPolicy  = sluice.GCRA(1000, time.Second, 1000).Named("good")
)

// The kinds of flood: none (the well-behaved keys alone), closed (each
// flood caller sends its next request as soon as the last is decided),
// paced (each flood caller pauses floodPause after each decision: at most
// 64,000 requests a second, an open-loop flood that does not take every
// CPU cycle of the process whatever the store) and spin, the control of
// closed: the same 64 callers in the same closed loop, each turn spinning
// for about what a local refusal costs (spinWork) instead of asking the
// store. What spin does to the well-behaved keys' p99 is what any 64
// goroutines that never block do to a process's network waits, with no
// rate limiter in the loop.
const (
	floodNone   = "none"
	floodClosed = "closed"
	floodPaced  = "paced"
	floodSpin   = "spin"
	floodPause  = time.Millisecond
	spinWork    = 100 // rounds of splitmix64
)

// spinSink keeps spin's work from being optimised away.
var spinSink atomic.Uint64

// spin works the CPU for about a local refusal's time, touching no store.
func spin(seed uint64) {
	x := seed
	for range spinWork {
		x = splitmix.Mix(x + 0x9e3779b97f4a7c15)
	}
	if x == 0 {
		spinSink.Add(1)
	}
}

// floodRun runs the flood (b.N decisions) with the well-behaved keys beside
// it, or, without the flood, b.N well-behaved decisions alone.
func floodRun(b *testing.B, srv *testkit.RedisServer, st sluice.Store, kind string) {
	flood := kind != floodNone
	ctx := context.Background()
	for i := range goodCallers {
		if _, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &goodPolicy, Key: names[i], Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
	rs, _ := st.(*redisstore.Store)
	var local0 uint64
	if rs != nil {
		local0 = rs.LocalRefusalStats().Local
	}
	calls0, _ := scriptStats(b, srv)
	var failed atomic.Value
	var stop atomic.Bool
	var goodDone atomic.Int64
	lat := make([][]time.Duration, goodCallers)
	var good sync.WaitGroup
	b.ResetTimer()
	start, cpu0 := time.Now(), testkit.Process()
	for c := range goodCallers {
		good.Go(func() {
			own := make([]time.Duration, 0, 1024)
			for i := c; !stop.Load(); i += goodCallers {
				if !flood && goodDone.Add(1) > int64(b.N) {
					break
				}
				t := time.Now()
				d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &goodPolicy, Key: names[i%goodKeys], Cost: 1})
				if err == nil && !d.Allowed {
					err = fmt.Errorf("a well-behaved key was denied: %+v", d)
				}
				if err != nil {
					failed.CompareAndSwap(nil, err)
					break
				}
				own = append(own, time.Since(t))
				time.Sleep(goodPause) // the load: a well-behaved caller's pace
			}
			lat[c] = own
		})
	}
	if flood {
		var next atomic.Int64
		var fl sync.WaitGroup
		for range floodCallers {
			fl.Go(func() {
				req := sluice.Request{Policy: &floodPolicy, Key: "abuser", Cost: 1}
				for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
					if kind == floodSpin {
						spin(uint64(n))
						runtime.Gosched()
						continue
					}
					if _, err := st.Allow(ctx, time.Time{}, req); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					// A request that came over the network would let the
					// scheduler run others while its handler waited for
					// the next; without this, 64 callers that never block
					// keep the well-behaved callers' goroutines (and the
					// Redis client's) waiting for preemption, 10 ms at a
					// time.
					if kind == floodPaced {
						time.Sleep(floodPause) // the load: a paced flood
					} else {
						runtime.Gosched()
					}
				}
			})
		}
		fl.Wait()
		stop.Store(true)
	}
	good.Wait()
	elapsed, cpu := time.Since(start), testkit.Process()-cpu0
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "good-p99-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	if cpu0 > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/decision")
	}
	if !flood {
		return
	}
	if rs != nil && kind != floodSpin {
		local := rs.LocalRefusalStats().Local - local0
		b.ReportMetric(float64(int64(b.N)-int64(local))*1000/float64(b.N), "redis-calls/1k")
		calls, _ := scriptStats(b, srv)
		b.ReportMetric(float64(calls-calls0)*1000/float64(b.N), "scripts/1k")
	}
}
