package redisstore

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// benchStore returns a store on a private Redis for benchmarks.
func benchStore(b *testing.B) (*Store, *testkit.RedisServer) {
	b.Helper()
	srv := testkit.StartRedis(b)
	st, err := New(Options{Addrs: []string{srv.Addr}, Failure: FailError, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st, srv
}

// benchKeys are the keys the benchmarks spread their decisions over.
var benchKeys = func() []string {
	k := make([]string, 10_000)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkAllow measures one decision per operation, from parallel
// callers, for each algorithm, over 10,000 keys with a limit that admits
// nearly everything (so that each decision writes).
func BenchmarkAllow(b *testing.B) {
	st, _ := benchStore(b)
	for _, a := range sluice.Algorithms() {
		b.Run("alg="+a.String(), func(b *testing.B) {
			p := sluice.Policy{Algorithm: a, Limit: 1_000_000, Period: time.Second}
			if a == sluice.SlidingLogAlgorithm {
				p.Period = 10 * time.Millisecond // keep the logs short
			}
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%int64(len(benchKeys))], Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAllowSerial measures the latency of one decision, one caller.
func BenchmarkAllowSerial(b *testing.B) {
	st, _ := benchStore(b)
	p := sluice.GCRA(1_000_000, time.Second, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%len(benchKeys)], Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseSerial is a concurrency lease taken and released on one
// key by one caller (Allow, then Release: two round trips), beside
// BenchmarkAllowSerial's one rate decision per round trip.
func BenchmarkLeaseSerial(b *testing.B) {
	st, _ := benchStore(b)
	p := sluice.Concurrency(sluice.MaxLimit, time.Minute)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%len(benchKeys)], Cost: 1})
		if err != nil || !d.Allowed {
			b.Fatalf("Allow = %+v, %v", d, err)
		}
		if ok, err := st.Release(b.Context(), time.Time{}, d.Lease, nil); err != nil || !ok {
			b.Fatalf("Release = %v, %v", ok, err)
		}
	}
}

// BenchmarkUsageSerial is a cost known afterwards, one caller, beside
// BenchmarkAllowSerial: a debit (one round trip), and an estimate taken
// and settled with a larger actual cost (Allow with SettleWithin, then
// Release with the usage: two round trips).
func BenchmarkUsageSerial(b *testing.B) {
	st, _ := benchStore(b)
	p := sluice.GCRA(1_000_000, time.Second, 0)
	usage := []int64{2}
	b.Run("debit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := st.Debit(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%len(benchKeys)], Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("estimate+settle", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			d, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%len(benchKeys)], Cost: 1, SettleWithin: time.Minute})
			if err != nil || !d.Allowed {
				b.Fatalf("Allow = %+v, %v", d, err)
			}
			if ok, err := st.Release(b.Context(), time.Time{}, d.Lease, usage); err != nil || !ok {
				b.Fatalf("Release = %v, %v", ok, err)
			}
		}
	})
}

// BenchmarkLocalRefusal measures one local refusal (docs/BENCHMARKS.md,
// "Refused floods"): one caller on one key whose cached state refuses
// every request (10 an hour), reaching Redis only when the state is
// older than DefaultLocalRefusalMaxAge.
func BenchmarkLocalRefusal(b *testing.B) {
	st, _ := benchStore(b)
	req := sluice.Request{Policy: new(sluice.TokenBucket(10, time.Hour, 10).Named("flood")), Key: "abuser", Cost: 1}
	for range 11 {
		if _, err := st.Allow(b.Context(), time.Time{}, req); err != nil {
			b.Fatal(err)
		}
	}
	local, start := st.LocalRefusalStats().Local, time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := st.Allow(b.Context(), time.Time{}, req); err != nil || d.Allowed {
			b.Fatalf("Allow = %+v, %v; want a refusal", d, err)
		}
	}
	checkLocal(b, st, local, start)
}

// checkLocal fails b unless every call since start was refused locally
// but those that asked Redis because the cached states had aged past
// DefaultLocalRefusalMaxAge: one call each time they do. local is the
// count of local refusals at start.
func checkLocal(b *testing.B, st *Store, local uint64, start time.Time) {
	n := st.LocalRefusalStats().Local - local
	if aged := uint64(time.Since(start)/DefaultLocalRefusalMaxAge) + 1; n+aged < uint64(b.N) {
		b.Fatalf("%d of %d refusals were local, want all but at most %d", n, b.N, aged)
	}
}

