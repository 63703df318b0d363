package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Settings of the Redis-dies tests. The breaker keeps its defaults (open
// after 5 failures in a row, probe after 250 ms); the timeout is twice the
// default, so that a loaded test machine rarely times out a working Redis.
const (
	dieTimeout = 100 * time.Millisecond
	// dieLimit is each key's limit, per day: no token comes back within a
	// run, so the local store's admissions can be counted exactly.
	dieLimit = 50
	dieKeys  = 64
	// slack is what a call may take beyond the store's timeout once the
	// circuit is open: the 20 ms docs/reliability.md promises.
	slack = 20 * time.Millisecond
	// comeback is how soon Redis must decide again once it answers.
	comeback = time.Second
	// serviceOutliers is how many calls to the service in a million may
	// exceed a latency bound beyond the measured stalls: the service's
	// pauses that its threads' CPU waits do not show (its garbage
	// collector, the kernel's network stack).
	serviceOutliers = 1000
)

var failurePolicies = []redisstore.FailurePolicy{redisstore.FailAllow, redisstore.FailDeny, redisstore.FailLocal, redisstore.FailError}

func dieKey(i int) string { return fmt.Sprintf("client-%d", i) }

// outage is what a Redis-dies run did, in the run's time.
type outage struct {
	kill     time.Duration // Kill called
	killed   time.Duration // Kill returned: Redis is gone
	restart  time.Duration // Restart called
	back     time.Duration // Restart returned: Redis answers PING
	opened   time.Duration // the breaker first opened after the kill
	hasOpen  bool
	timeout  time.Duration // the store's timeout
	policy   redisstore.FailurePolicy
	bucketOf time.Duration
	outliers int // per million calls, for checkBound
}

func (o *outage) events() []event {
	ev := []event{{o.killed, "Redis killed"}, {o.back, "Redis back"}}
	if o.hasOpen {
		ev = append(ev, event{o.opened, "breaker open"})
	}
	return ev
}

// killAndRestart kills srv at sc.kill and restarts it at sc.restart, into o.
func killAndRestart(t *testing.T, sc scale, srv *testkit.RedisServer, o *outage) func(r *result) {
	return func(r *result) {
		time.Sleep(sc.kill - time.Since(r.t0)) // the scenario's timeline: the kill
		o.kill = time.Since(r.t0)
		srv.Kill()
		o.killed = time.Since(r.t0)
		time.Sleep(sc.restart - time.Since(r.t0)) // the timeline: the restart
		o.restart = time.Since(r.t0)
		if err := srv.Restart(); err != nil {
			t.Errorf("restarting Redis: %v", err)
		}
		o.back = time.Since(r.t0)
	}
}

// checkOutage checks a Redis-dies run against docs/reliability.md: Redis
// decides before the kill; once the circuit is open no call takes longer
// than the timeout plus 20 ms; while Redis is away every decision follows
// the failure policy; and Redis decides again within a second of its
// return.
func checkOutage(t *testing.T, r *result, o *outage) {
	t.Helper()
	r.checkUnexpected(t)
	t.Logf("%d calls, CPU pressure %.0f%%; per %v:\n%s", len(r.calls), 100*r.pressure, o.bucketOf, r.table(o.bucketOf, o.events()))
	if !o.hasOpen {
		t.Errorf("the circuit breaker never opened after Redis was killed")
		o.opened = o.killed
	}
	// The two phases with Redis up: before the kill, and after the comeback.
	var up [2]int       // calls counted in each
	var notRedis [2]int // of those, the calls Redis did not decide
	var noisy [2]int    // calls not counted there: the machine stalled
	var during int
	countUp := func(phase int, c call) {
		if r.noisy(c, redisstore.DefaultBreakerCooldown) {
			noisy[phase]++
			return
		}
		up[phase]++
		if c.degraded || c.out == failed {
			notRedis[phase]++
		}
	}
	var bad violations
	byKey := map[int32][2]int{} // degraded decisions per key: allowed, all
	firstBack := time.Duration(-1)
	for _, c := range r.calls {
		if c.degraded {
			n := byKey[c.key]
			if c.out == allowed {
				n[0]++
			}
			n[1]++
			byKey[c.key] = n
		}
		switch {
		case c.end < o.kill:
			countUp(0, c)
		case c.start >= o.killed && c.end <= o.restart:
			during++
			var ok bool
			switch o.policy {
			case redisstore.FailAllow:
				ok = c.degraded && c.out == allowed
			case redisstore.FailDeny:
				ok = c.degraded && c.out == denied
			case redisstore.FailLocal:
				ok = c.degraded && c.out != failed
			case redisstore.FailError:
				ok = c.out == failed
			}
			if !ok {
				bad.add(fmt.Sprintf("with Redis away, a call did not follow on_error %v", o.policy), c)
			}
		case c.start >= o.back:
			if !c.degraded && c.out != failed && firstBack < 0 {
				firstBack = c.end - o.back
			}
			if c.start >= o.back+comeback {
				countUp(1, c)
			}
		}
	}
	bad.report(t)
	overloaded := r.overloaded(t)
	// With Redis up, a call slower than the timeout is decided by the
	// failure policy too: a loaded machine makes a few, and those made
	// when the test process stalled are not counted.
	for i, phase := range []struct {
		name string
		n    int
	}{{"before the kill", up[0]}, {fmt.Sprintf("from %v after Redis came back", comeback), up[1]}} {
		t.Logf("%s: %d of %d calls not decided by Redis (%d more when the machine stalled)", phase.name, notRedis[i], phase.n, noisy[i])
		if notRedis[i]*100 > phase.n && !overloaded {
			t.Errorf("%s: %d of %d calls were not decided by Redis, want at most 1%%", phase.name, notRedis[i], phase.n)
		}
	}
	if up[0] == 0 || during == 0 {
		t.Errorf("%d calls before the kill and %d while Redis was away; want some of each", up[0], during)
	}
	r.checkBound(t, "with the circuit open", o.opened, o.restart, o.timeout+slack, o.outliers)
	switch {
	case firstBack < 0:
		t.Errorf("Redis never decided again after it came back")
	case firstBack > comeback:
		t.Errorf("Redis decided again %v after it came back, want within %v", firstBack, comeback)
	default:
		t.Logf("Redis decided again %v after it answered PING (%v after the restart began)", firstBack, firstBack+o.back-o.restart)
	}
	if o.policy == redisstore.FailLocal {
		// Every degraded decision came from the local store, which started
		// empty and refills no token within the run: per key, exactly the
		// first dieLimit of them were admitted.
		for k, n := range byKey {
			if want := min(dieLimit, n[1]); n[0] != want {
				t.Errorf("key %d: the local store admitted %d of %d degraded requests, want %d", k, n[0], n[1], want)
			}
		}
	}
}

// violations counts the calls that broke a promise, by promise, with the
// first example of each, so that a failure reads as a few lines.
type violations struct {
	order []string
	n     map[string]int
	first map[string]call
}

func (v *violations) add(what string, c call) {
	if v.n == nil {
		v.n, v.first = map[string]int{}, map[string]call{}
	}
	if v.n[what] == 0 {
		v.order = append(v.order, what)
		v.first[what] = c
	}
	v.n[what]++
}

func (v *violations) report(t *testing.T) {
	t.Helper()
	for _, what := range v.order {
		c := v.first[what]
		t.Errorf("%s: %d calls, the first at %v (took %v): outcome %d, degraded %v", what, v.n[what], c.start, c.took(), c.out, c.degraded)
	}
}

// eachFailurePolicy runs run at the test's scale as one subtest per
// failure policy, named after it.
func eachFailurePolicy(t *testing.T, run func(t *testing.T, sc scale, fp redisstore.FailurePolicy)) {
	sc := testScale()
	for _, fp := range failurePolicies {
		t.Run(fp.String(), func(t *testing.T) { run(t, sc, fp) })
	}
}

// TestRedisDiesLibrary runs callers through a sluice.Limiter over a Redis
// store with its default timeout and breaker; Redis is SIGKILLed under
// load and restarted on the same port. For each failure policy: no panic,
// no goroutine left behind once the store is closed, and checkOutage's
// promises. It must not run in parallel (it counts goroutines).
func TestRedisDiesLibrary(t *testing.T) { eachFailurePolicy(t, redisDiesLibrary) }

func redisDiesLibrary(t *testing.T, sc scale, fp redisstore.FailurePolicy) {
	srv := testkit.StartRedis(t)
	base := goroutineBaseline()
	o := &outage{timeout: dieTimeout, policy: fp, bucketOf: sc.bucket}
	var mu sync.Mutex
	var opens []time.Time
	opts := redisstore.Options{
		Addrs:   []string{srv.Addr},
		Failure: fp,
		Timeout: dieTimeout,
		// Local refusals off: the load exhausts its 64 keys in the first
		// half second, and their cached refusals would then answer every
		// call without Redis, so the outage (what this test measures) would
		// never be seen. That a cached refusal stays a refusal while Redis
		// is down is redisstore's TestLocalRefusalsRedisDown.
		LocalRefusals: redisstore.LocalRefusals{Off: true},
		OnBreakerChange: func(_, to redisstore.BreakerState) {
			if to == redisstore.BreakerOpen {
				mu.Lock()
				opens = append(opens, time.Now())
				mu.Unlock()
			}
		},
	}
	var local *memstore.Store
	if fp == redisstore.FailLocal {
		local = memstore.New(memstore.Options{MaxKeys: 10_000})
		opts.Local = local
	}
	st, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lim := warmLimiter(t, st, sluice.TokenBucket(dieLimit, 24*time.Hour, 0))
	keys := make([]string, dieKeys)
	for i := range keys {
		keys[i] = dieKey(i)
	}
	decide := func(ctx context.Context, key int) (outcome, bool, error) {
		d, err := lim.Allow(ctx, keys[key], 1)
		switch {
		case err != nil && fp == redisstore.FailError:
			if d != (sluice.Decision{}) {
				return 0, false, fmt.Errorf("an error with a decision: %+v, %w", d, err)
			}
			return failed, false, nil
		case err != nil:
			return 0, false, err
		case d.Allowed:
			return allowed, d.Degraded, nil
		}
		return denied, d.Degraded, nil
	}
	l := load{callers: sc.callers, keys: dieKeys, pace: sc.pace, dur: sc.total}
	r := l.run(t.Context(), decide, killAndRestart(t, sc, srv, o))
	mu.Lock()
	for _, ts := range opens {
		if at := r.at(ts); at >= o.kill {
			o.opened, o.hasOpen = at, true
			break
		}
	}
	mu.Unlock()
	checkOutage(t, r, o)

	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if local != nil {
		local.Close()
	}
	checkGoroutines(t, base)
}

// warmLimiter returns a Limiter of p over st once Redis has decided its
// first request (see warmUp).
func warmLimiter(t *testing.T, st sluice.Store, p sluice.Policy) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(st, p)
	if err != nil {
		t.Fatal(err)
	}
	warmUp(t, func(ctx context.Context) (bool, error) {
		d, err := lim.Allow(ctx, "warm-up", 1)
		return err == nil && !d.Degraded, err
	})
	return lim
}

