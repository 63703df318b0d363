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
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
		{"sluice", allowing(st, &policy, 1, "denied")},
		{"sluice-unbatched", allowing(unbatched, &policy, 1, "denied")},
		{"redis_rate", func(ctx context.Context, i int) error {
			r, err := rl.Allow(ctx, names[i], limit)
			if err == nil && r.Allowed == 0 {
				err = fmt.Errorf("denied: %+v", r)
			}
			return err
		}},
	}
}

// allowing is the decision of a Sluice library: st's Allow of cost units
// of p on key number i, failing with refused when the store refuses.
func allowing(st sluice.Store, p *sluice.Policy, cost int64, refused string) decideFunc {
	return func(ctx context.Context, i int) error {
		d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: p, Key: names[i], Cost: cost})
		if err == nil && !d.Allowed {
			err = fmt.Errorf("%s: %+v", refused, d)
		}
		return err
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

// BenchmarkRedisInstructions counts the instructions redis-server runs per
// decision, with redis-server under valgrind's callgrind: a count that does
// not depend on what else the machine is doing, where Redis's CPU time per
// decision (BenchmarkRedis) moves with the machine's load. Each
// sub-benchmark zeroes callgrind's counters, makes b.N decisions, and
// reports redis-instr/decision (every instruction of redis-server over those
// decisions: reading the commands, the scripts, the replies) and
// decisions/call. At 1 caller it also runs Sluice's five other algorithms
// (lib=sluice is GCRA, redis_rate's algorithm). SLUICE_CALLGRIND_OUT=dir
// keeps callgrind's dumps in dir, for callgrind_annotate. It runs only with SLUICE_CALLGRIND=1, and needs valgrind
// (apt-get install valgrind); Redis under callgrind is some 50 times
// slower, so give it a count:
//
//	cd bench && SLUICE_CALLGRIND=1 go test ./redis -run '^$' -bench RedisInstructions -benchtime 2000x
func BenchmarkRedisInstructions(b *testing.B) {
	if os.Getenv("SLUICE_CALLGRIND") != "1" {
		b.Skip("set SLUICE_CALLGRIND=1 to count Redis's instructions under valgrind")
	}
	testkit.RequirePrograms(b, "valgrind", "callgrind_control")
	dir := os.Getenv("SLUICE_CALLGRIND_OUT")
	if dir == "" {
		dir = b.TempDir()
	}
	out := filepath.Join(dir, "callgrind.out")
	srv := testkit.StartRedis(b, testkit.RedisOptions{Wrap: []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + out}})
	libs := libraries(b, srv.Addr)
	algorithms := algorithmLibraries(b, srv.Addr)
	for _, callers := range []int{1, 64} {
		all := libs
		if callers == 1 {
			all = slices.Concat(libs, algorithms, usageLibraries(b, srv.Addr))
		}
		for _, lib := range all {
			if callers > 1 && lib.name == "evalsha" {
				continue
			}
			b.Run(fmt.Sprintf("callers=%d/lib=%s", callers, lib.name), func(b *testing.B) {
				countInstructions(b, srv, out, callers, lib.decide)
			})
		}
	}
}

// algorithmLibraries returns Sluice's other five algorithms (lib=sluice is
// GCRA, the algorithm redis_rate implements), each with a policy that
// admits nearly everything, as libraries does, unbatched.
func algorithmLibraries(b *testing.B, addr string) []library {
	st := teststore.RedisOn(b, redisstore.Options{Addrs: []string{addr}, Failure: redisstore.FailError, Timeout: 10 * time.Second, MaxBatch: 1})
	var libs []library
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(1_000_000, time.Second, 1_000_000),
		sluice.LeakyBucket(1_000_000, time.Second, 1_000_000),
		sluice.FixedWindow(1_000_000, time.Second),
		sluice.SlidingWindow(1_000_000, time.Second),
		sluice.SlidingLog(1_000_000, time.Second),
	} {
		libs = append(libs, library{"sluice-" + p.Algorithm.String(), allowing(st, &p, 1, p.Algorithm.String()+" denied")})
	}
	return libs
}

// usageLibraries returns Sluice's calls for costs known afterwards, on a
// GCRA policy that admits nearly everything, unbatched: a check (cost 0),
// a debit, and an estimate admitted with SettleWithin and settled by a
// Release with its actual cost (two script calls each, counted as one).
func usageLibraries(b *testing.B, addr string) []library {
	st := teststore.RedisOn(b, redisstore.Options{Addrs: []string{addr}, Failure: redisstore.FailError, Timeout: 10 * time.Second, MaxBatch: 1})
	p := sluice.GCRA(1_000_000_000, time.Second, 1_000_000_000)
	return []library{
		{"sluice-check", allowing(st, &p, 0, "check refused")},
		{"sluice-debit", func(ctx context.Context, i int) error {
			_, err := st.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: names[i], Cost: 1})
			return err
		}},
		{"sluice-settled", func(ctx context.Context, i int) error {
			d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: names[i], Cost: 2, SettleWithin: time.Minute})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("estimate refused: %+v", d)
			}
			if err == nil {
				_, err = st.Release(ctx, time.Time{}, d.Lease, []int64{1})
			}
			return err
		}},
	}
}

// countInstructions makes b.N decisions from callers goroutines and reports
// the instructions redis-server ran for them, read from a callgrind dump.
func countInstructions(b *testing.B, srv *testkit.RedisServer, out string, callers int, decide decideFunc) {
	ctx := context.Background()
	for i := range callers {
		if err := decide(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	calls0, _ := scriptStats(b, srv)
	callgrindControl(b, "-z", srv.Pid())
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				if err := decide(ctx, int(n%keys)); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	callgrindControl(b, "-d", srv.Pid())
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	calls, _ := scriptStats(b, srv)
	ir := lastDumpTotal(b, out)
	b.ReportMetric(float64(ir)/float64(b.N), "redis-instr/decision")
	if calls > calls0 {
		b.ReportMetric(float64(b.N)/float64(calls-calls0), "decisions/call")
	}
}

// callgrindControl sends a command (-z: zero the counters, -d: dump them)
// to the callgrind run of process pid.
func callgrindControl(b *testing.B, command string, pid int) {
	if out, err := exec.Command("callgrind_control", command, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %s %d: %v: %s", command, pid, err, out)
	}
}

// lastDumpTotal returns the instruction count of the newest dump of the
// callgrind run writing to out (out.1, out.2, ...): its "summary:" line.
func lastDumpTotal(b *testing.B, out string) int64 {
	dumps, err := filepath.Glob(out + ".*")
	if err != nil || len(dumps) == 0 {
		b.Fatalf("no callgrind dump next to %s (%v)", out, err)
	}
	number := func(path string) int {
		n, _ := strconv.Atoi(path[strings.LastIndexByte(path, '.')+1:])
		return n
	}
	newest := slices.MaxFunc(dumps, func(x, y string) int { return number(x) - number(y) })
	f, err := os.Open(newest)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary:"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				b.Fatalf("%s: summary line %q", newest, sc.Text())
			}
			return n
		}
	}
	b.Fatalf("%s: no summary line (%v)", newest, sc.Err())
	return 0
}