// BenchmarkLocalRefusalAll measures one local refusal of an AllowAll
// (docs/BENCHMARKS.md, "Refused floods"): one caller, three policies of
// different algorithms on one key, whose cached states the store holds
// after Redis refused the whole; the token bucket (10 an hour) refuses
// every request, the two windows would admit theirs. Only a state older
// than DefaultLocalRefusalMaxAge reaches Redis.
func BenchmarkLocalRefusalAll(b *testing.B) {
	st, _ := benchStore(b)
	reqs := []sluice.Request{
		{Policy: new(sluice.FixedWindow(1_000_000, time.Hour).Named("hourly")), Key: "abuser", Cost: 1},
		{Policy: new(sluice.TokenBucket(10, time.Hour, 10).Named("flood")), Key: "abuser", Cost: 1},
		{Policy: new(sluice.SlidingWindow(1_000_000, time.Minute).Named("minutely")), Key: "abuser", Cost: 1},
	}
	out := make([]sluice.Decision, len(reqs))
	for range 11 {
		if _, err := st.AllowAll(b.Context(), time.Time{}, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	local, start := st.LocalRefusalStats().Local, time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := st.AllowAll(b.Context(), time.Time{}, reqs, out); err != nil || d.Allowed || out[1].Allowed || !out[0].Allowed {
			b.Fatalf("AllowAll = %+v, %v (%+v); want the token bucket's refusal", d, err, out)
		}
	}
	checkLocal(b, st, local, start)
}

// BenchmarkAllowAll measures one all-or-nothing decision over two
// policies of one key.
func BenchmarkAllowAll(b *testing.B) {
	st, _ := benchStore(b)
	second := sluice.TokenBucket(1_000_000, time.Second, 0)
	hour := sluice.FixedWindow(1_000_000_000, time.Hour)
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []sluice.Request{{Policy: &second, Cost: 1}, {Policy: &hour, Cost: 1}}
		for pb.Next() {
			k := benchKeys[n.Add(1)%int64(len(benchKeys))]
			reqs[0].Key, reqs[1].Key = k, k
			if _, err := st.AllowAll(b.Context(), time.Time{}, reqs, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEvalsha measures a bare EVALSHA round trip of a trivial script
// through the same client library and options, the floor under any
// decision.
func BenchmarkEvalsha(b *testing.B) {
	srv := testkit.StartRedis(b)
	c := testkit.RedisClient(b, srv.Addr)
	trivial := rueidis.NewLuaScript("return 1")
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := trivial.Exec(b.Context(), c, nil, nil).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := trivial.Exec(b.Context(), c, nil, nil).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkBytesPerKey reports the Redis memory one tracked key takes
// (INFO memory's used_memory, before and after b.N keys), for each
// algorithm after one admitted request. Run it with a fixed count, such as
// -benchtime 20000x.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, a := range sluice.Algorithms() {
		b.Run("alg="+a.String(), func(b *testing.B) {
			st, srv := benchStore(b)
			p := sluice.Policy{Algorithm: a, Limit: 100, Period: time.Hour}
			used := func() float64 {
				info, err := srv.Info("memory")
				if err != nil {
					b.Fatal(err)
				}
				v, _ := strconv.ParseFloat(info["used_memory"], 64)
				return v
			}
			before := used()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := "203.0.113." + strconv.FormatInt(n.Add(1), 10)
					if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: k, Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric((used()-before)/float64(b.N), "B/key")
		})
	}
}

// BenchmarkCallers measures the service's shape of decision (the
// allowed-window workload of the service benchmark: a fixed window of
// 1,000,000 a second, every decision admitted, 10,000 keys) from 1, 16 and
// 64 callers, each making one decision after another, and reports what
// each decision costs: latency as its caller sees it (p50-µs, p99-µs), the
// CPU of this process (client-cpu-µs/op: the store, rueidis and the
// callers' loop) and of redis-server (redis-cpu-µs/op, INFO cpu), and
// Redis's script calls per decision (calls/op: below 1 when batched).
//
//	go test ./redisstore -run '^$' -bench Callers -benchtime 3s
func BenchmarkCallers(b *testing.B) {
	st, srv := benchStore(b)
	p := sluice.FixedWindow(1_000_000, time.Second)
	for _, callers := range []int{1, 16, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			decide := func(i int64) error {
				d, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: &p, Key: benchKeys[i%int64(len(benchKeys))], Cost: 1})
				if err == nil && !d.Allowed {
					err = fmt.Errorf("denied: %+v", d)
				}
				return err
			}
			for i := range callers {
				if err := decide(int64(i)); err != nil {
					b.Fatal(err)
				}
			}
			redis0, calls0 := redisUsage(b, srv)
			cpu0 := testkit.Process()
			b.ReportAllocs()
			testkit.RunCallers(b, callers, decide)
			cpu := testkit.Process() - cpu0
			redis, calls := redisUsage(b, srv)
			n := float64(b.N)
			b.ReportMetric(cpu.Seconds()*1e6/n, "client-cpu-µs/op")
			b.ReportMetric((redis-redis0).Seconds()*1e6/n, "redis-cpu-µs/op")
			b.ReportMetric(float64(calls-calls0)/n, "calls/op")
		})
	}
}

// redisUsage returns redis-server's CPU time so far and how many script
// calls it has run.
func redisUsage(b *testing.B, srv *testkit.RedisServer) (time.Duration, int64) {
	b.Helper()
	cpu, err := srv.CPU()
	if err != nil {
		b.Fatal(err)
	}
	calls, _, err := srv.ScriptCalls()
	if err != nil {
		b.Fatal(err)
	}
	return cpu, calls
}
