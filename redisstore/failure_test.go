package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// Failure-test settings: a short timeout, and a margin for a loaded test
// machine on top of it (all stretched by failScale under the race
// detector).
const (
	failTimeout  = failScale * 50 * time.Millisecond
	failMargin   = failScale * 100 * time.Millisecond
	failCooldown = failScale * 100 * time.Millisecond
)

// warm readies st for a test with a short Options.Timeout, so that the
// test times decisions only: it waits (up to 10s) for st's connection, and
// loads st's scripts into the Redis servers at addrs (SCRIPT LOAD; on a
// cluster every node, replicas too, which may be promoted). Connecting and
// a script's first run (NOSCRIPT, then EVAL with its text) can take longer
// than such a timeout on a loaded machine.
func warm(t *testing.T, st *Store, addrs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := st.conn(ctx); err != nil {
		t.Fatalf("warm: %v", err)
	}
	single, general, many, settle, batch, batchOne, err := scripts(st.refusals != nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range addrs {
		for _, src := range slices.Concat(single[:], general[:], batchOne[:], []string{many, settle, batch}) {
			if src == "" {
				continue
			}
			if _, err := testkit.RedisDo(addr, "SCRIPT", "LOAD", src); err != nil {
				t.Fatalf("warm: SCRIPT LOAD on %s: %v", addr, err)
			}
		}
	}
}

// lagProbe measures how late this process's goroutines wake while a test
// runs: a goroutine sleeps 1 ms at a time and keeps its largest
// overshoot, which the returned function reads. On a loaded machine a call
// can take that much longer than the store makes it wait, through no fault
// of the store; the failure tests allow it on top of their margin (and log
// it), so that they fail for a store that waits too long, not for a busy
// scheduler. The probe stops when t ends.
func lagProbe(t *testing.T) func() time.Duration {
	var worst atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond) // the scheduler's lateness is what the probe measures
			if late := int64(time.Since(start) - time.Millisecond); late > worst.Load() {
				worst.Store(late)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		t.Logf("goroutines woke up to %v late", time.Duration(worst.Load()))
	})
	return func() time.Duration { return time.Duration(worst.Load()) }
}

// TestFailure stops Redis in the middle of a run, by killing it (connections
// refused) or pausing it (connections open, no answers), and checks that
// each failure policy does what it says, that no call blocks longer than
// the timeout plus a margin, and that decisions come from Redis again once
// it is back.
func TestFailure(t *testing.T) {
	for _, fp := range []FailurePolicy{FailAllow, FailDeny, FailLocal, FailError} {
		for _, how := range []string{"kill", "pause"} {
			t.Run(fp.String()+"/"+how, func(t *testing.T) { failureRun(t, fp, how) })
		}
	}
}

// takeRedisAway stops srv answering, as how says: "kill" kills it
// (connections refused), "pause" stops it with SIGSTOP (connections open,
// no answers) and resumes it, at the latest, when t ends.
func takeRedisAway(t *testing.T, srv *testkit.RedisServer, how string) {
	t.Helper()
	if how == "kill" {
		srv.Kill()
		return
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Resume() })
}

