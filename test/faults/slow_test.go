package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/redisstore"
)

// slowTimeout is the store's timeout in the slow-Redis tests: the
// default, so that 5 ms of latency is well within it and 100 ms well
// beyond (a reply that comes just as the timeout passes may win).
const slowTimeout = redisstore.DefaultTimeout

// stage is one setting of the proxy between Sluice and Redis.
type stage struct {
	name  string
	delay time.Duration
	cut   bool // cut a reply in the middle every 50 ms
	// want says what the calls of the stage get: "redis" (decided by
	// Redis, at most 5% not), "degraded" (every call that starts in the
	// stage decided by the failure policy), "any", or "" (a stage that
	// follows a fault, where Redis must decide again within within).
	want   string
	within time.Duration
}

// slowStages are the proxy's settings in order: latencies of 0, 5 ms,
// 100 ms and 2 s, replies cut in the middle, and recoveries in between.
func slowStages(long bool) (stages []stage, each time.Duration) {
	each = 600 * time.Millisecond
	if long {
		each = 2 * time.Second
	}
	return []stage{
		{name: "0 ms", want: "redis"},
		{name: "5 ms", delay: 5 * time.Millisecond, want: "redis"},
		{name: "100 ms", delay: 100 * time.Millisecond, want: "degraded"},
		{name: "back to 0 after 100 ms", within: time.Second},
		{name: "2 s", delay: 2 * time.Second, want: "degraded"},
		// The replies already delayed by 2 s arrive first.
		{name: "back to 0 after 2 s", within: 3 * time.Second},
		{name: "cut mid-reply", cut: true, want: "any"},
		{name: "back to 0 after cuts", within: time.Second},
	}, each
}

// stageRun is when each stage began and ended, in the run's time: a
// stage's calls are those that started after its setting was made and
// before the next stage's was.
type stageRun struct {
	stages     []stage
	begin, end []time.Duration
}

// driveProxy sets the proxy to each stage in turn, each for the time
// each, or within when that is longer.
// It closes stop when the last stage ends.
func driveProxy(p *testkit.RedisProxy, stages []stage, each time.Duration, sr *stageRun, stop chan struct{}) func(r *result) {
	return func(r *result) {
		sr.stages = stages
		for i, s := range stages {
			if i > 0 {
				sr.end = append(sr.end, time.Since(r.t0))
			}
			p.SetDelay(s.delay)
			sr.begin = append(sr.begin, time.Since(r.t0))
			end := time.Now().Add(max(each, s.within))
			for time.Now().Before(end) {
				if s.cut {
					p.DropMidReply()
				}
				time.Sleep(50 * time.Millisecond) // the stage's timeline: a cut every 50ms
			}
		}
		sr.end = append(sr.end, time.Since(r.t0))
		close(stop)
	}
}

// check checks each stage's calls and logs a table of them.
func (sr *stageRun) check(t *testing.T, r *result, timeout time.Duration, outliers int) {
	t.Helper()
	r.checkUnexpected(t)
	overloaded := r.overloaded(t)
	var b strings.Builder
	var bad violations
	defer bad.report(t)
	fmt.Fprintf(&b, "| stage | from | calls | by Redis | degraded | slowest | Redis again after |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, s := range sr.stages {
		from, to := sr.begin[i], sr.end[i]
		var n, byRedis, slowDecided, quiet, quietRedis int
		var slow time.Duration
		back := time.Duration(-1)
		for _, c := range r.calls {
			if c.start < from || c.start >= to {
				continue
			}
			n++
			slow = max(slow, c.took())
			q := !r.noisy(c, redisstore.DefaultBreakerCooldown)
			if q {
				quiet++
			}
			if c.degraded {
				continue
			}
			if q {
				quietRedis++
			}
			if s.want == "degraded" && c.end < to && c.took() < s.delay {
				// A reply that comes through the proxy takes the delay at
				// least; a caller that only looked after the delay (the
				// machine stalled it) may find the reply there before the
				// timeout's error. (A call that ended after the next
				// stage's setting may have reached Redis after it.)
				bad.add(fmt.Sprintf("stage %s: a call was decided by Redis faster than the proxy's delay", s.name), c)
			}
			byRedis++
			if back < 0 {
				back = c.end - from
			}
			if s.delay > 0 && c.took() < s.delay {
				slowDecided++
			}
		}
		switch s.want {
		case "redis":
			// A loaded machine times out a few calls to a working Redis:
			// the calls when the test process stalled are not counted.
			t.Logf("stage %s: %d of %d calls at quiet times not decided by Redis (%d at noisy times)", s.name, quiet-quietRedis, quiet, n-quiet)
			if (quiet-quietRedis)*20 > quiet && !overloaded {
				t.Errorf("stage %s: %d of %d calls at quiet times not decided by Redis, want at most 5%%", s.name, quiet-quietRedis, quiet)
			}
			if slowDecided > 0 {
				t.Errorf("stage %s: %d calls decided by Redis faster than the proxy's delay", s.name, slowDecided)
			}
		case "":
			if back < 0 || back > s.within {
				t.Errorf("stage %s: Redis decided again %v after the stage began, want within %v", s.name, back, s.within)
			}
		}
		if n == 0 {
			t.Errorf("stage %s: no calls", s.name)
		}
		backs := "-"
		if back >= 0 {
			backs = fmt.Sprintf("%.0f ms", float64(back)/float64(time.Millisecond))
		}
		fmt.Fprintf(&b, "| %s | %.1fs | %d | %d | %d | %.1f ms | %s |\n", s.name, from.Seconds(), n, byRedis, n-byRedis, float64(slow)/float64(time.Millisecond), backs)
	}
	t.Logf("per stage (store timeout %v, on_error deny, CPU pressure %.0f%%):\n%s", timeout, 100*r.pressure, b.String())
	r.checkBound(t, "every stage", 0, sr.end[len(sr.end)-1], timeout+slack, outliers)
}

