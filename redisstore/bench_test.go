package redisstore

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// benchStore returns a store on a private Redis for benchmarks.
func benchStore(b *testing.B) (*Store, *redistest.Server) {
	b.Helper()
	srv := redistest.Start(b)
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
					if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: p, Key: benchKeys[i%int64(len(benchKeys))], Cost: 1}); err != nil {
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
		if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: p, Key: benchKeys[i%len(benchKeys)], Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
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
		reqs := []sluice.Request{{Policy: second, Cost: 1}, {Policy: hour, Cost: 1}}
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
	srv := redistest.Start(b)
	c := redistest.Client(b, srv.Addr)
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
					if _, err := st.Allow(b.Context(), time.Time{}, sluice.Request{Policy: p, Key: k, Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric((used()-before)/float64(b.N), "B/key")
		})
	}
}