// warmUp calls try until it reports a decision by Redis: the first call
// makes the connection and loads the script, which can take longer than
// the store's timeout on a loaded machine.
func warmUp(t *testing.T, try func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	defer func() {
		if t.Failed() && last != nil {
			t.Logf("the last try: %v", last)
		}
	}()
	testkit.WaitFor(t, 10*time.Second, "a decision by Redis", func() bool {
		ok, err := try(t.Context())
		last = err
		return ok
	})
}

// TestRedisDiesService is TestRedisDiesLibrary through the service: the
// sluice binary with store.backend redis and each on_error, and callers on
// POST /v1/check. on_error: deny answers denied and degraded; error
// answers 503. The breaker's opening is read from the service's log.
func TestRedisDiesService(t *testing.T) { eachFailurePolicy(t, redisDiesService) }

func redisDiesService(t *testing.T, sc scale, fp redisstore.FailurePolicy) {
	srv := testkit.StartRedis(t)
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q], prefix: "faults:"}
  timeout: %v
  on_error: %s
limits:
  faults: {algorithm: token_bucket, limit: %d, period: 24h}
`, srv.Addr, dieTimeout, fp, dieLimit))
	svc := startService(t, "sluice", "--config", cfg)
	client := newClient(t, sc.callers)
	warmUp(t, func(ctx context.Context) (bool, error) {
		out, degraded, err := checkService(ctx, client, svc.http, "faults", "warm-up")
		return err == nil && out != failed && !degraded, err
	})
	keys := make([]string, dieKeys)
	for i := range keys {
		keys[i] = dieKey(i)
	}
	decide := func(ctx context.Context, key int) (outcome, bool, error) {
		return checkService(ctx, client, svc.http, "faults", keys[key])
	}
	o := &outage{timeout: dieTimeout, policy: fp, bucketOf: sc.bucket, outliers: serviceOutliers}
	l := load{callers: sc.callers, keys: dieKeys, pace: sc.servicePace, dur: sc.total, watch: svc.Cmd.Process.Pid}
	r := l.run(t.Context(), decide, killAndRestart(t, sc, srv, o))
	// The log's times have milliseconds: an opening in the kill's
	// millisecond counts.
	for _, ts := range logTimes(svc.log.String(), `msg="redis circuit breaker changed state"`, "from=closed", "to=open") {
		if at := r.at(ts); at >= o.kill.Truncate(time.Millisecond)-time.Millisecond {
			o.opened, o.hasOpen = max(at, o.kill), true
			break
		}
	}
	checkOutage(t, r, o)
	if svc.Exited() {
		t.Errorf("the service exited during the run: %v", svc.Err())
	}
}
