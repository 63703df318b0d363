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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/redisstore"
)

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
			all = append(slices.Clip(libs), algorithms...)
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
		libs = append(libs, library{"sluice-" + p.Algorithm.String(), func(ctx context.Context, i int) error {
			d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: names[i], Cost: 1})
			if err == nil && !d.Allowed {
				err = fmt.Errorf("%s denied: %+v", p.Algorithm, d)
			}
			return err
		}})
	}
	return libs
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
