package redisstore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// batchPolicies are small limits of every algorithm, so that random calls
// are denied often.
var batchPolicies = []sluice.Policy{
	sluice.TokenBucket(5, time.Second, 8),
	sluice.GCRA(3, time.Second, 3),
	sluice.LeakyBucket(4, time.Second, 4),
	sluice.FixedWindow(5, time.Second),
	sluice.SlidingLog(4, time.Second),
	sluice.SlidingWindow(6, time.Second),
	// Calendar windows send their window starts with each request; in this
	// zone the test's times (from 12:00 UTC) cross midnight at 12:01 UTC.
	sluice.FixedCalendarWindow(5, sluice.Calendar{Unit: sluice.CalendarDay, Zone: time.FixedZone("UTC-12:01", -(12*3600 + 60))}),
	sluice.SlidingCalendarWindow(6, sluice.Calendar{Unit: sluice.CalendarDay, Zone: time.FixedZone("UTC-12:01", -(12*3600 + 60))}),
}

// batchCall is one call of a batch, made on both stores of the test.
type batchCall struct {
	op   string // opAllow, opPeek or opMany
	reqs []sluice.Request
}

// prepare returns the script, keys and arguments st would send for call at
// now.
func (call batchCall) prepare(t *testing.T, st *Store, now time.Time) (script *rueidis.Lua, keys, args, wire []string) {
	t.Helper()
	nowArg, err := st.timeArg(now)
	if err != nil {
		t.Fatal(err)
	}
	if call.op == opMany {
		cs, keys, err := st.manyKeys(call.reqs)
		if err != nil {
			t.Fatal(err)
		}
		args, err := st.manyArgs(cs, call.reqs, nowArg, now, "")
		if err != nil {
			t.Fatal(err)
		}
		return st.many, keys, args, nil
	}
	c, err := st.check(&call.reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	keys, args, wire, err = st.oneArgs(c, c.key(st.prefix, call.reqs[0].Key), &call.reqs[0], call.op, nowArg, now, "")
	if err != nil {
		t.Fatal(err)
	}
	return st.single[call.reqs[0].Policy.Algorithm], keys, args, wire
}

// TestBatchDecidesAsAlone sends random batches of calls (Allow, Peek and
// AllowAll of every algorithm, repeated keys, costs over capacity, a key
// holding something Sluice did not write) through batch.lua, and the same
// calls one by one through their own scripts on keys of another prefix, at
// the same times: every reply must be the same, integer for integer, and
// the malformed key's calls must fail alone.
func TestBatchDecidesAsAlone(t *testing.T) {
	srv := testkit.StartRedis(t)
	addrs := []string{srv.Addr}
	batched := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
	alone := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError, MaxBatch: 1})
	if alone.batch != nil {
		t.Fatal("MaxBatch 1 left batching on")
	}
	ctx := t.Context()
	c, err := batched.conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A key that holds something Sluice did not write, under both prefixes.
	bad := sluice.Request{Policy: &batchPolicies[0], Key: "bad", Cost: 1}
	for _, st := range []*Store{batched, alone} {
		if _, err := srv.Do("SET", st.policies.get(bad.Policy).key(st.prefix, bad.Key), "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	request := func() sluice.Request {
		p := batchPolicies[rng.IntN(len(batchPolicies))]
		cost := 1 + rng.Int64N(3)
		if rng.IntN(20) == 0 {
			cost = p.Capacity() + 1
		}
		r := sluice.Request{Policy: &p, Key: fmt.Sprint("k", rng.IntN(3)), Cost: cost}
		if p.Algorithm == sluice.LeakyBucketAlgorithm && rng.IntN(2) == 0 {
			r.MaxDelay = time.Duration(rng.IntN(1500)) * time.Millisecond
		}
		return r
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var batches, dataErrors int
	for round := range 300 {
		now = now.Add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		calls := make([]batchCall, 2+rng.IntN(10))
		if round%3 == 0 {
			// Single requests of one algorithm: its own batch script
			// (batch_one.lua), with up to three distinct policies.
			a := rng.IntN(len(batchPolicies))
			variants := []sluice.Policy{batchPolicies[a], batchPolicies[a], batchPolicies[a]}
			variants[1].Period = 2 * time.Second
			if variants[1].Calendar.Unit != sluice.NoCalendar {
				variants[1].Period = 0
				variants[1].Calendar.Unit = sluice.CalendarWeek
			}
			variants[2].Limit++
			if variants[2].Burst != 0 {
				variants[2].Burst++
			}
			for i := range calls {
				r := request()
				r.Policy = &variants[rng.IntN(1+rng.IntN(3))]
				if r.Policy.Algorithm != sluice.LeakyBucketAlgorithm {
					r.MaxDelay = 0
				}
				if r.Cost > batchPolicies[a].Capacity() {
					r.Cost = r.Policy.Capacity() + 1
				}
				op := opAllow
				if rng.IntN(4) == 0 {
					op = opPeek
				}
				if a == 0 && rng.IntN(8) == 0 {
					r = bad // bad's policy is batchPolicies[0]
				}
				calls[i] = batchCall{op: op, reqs: []sluice.Request{r}}
			}
		}
		for i := range calls {
			if calls[i].op != "" {
				continue
			}
			switch k := rng.IntN(10); {
			case k < 5:
				calls[i] = batchCall{op: opAllow, reqs: []sluice.Request{request()}}
			case k < 6:
				calls[i] = batchCall{op: opPeek, reqs: []sluice.Request{request()}}
			case k < 7:
				calls[i] = batchCall{op: opAllow, reqs: []sluice.Request{bad}}
			default:
				reqs := make([]sluice.Request, 1+rng.IntN(3))
				for j := range reqs {
					reqs[j] = request()
				}
				calls[i] = batchCall{op: opMany, reqs: reqs}
			}
		}
		waiters := make([]*waiter, len(calls))
		deadline := time.Now().Add(10 * time.Second)
		for i, call := range calls {
			script, keys, args, wire := call.prepare(t, batched, now)
			waiters[i] = &waiter{script: script, keys: keys, args: args, wire: wire, deadline: deadline, done: make(chan struct{})}
		}
		batched.batch.send(c, waiters)
		batches++
		for i, call := range calls {
			script, keys, args, wire := call.prepare(t, alone, now)
			want, wantErr := script.Exec(ctx, c, keys, orArgs(wire, args)).AsIntSlice()
			w := waiters[i]
			select {
			case <-w.done:
			default:
				t.Fatalf("round %d: call %d was not answered", round, i)
			}
			if (w.err != nil) != (wantErr != nil) || !slices.Equal(w.vals, want) {
				t.Fatalf("round %d, call %d (%s %+v): batched %v, %v; alone %v, %v", round, i, call.op, call.reqs, w.vals, w.err, want, wantErr)
			}
			if w.err != nil {
				if !isDataError(w.err) {
					t.Fatalf("round %d, call %d: error %v is not the malformed-state error", round, i, w.err)
				}
				dataErrors++
			}
		}
	}
	if dataErrors == 0 {
		t.Errorf("no call on the malformed key failed in %d batches", batches)
	}
}

// TestBatchingUnderLoad makes many concurrent callers share one store on
// Redis's clock, behind a proxy that adds latency so that calls queue: the
// store must send batches, and exactly the limit must be admitted for
// every algorithm, with single requests and AllowAll alike.
func TestBatchingUnderLoad(t *testing.T) {
	srv := testkit.StartRedis(t)
	proxy := testkit.StartRedisProxy(t, srv.Addr)
	proxy.SetDelay(2 * time.Millisecond)
	st := newTestStore(t, []string{proxy.Addr}, Options{Failure: FailError})
	const goroutines, attempts = 48, 8
	for _, a := range sluice.Algorithms() {
		p := sluice.Policy{Algorithm: a, Limit: 100, Period: time.Hour}
		t.Run(a.String(), func(t *testing.T) {
			before := st.batch.sent.Load()
			var admitted, admittedAll atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for range attempts {
						if g%2 == 0 {
							if !countAdmitted(t, st, &admitted, sluice.Request{Policy: &p, Key: "one", Cost: 1}) {
								return
							}
							continue
						}
						// Two policies on one key: all or nothing.
						if !countAdmitted(t, st, &admittedAll, sluice.Request{Policy: &p, Key: "two", Cost: 1}, sluice.Request{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "two", Cost: 1}) {
							return
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != 100 {
				t.Errorf("Allow: %d admitted of %d, want exactly 100", got, goroutines/2*attempts)
			}
			if got := admittedAll.Load(); got != 100 {
				t.Errorf("AllowAll: %d admitted of %d, want exactly 100", got, goroutines/2*attempts)
			}
			if st.batch.sent.Load() == before {
				t.Errorf("no batch was sent by %d callers behind 2ms of latency", goroutines)
			}
		})
	}
}

// countAdmitted makes one call on st at its own clock, Allow for one
// request and AllowAll for more, and counts it in admitted if it was
// allowed. It reports an error with t.Error and returns false.
func countAdmitted(t *testing.T, st *Store, admitted *atomic.Int64, reqs ...sluice.Request) bool {
	var d sluice.Decision
	var err error
	if len(reqs) == 1 {
		d, err = st.Allow(t.Context(), time.Time{}, reqs[0])
	} else {
		d, err = st.AllowAll(t.Context(), time.Time{}, reqs, nil)
	}
	if err != nil {
		t.Error(err)
		return false
	}
	if d.Allowed {
		admitted.Add(1)
	}
	return true
}

// TestBatchWaitersTimeOut pauses Redis while many callers wait: every call
// ends within the timeout plus a margin, queued or not, and is decided by
// the failure policy, and no call stays queued after its caller gave up.
func TestBatchWaitersTimeOut(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailDeny, Timeout: failTimeout, BreakerThreshold: 1000})
	req := sluice.Request{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "k", Cost: 1}
	if _, err := st.Allow(t.Context(), time.Time{}, req); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var slow, decided atomic.Int64
	for range 40 {
		wg.Go(func() {
			start := time.Now()
			d, err := st.Allow(t.Context(), time.Time{}, req)
			if time.Since(start) > failTimeout+failMargin {
				slow.Add(1)
			}
			if err == nil && d.Degraded && !d.Allowed {
				decided.Add(1)
			}
		})
	}
	wg.Wait()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if n := slow.Load(); n > 0 {
		t.Errorf("%d of 40 calls took longer than %v with Redis paused", n, failTimeout+failMargin)
	}
	if n := decided.Load(); n != 40 {
		t.Errorf("%d of 40 calls were denied by the failure policy, want all", n)
	}
	st.batch.mu.Lock()
	queued := len(st.batch.queue)
	st.batch.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d calls are still queued after their callers gave up", queued)
	}
}