// bringRedisBack undoes takeRedisAway: it restarts a killed srv, empty,
// or resumes a paused one.
func bringRedisBack(t *testing.T, srv *testkit.RedisServer, how string) {
	t.Helper()
	if how == "kill" {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
}

func failureRun(t *testing.T, fp FailurePolicy, how string) {
	srv := testkit.StartRedis(t)
	var errs atomic.Int64
	var mu sync.Mutex
	var changes []string
	var recoveries []Recovery
	opts := Options{
		Failure:          fp,
		Timeout:          failTimeout,
		BreakerThreshold: 3,
		BreakerCooldown:  failCooldown,
		OnError:          func(error) { errs.Add(1) },
		OnBreakerChange: func(from, to BreakerState) {
			mu.Lock()
			changes = append(changes, from.String()+">"+to.String())
			mu.Unlock()
		},
		OnRecover: func(r Recovery) {
			mu.Lock()
			recoveries = append(recoveries, r)
			mu.Unlock()
		},
	}
	if fp == FailLocal {
		opts.Local = memstore.New(memstore.Options{})
	}
	st := newTestStore(t, []string{srv.Addr}, opts)
	warm(t, st, srv.Addr)
	lag := lagProbe(t)
	req := sluice.Request{Policy: new(sluice.TokenBucket(2, time.Hour, 0)), Key: "k", Cost: 1}

	d, err := st.Allow(t.Context(), time.Time{}, req)
	if err != nil || !d.Allowed || d.Degraded || d.Remaining != 1 {
		t.Fatalf("Allow with Redis up = %+v, %v; want allowed from Redis, 1 remaining", d, err)
	}

	away := time.Now()
	takeRedisAway(t, srv, how)

	// 4 goroutines × 10 calls while Redis is away.
	type result struct {
		d   sluice.Decision
		err error
		dur time.Duration
	}
	results := make(chan result, 40)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				start := time.Now()
				d, err := st.Allow(t.Context(), time.Time{}, req)
				results <- result{d, err, time.Since(start)}
			}
		})
	}
	wg.Wait()
	close(results)
	var slowest time.Duration
	var allowed, circuitOpen int
	for r := range results {
		slowest = max(slowest, r.dur)
		if r.dur > failTimeout+failMargin+lag() {
			t.Errorf("a call took %v with Redis away, want at most %v + %v (+ %v of scheduling lag)", r.dur, failTimeout, failMargin, lag())
		}
		if r.d.Allowed {
			allowed++
		}
		switch fp {
		case FailAllow:
			if r.err != nil || !r.d.Allowed || !r.d.Degraded {
				t.Errorf("FailAllow: Allow = %+v, %v; want allowed, degraded", r.d, r.err)
			}
		case FailDeny:
			if r.err != nil || r.d.Allowed || !r.d.Degraded || r.d.RetryAfter < time.Millisecond || r.d.Limit != 2 {
				t.Errorf("FailDeny: Allow = %+v, %v; want denied, degraded, RetryAfter >= 1ms, Limit 2", r.d, r.err)
			}
		case FailLocal:
			if r.err != nil || !r.d.Degraded {
				t.Errorf("FailLocal: Allow = %+v, %v; want a degraded decision", r.d, r.err)
			}
		case FailError:
			if r.err == nil || r.d != (sluice.Decision{}) {
				t.Errorf("FailError: Allow = %+v, %v; want the zero Decision and an error", r.d, r.err)
			}
			if errors.Is(r.err, ErrCircuitOpen) {
				circuitOpen++
			}
		}
	}
	t.Logf("slowest call with Redis away: %v", slowest)
	if fp == FailLocal && allowed != 2 {
		t.Errorf("FailLocal admitted %d of 40 requests under %v, want 2 (the local store's limit)", allowed, req.Policy)
	}
	if fp == FailError && circuitOpen == 0 {
		t.Errorf("FailError: no call failed with ErrCircuitOpen; the breaker never opened")
	}
	if st.BreakerState() == BreakerClosed {
		t.Errorf("BreakerState() = closed after 40 failed calls, want open or half-open")
	}
	if errs.Load() == 0 {
		t.Errorf("OnError was never called")
	}

	// Bring Redis back; decisions must come from it again, without a
	// restart of the store, within a few cooldowns.
	bringRedisBack(t, srv, how)
	back := time.Now()
	d = allowByRedis(t, st, req, 3*time.Second)
	t.Logf("Redis decided again %v after it came back", time.Since(back))
	if how == "kill" && (!d.Allowed || d.Remaining != 1) {
		// The restarted Redis is empty: a full bucket, charged once.
		t.Errorf("first decision from the restarted Redis = %+v, want allowed with 1 remaining", d)
	}
	if st.BreakerState() != BreakerClosed {
		t.Errorf("BreakerState() = %v after Redis answered, want closed", st.BreakerState())
	}
	mu.Lock()
	defer mu.Unlock()
	// OnRecover heard once of the failures OnError saw, and of how long
	// Redis was away.
	if len(recoveries) != 1 || recoveries[0].Failures != errs.Load() || recoveries[0].Down <= 0 || recoveries[0].Down > time.Since(away) || recoveries[0].Addr != "" {
		t.Errorf("OnRecover calls = %+v, want one of %d failures, down at most %v", recoveries, errs.Load(), time.Since(away))
	}
	if len(changes) < 2 || changes[0] != "closed>open" || changes[len(changes)-1] != "half-open>closed" && changes[len(changes)-1] != "open>closed" {
		t.Errorf("breaker changes = %v, want closed>open first and >closed last", changes)
	}
}

