// Package redis compares Sluice's Redis store with github.com/go-redis/redis_rate
// (GCRA) on the same private Redis: decisions per second, p50 and p99
// latency, and Redis CPU per decision, at 1, 16, 64 and 256 concurrent
// callers, next to a bare EVALSHA round trip of a trivial script. Sluice
// runs twice: with its defaults (concurrent calls batched) and with
// MaxBatch 1 (every decision its own script call).
//
//	cd bench && go test ./redis -run '^$' -bench . -benchtime 3s
//
// It needs redis-server on PATH (apt-get install redis-server). Besides
// ns/op it reports decisions/s, p50-µs and p99-µs (latency of one decision
// as its caller sees it), redis-cpu-µs/op (Redis's user+system CPU per
// decision, INFO cpu), script-µs/call (time inside the script per script
// call, INFO commandstats) and decisions/call (decisions per script call:
// above 1 when calls were batched).
package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/redisstore"
)

// keys is how many distinct keys the callers spread their decisions over.
const keys = 10_000

// names are the keys, user:0 to user:9999.
var names = func() []string {
	n := make([]string, keys)
	for i := range n {
		n[i] = "user:" + strconv.Itoa(i)
	}
	return n
}()

// decideFunc makes one decision (or one round trip) for key i.
type decideFunc func(ctx context.Context, i int) error

func BenchmarkRedis(b *testing.B) {
	srv := testkit.StartRedis(b)
	libs := libraries(b, srv.Addr)
	for _, callers := range []int{1, 16, 64, 256} {
		for _, lib := range libs {
			b.Run(fmt.Sprintf("callers=%d/lib=%s", callers, lib.name), func(b *testing.B) {
				run(b, context.Background(), srv, callers, lib.decide)
			})
		}
	}
}

// library is one way of making a decision (or a round trip) on Redis.
type library struct {
	name   string
	decide decideFunc
}

// libraries returns what the benchmarks compare, on the Redis at addr: a
// bare EVALSHA of a trivial script, Sluice (batched, as by default, and
// with MaxBatch 1) and redis_rate, all with one policy that admits nearly
// everything, so that every decision writes, as redis_rate's does. They
// are closed when b ends.
func libraries(b *testing.B, addr string) []library {
	st := teststore.RedisOn(b, redisstore.Options{Addrs: []string{addr}, Failure: redisstore.FailError, Timeout: 10 * time.Second})
	unbatched := teststore.RedisOn(b, redisstore.Options{Addrs: []string{addr}, Failure: redisstore.FailError, Timeout: 10 * time.Second, MaxBatch: 1})
	policy := sluice.GCRA(1_000_000, time.Second, 1_000_000)

	rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 512})
	b.Cleanup(func() { rdb.Close() })
	rl := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}

	rc := testkit.RedisClient(b, addr)
	trivial := rueidis.NewLuaScript("return 1")

	return []library{
		{"evalsha", func(ctx context.Context, i int) error {
			return trivial.Exec(ctx, rc, nil, nil).Error()
		}},
		{"sluice", func(ctx context.Context, i int) error {
			d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &policy, Key: names[i], Cost: 1})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("denied: %+v", d)
			}
			return err
		}},
		{"sluice-unbatched", func(ctx context.Context, i int) error {
			d, err := unbatched.Allow(ctx, time.Time{}, sluice.Request{Policy: &policy, Key: names[i], Cost: 1})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("denied: %+v", d)
			}
			return err
		}},
		{"redis_rate", func(ctx context.Context, i int) error {
			r, err := rl.Allow(ctx, names[i], limit)
			if err == nil && r.Allowed == 0 {
				err = fmt.Errorf("denied: %+v", r)
			}
			return err
		}},
	}
}

// run makes b.N decisions from callers goroutines and reports decisions
// per second, latency percentiles and Redis's CPU time per decision.
func run(b *testing.B, ctx context.Context, srv *testkit.RedisServer, callers int, decide decideFunc) {
	// Warm up connections and the script cache.
	for i := range callers {
		if err := decide(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := redisCPU(b, srv)
	calls0, usec0 := scriptStats(b, srv)
	testkit.RunCallers(b, callers, func(n int64) error { return decide(ctx, int(n%keys)) })
	cpu := redisCPU(b, srv) - cpu0
	calls, usec := scriptStats(b, srv)
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "redis-cpu-µs/op")
	if calls > calls0 {
		b.ReportMetric(float64(usec-usec0)/float64(calls-calls0), "script-µs/call")
		b.ReportMetric(float64(b.N)/float64(calls-calls0), "decisions/call")
	}
}

// scriptStats returns how many script calls Redis has run and the µs it
// spent in them (see testkit.RedisServer.ScriptCalls).
func scriptStats(b *testing.B, srv *testkit.RedisServer) (calls, usec int64) {
	calls, usec, err := srv.ScriptCalls()
	if err != nil {
		b.Fatal(err)
	}
	return calls, usec
}

// redisCPU returns the CPU time redis-server has used (user + system).
func redisCPU(b *testing.B, srv *testkit.RedisServer) time.Duration {
	cpu, err := srv.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}