// TestFullBatchesGoAtOnce makes callers outnumber what two calls in flight
// can carry (MaxBatch 4, 48 callers, 2 ms of latency): whole batches must
// go without waiting for a call in flight to end, up to batchInflightMax
// calls at once, every decision still exact; and once the load is gone no
// call is left in flight or in the queue.
func TestFullBatchesGoAtOnce(t *testing.T) {
	srv := testkit.StartRedis(t)
	proxy := testkit.StartRedisProxy(t, srv.Addr)
	proxy.SetDelay(2 * time.Millisecond)
	st := newTestStore(t, []string{proxy.Addr}, Options{Failure: FailError, MaxBatch: 4})
	p := sluice.GCRA(100, time.Hour, 100)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for range 8 {
				if !countAdmitted(t, st, &admitted, sluice.Request{Policy: &p, Key: "full", Cost: 1}) {
					return
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Errorf("%d admitted of 384, want exactly 100", got)
	}
	b := st.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peak <= batchInflight || b.peak > batchInflightMax {
		t.Errorf("at most %d calls were in flight at once, want more than %d and at most %d", b.peak, batchInflight, batchInflightMax)
	}
	if b.inflight != 0 || len(b.queue) != 0 || b.queued != 0 {
		t.Errorf("after the load: %d calls in flight, %d queued (%d requests), want none", b.inflight, len(b.queue), b.queued)
	}
}

// TestMaxBatchOption checks the option's bounds.
func TestMaxBatchOption(t *testing.T) {
	if _, err := New(Options{Addrs: []string{"127.0.0.1:1"}, MaxBatch: -1}); err == nil {
		t.Error("New accepted MaxBatch -1")
	}
	st, err := New(Options{Addrs: []string{"127.0.0.1:1"}, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.batch == nil || st.batch.max != DefaultMaxBatch {
		t.Errorf("default batcher = %+v, want one of %d requests", st.batch, DefaultMaxBatch)
	}
}

// TestBatchClose closes the store while callers wait in its queue behind a
// slow Redis: every call returns within the timeout plus a margin, decided
// by Redis or by the failure policy, and the goroutines that sent batches
// end.
func TestBatchClose(t *testing.T) {
	srv := testkit.StartRedis(t)
	proxy := testkit.StartRedisProxy(t, srv.Addr)
	proxy.SetDelay(20 * time.Millisecond)
	st, err := New(Options{Addrs: []string{proxy.Addr}, Failure: FailDeny, Timeout: 2 * failTimeout, Prefix: "close:"})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	req := sluice.Request{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "k", Cost: 1}
	var wg sync.WaitGroup
	var slow, returned atomic.Int64
	for range 40 {
		wg.Go(func() {
			defer returned.Add(1)
			start := time.Now()
			if _, err := st.Allow(t.Context(), time.Time{}, req); err != nil {
				t.Error(err)
			}
			if time.Since(start) > 2*failTimeout+failMargin {
				slow.Add(1)
			}
		})
	}
	// Close once callers wait in the queue, behind the two calls in
	// flight. A machine too busy to look within the 20ms those take may
	// see every call return first; then Close finds none.
	queued := func() bool {
		st.batch.mu.Lock()
		defer st.batch.mu.Unlock()
		return len(st.batch.queue) > 0
	}
	testkit.WaitFor(t, 5*time.Second, "callers in the batch queue", func() bool { return queued() || returned.Load() == 40 })
	if returned.Load() == 40 {
		t.Log("every call returned before Close")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := slow.Load(); n > 0 {
		t.Errorf("%d of 40 calls took longer than %v", n, 2*failTimeout+failMargin)
	}
	defer func() {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Logf("%d goroutines, %d before the calls:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
	}()
	testkit.WaitFor(t, 5*time.Second, "the goroutines of the calls to end after Close", func() bool { return runtime.NumGoroutine() <= before })
}

// TestScriptCacheFlushed empties Redis's script cache (SCRIPT FLUSH, as a
// restart or failover to a fresh replica does) between calls: single
// requests, AllowAll and batches all go on, the store sending EVALSHA and
// falling back to EVAL once per script when Redis answers NOSCRIPT.
func TestScriptCacheFlushed(t *testing.T) {
	srv := testkit.StartRedis(t)
	proxy := testkit.StartRedisProxy(t, srv.Addr)
	proxy.SetDelay(2 * time.Millisecond)
	st := newTestStore(t, []string{proxy.Addr}, Options{Failure: FailError})
	p := sluice.FixedWindow(1_000_000, time.Hour)
	calls := func() {
		t.Helper()
		var wg sync.WaitGroup
		for g := range 24 {
			wg.Go(func() {
				var err error
				if g%3 == 0 {
					_, err = st.AllowAll(t.Context(), time.Time{}, []sluice.Request{{Policy: &p, Key: "a", Cost: 1}, {Policy: new(sluice.GCRA(1000, time.Second, 1000)), Key: "a", Cost: 1}}, nil)
				} else {
					_, err = st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: fmt.Sprint("k", g), Cost: 1})
				}
				if err != nil {
					t.Errorf("after SCRIPT FLUSH: %v", err)
				}
			})
		}
		wg.Wait()
	}
	calls()
	sent := st.batch.sent.Load()
	for range 3 {
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		calls()
	}
	if st.batch.sent.Load() == sent {
		t.Error("no batch was sent after the flushes")
	}
	info, err := srv.Info("commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info["cmdstat_evalsha"], "calls=") || !strings.Contains(info["cmdstat_evalsha"], "failed_calls=") {
		t.Fatalf("INFO commandstats has no EVALSHA: %v", info)
	}
	if !strings.Contains(info["cmdstat_eval"], "calls=") {
		t.Errorf("no EVAL after NOSCRIPT: %q", info["cmdstat_eval"])
	}
}