// TestSlowRedisUnderLoad puts testkit's proxy between Sluice and Redis
// and, under load from many callers, adds 0, 5 ms, 100 ms and 2 s of
// latency to Redis's replies and cuts replies in the middle: a Redis
// within the timeout decides every call; beyond it, every call is decided
// by the failure policy (deny) within the timeout plus 20 ms, however
// slow Redis is; and Redis decides again once it is fast. It extends
// redisstore's TestSlowRedis (one caller) with concurrency and with the
// service.
func TestSlowRedisUnderLoad(t *testing.T) {
	sc := testScale()
	stages, each := slowStages(sc.long)
	t.Run("library", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		proxy := testkit.StartRedisProxy(t, srv.Addr)
		st := teststore.RedisOn(t, redisstore.Options{Addrs: []string{proxy.Addr}, Failure: redisstore.FailDeny, Timeout: slowTimeout})
		// A limit no run reaches: every denial is the failure policy's.
		lim := warmLimiter(t, st, sluice.TokenBucket(1_000_000, time.Second, 0))
		decide := func(ctx context.Context, key int) (outcome, bool, error) {
			d, err := lim.Allow(ctx, dieKey(key), 1)
			switch {
			case err != nil:
				return 0, false, err
			case d.Allowed != !d.Degraded:
				return 0, false, fmt.Errorf("decision %+v: want allowed by Redis or denied by the failure policy", d)
			case d.Allowed:
				return allowed, false, nil
			}
			return denied, true, nil
		}
		sr := &stageRun{stages: stages}
		stop := make(chan struct{})
		l := load{callers: sc.callers, keys: dieKeys, pace: sc.pace, dur: time.Minute, stop: stop}
		r := l.run(t.Context(), decide, driveProxy(proxy, stages, each, sr, stop))
		sr.check(t, r, slowTimeout, 0)
	})
	t.Run("service", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		proxy := testkit.StartRedisProxy(t, srv.Addr)
		cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q]}
  timeout: %v
  on_error: deny
limits:
  big: {algorithm: token_bucket, limit: 1000000, period: 1s}
`, proxy.Addr, slowTimeout))
		svc := startService(t, "sluice", "--config", cfg)
		client := newClient(t, sc.callers)
		warmUp(t, func(ctx context.Context) (bool, error) {
			out, degraded, err := checkService(ctx, client, svc.http, "big", "warm-up")
			return err == nil && out == allowed && !degraded, err
		})
		decide := func(ctx context.Context, key int) (outcome, bool, error) {
			out, degraded, err := checkService(ctx, client, svc.http, "big", dieKey(key))
			if err == nil && (out == allowed) == degraded {
				return 0, false, fmt.Errorf("outcome %d, degraded %v: want allowed by Redis or denied by the failure policy", out, degraded)
			}
			return out, degraded, err
		}
		sr := &stageRun{stages: stages}
		stop := make(chan struct{})
		l := load{callers: sc.callers, keys: dieKeys, pace: sc.servicePace, dur: time.Minute, stop: stop, watch: svc.Cmd.Process.Pid}
		r := l.run(t.Context(), decide, driveProxy(proxy, stages, each, sr, stop))
		sr.check(t, r, slowTimeout, serviceOutliers)
	})
}