// TestRecoveryBelowThreshold stops Redis for two calls, fewer than open
// the breaker, and starts it again: OnRecover hears of the two failures
// once, when Redis answers the next call, and not of calls that follow.
func TestRecoveryBelowThreshold(t *testing.T) {
	srv := testkit.StartRedis(t)
	var errs atomic.Int64
	var mu sync.Mutex
	var recoveries []Recovery
	st := newTestStore(t, []string{srv.Addr}, Options{
		Timeout:          failTimeout,
		BreakerThreshold: 5,
		OnError:          func(error) { errs.Add(1) },
		OnRecover: func(r Recovery) {
			mu.Lock()
			recoveries = append(recoveries, r)
			mu.Unlock()
		},
	})
	warm(t, st, srv.Addr)
	req := sluice.Request{Policy: new(sluice.FixedWindow(100, time.Hour)), Key: "k", Cost: 1}
	if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || d.Degraded {
		t.Fatalf("Allow with Redis up = %+v, %v", d, err)
	}
	srv.Kill()
	away := time.Now()
	var failed time.Time // when the first failure was over
	for i := range 2 {
		if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || !d.Degraded {
			t.Fatalf("Allow with Redis down = %+v, %v; want degraded", d, err)
		}
		if i == 0 {
			failed = time.Now()
		}
	}
	if n := errs.Load(); n != 2 || st.BreakerState() != BreakerClosed {
		t.Fatalf("after two calls with Redis down: %d failures, breaker %v; want 2, closed", n, st.BreakerState())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Redis was away at least from the first failure's end to the restart.
	least := time.Since(failed)
	allowByRedis(t, st, req, 3*time.Second)
	for range 3 {
		allowByRedis(t, st, req, time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	// One report per outage. A reconnecting client can fail a call after
	// the first success (another pooled connection still dead): that is
	// an outage of its own, with its own report. Every failure is in
	// exactly one report, and the first covers the time Redis was away.
	var reported int64
	for _, r := range recoveries {
		reported += r.Failures
	}
	if len(recoveries) == 0 || reported != errs.Load() || recoveries[0].Failures < 2 || recoveries[0].Down < least || recoveries[0].Down > time.Since(away) {
		t.Errorf("OnRecover calls = %+v, want reports of %d failures in all, the first of at least 2, down from %v to %v", recoveries, errs.Load(), least, time.Since(away))
	}
}

// TestFailureAtStart checks a store created while Redis is down: it
// decides by its failure policy, then uses Redis once Redis starts.
func TestFailureAtStart(t *testing.T) {
	srv := testkit.StartRedis(t)
	srv.Kill()
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailDeny, Timeout: failTimeout, BreakerCooldown: failCooldown})
	req := sluice.Request{Policy: new(sluice.FixedWindow(5, time.Hour)), Key: "k", Cost: 1}
	start := time.Now()
	d, err := st.Allow(t.Context(), time.Time{}, req)
	if err != nil || d.Allowed || !d.Degraded || time.Since(start) > failTimeout+failMargin {
		t.Fatalf("Allow with Redis down = %+v, %v after %v; want denied, degraded, within %v", d, err, time.Since(start), failTimeout+failMargin)
	}
	if err := st.Ping(t.Context()); err == nil {
		t.Errorf("Ping with Redis down succeeded")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	d = allowByRedis(t, st, req, 3*time.Second)
	if !d.Allowed || d.Remaining != 4 {
		t.Errorf("first decision from Redis = %+v, want allowed with 4 remaining", d)
	}
	if err := st.Ping(t.Context()); err != nil {
		t.Errorf("Ping with Redis up: %v", err)
	}
}

// TestCallerGivesUp checks that a caller's own cancelled context is not
// counted as a Redis failure and is not decided by the failure policy.
func TestCallerGivesUp(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailAllow, BreakerThreshold: 1})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := sluice.Request{Policy: new(sluice.FixedWindow(5, time.Hour)), Key: "k", Cost: 1}
	for range 3 {
		d, err := st.Allow(ctx, time.Time{}, req)
		if !errors.Is(err, context.Canceled) || d.Degraded {
			t.Errorf("Allow with a cancelled context = %+v, %v; want context.Canceled, not degraded", d, err)
		}
	}
	if st.BreakerState() != BreakerClosed {
		t.Errorf("BreakerState() = %v after cancelled calls, want closed", st.BreakerState())
	}
}

// TestFailureAllowAll checks the failure policies on AllowAll, and that a
// cost over the capacity is still refused when Redis is away.
func TestFailureAllowAll(t *testing.T) {
	srv := testkit.StartRedis(t)
	srv.Kill()
	reqs := []sluice.Request{
		{Policy: new(sluice.TokenBucket(10, time.Second, 0)), Key: "k", Cost: 3},
		{Policy: new(sluice.FixedWindow(1, time.Hour)), Key: "k", Cost: 1},
	}
	for _, c := range []struct {
		fp      FailurePolicy
		allowed bool
	}{{FailAllow, true}, {FailDeny, false}, {FailLocal, true}} {
		t.Run(c.fp.String(), func(t *testing.T) {
			st := newTestStore(t, []string{srv.Addr}, Options{Failure: c.fp, Local: memstore.New(memstore.Options{}), Timeout: failTimeout})
			out := make([]sluice.Decision, 2)
			d, err := st.AllowAll(t.Context(), time.Time{}, reqs, out)
			if err != nil || d.Allowed != c.allowed || !d.Degraded || !out[0].Degraded || !out[1].Degraded {
				t.Errorf("AllowAll = %+v %+v, %v; want allowed=%v, all degraded", d, out, err, c.allowed)
			}
			big := []sluice.Request{reqs[0], {Policy: reqs[1].Policy, Key: "k", Cost: 2}}
			d, err = st.AllowAll(t.Context(), time.Time{}, big, nil)
			if !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.RetryAfter != sluice.Never {
				t.Errorf("AllowAll with a cost over the capacity = %+v, %v; want RetryAfter Never and ErrCostExceedsCapacity", d, err)
			}
		})
	}
}

// TestClose checks that a closed store no longer reaches Redis: its calls
// fail with ErrClosed, decided by the failure policy.
func TestClose(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	req := sluice.Request{Policy: new(sluice.FixedWindow(5, time.Hour)), Key: "k", Cost: 1}
	if _, err := st.Allow(t.Context(), time.Time{}, req); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.Allow(t.Context(), time.Time{}, req); !errors.Is(err, ErrClosed) {
		t.Errorf("Allow after Close: error = %v, want ErrClosed", err)
	}
}

// TestSlowRedis puts a proxy between the store and Redis that delays
// replies, and cuts one in the middle: a slow but working Redis still
// decides, one slower than the timeout is decided by the failure policy
// within the timeout, and the store recovers when Redis is fast again.
func TestSlowRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	proxy := testkit.StartRedisProxy(t, srv.Addr)
	st := newTestStore(t, []string{proxy.Addr}, Options{Failure: FailDeny, Timeout: failTimeout, BreakerThreshold: 3, BreakerCooldown: failCooldown})
	warm(t, st, srv.Addr)
	lag := lagProbe(t)
	req := sluice.Request{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "k", Cost: 1}
	call := func() (sluice.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := st.Allow(t.Context(), time.Time{}, req)
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		return d, time.Since(start)
	}

	proxy.SetDelay(5 * time.Millisecond)
	for range 3 {
		if d, took := call(); d.Degraded || !d.Allowed || took < 5*time.Millisecond {
			t.Errorf("Allow with 5ms of latency = %+v after %v, want allowed by Redis after 5ms or more", d, took)
		}
	}

	proxy.SetDelay(2 * failTimeout)
	for range 10 {
		if d, took := call(); !d.Degraded || d.Allowed || took > failTimeout+failMargin+lag() {
			t.Errorf("Allow with %v of latency = %+v after %v, want denied, degraded, within %v (+ %v of scheduling lag)", 2*failTimeout, d, took, failTimeout+failMargin, lag())
		}
	}
	if st.BreakerState() == BreakerClosed {
		t.Errorf("the breaker is closed after 10 timeouts")
	}

	proxy.SetDelay(0)
	testkit.WaitFor(t, 3*time.Second, "a decision from Redis after the latency went away", func() bool {
		d, _ := call()
		return !d.Degraded
	})

	proxy.DropMidReply()
	if d, took := call(); !d.Degraded || took > failTimeout+failMargin+lag() {
		t.Errorf("Allow with its reply cut = %+v after %v, want degraded within %v (+ %v of scheduling lag)", d, took, failTimeout+failMargin, lag())
	}
	// The next call reconnects. On a machine so loaded that goroutines
	// wake late by more than half the timeout, the reconnection itself can
	// run out of time, so there Redis has a few calls to come back (three
	// failures would open the breaker, and allowByRedis waits it out).
	if d, _ := call(); d.Degraded {
		if lag() < failTimeout/2 {
			t.Errorf("Allow after a cut reply = %+v, want a decision from Redis", d)
		} else {
			allowByRedis(t, st, req, 3*time.Second)
		}
	}
}

// allowByRedis calls st.Allow for req, as testkit.WaitFor polls, until
// Redis decides it (no error, not degraded), and returns that decision; it
// fails t when Redis has not decided within the given time.
func allowByRedis(t *testing.T, st *Store, req sluice.Request, within time.Duration) sluice.Decision {
	t.Helper()
	var d sluice.Decision
	testkit.WaitFor(t, within, "a decision from Redis", func() bool {
		var err error
		d, err = st.Allow(t.Context(), time.Time{}, req)
		return err == nil && !d.Degraded
	})
	return d
}
