package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// newInstances returns n stores on addrs sharing one fresh key prefix, as
// n instances of a service would, each with its own local refusals.
func newInstances(t testing.TB, addrs []string, n int, opts Options) []*Store {
	t.Helper()
	opts.Prefix = fmt.Sprintf("t%d:", prefixes.Add(1))
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = newTestStore(t, addrs, opts)
	}
	return stores
}

// localCount returns the local refusals of every store.
func localCount(stores ...*Store) uint64 {
	var n uint64
	for _, st := range stores {
		n += st.LocalRefusalStats().Local
	}
	return n
}

// scriptCalls returns how many scripts Redis at addr has run since its
// statistics were last reset (INFO commandstats: EVALSHA and EVAL).
func scriptCalls(t *testing.T, srv *testkit.RedisServer) int64 {
	t.Helper()
	info, err := srv.Info("commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		v, ok := info[cmd]
		if !ok {
			continue
		}
		// calls=12,usec=...
		var calls int64
		if _, err := fmt.Sscanf(v, "calls=%d", &calls); err != nil {
			t.Fatalf("INFO commandstats %s = %q: %v", cmd, v, err)
		}
		n += calls
	}
	return n
}

// TestLocalRefusalsDifferential replays random traces (every algorithm,
// Allow, Peek and AllowAll with repeated policies, mixed and oversized
// costs) over three instances sharing one Redis, each step on an instance
// drawn at random, and the same trace on the memory store, whose decisions
// are Redis's alone (TestSingle). Every verdict must be the same. A
// decision refused locally must equal the reference in every field when no
// other instance admitted anything on the key since this instance last
// asked Redis about it; otherwise another instance's traffic can only make
// the true state fuller: the local Remaining is at least the reference's
// and its RetryAfter at most the reference's.
func TestLocalRefusalsDifferential(t *testing.T) {
	srv := testkit.StartRedis(t)
	var local, checked uint64
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 1500, Keys: 2, MaxGap: 5 * time.Second})
			stores := newInstances(t, []string{srv.Addr}, 3, Options{CallerTime: true, Failure: FailError})
			ref := memstore.New(memstore.Options{})
			// Per instance, the step at which it last asked Redis about each
			// (policy, key); and the step and instance of each one's last
			// admission.
			lastAsked := make([]map[string]int, len(stores))
			for i := range lastAsked {
				lastAsked[i] = make(map[string]int)
			}
			lastAdmit := make(map[string][2]int)
			r := seed*2654435761 + 1
			for i, step := range tr.Steps {
				r = r*6364136223846793005 + 1442695040888963407
				inst := int(r>>33) % len(stores)
				st := stores[inst]
				before := st.LocalRefusalStats().Local
				got, gotOut, gotErr := applyStep(st, step)
				want, wantOut, wantErr := applyStep(ref, step)
				wasLocal := st.LocalRefusalStats().Local != before
				where := fmt.Sprintf("trace seed %d, step %d on instance %d (local %t): %s\n  got  %+v %v %v\n  want %+v %v %v",
					seed, i, inst, wasLocal, step, got, gotOut, gotErr, want, wantOut, wantErr)
				if errClassOf(gotErr) != errClassOf(wantErr) || got.Allowed != want.Allowed {
					t.Fatalf("verdicts differ: %s", where)
				}
				if wasLocal && (gotErr != nil || got.Allowed) {
					t.Fatalf("a local decision that is not a plain refusal: %s", where)
				}
				fresh := true
				for _, q := range step.Reqs {
					pair := q.Policy.String() + "\x00" + q.Key
					la, admitted := lastAdmit[pair]
					if wasLocal && admitted && la[0] > lastAsked[inst][pair] {
						if la[1] == inst {
							t.Fatalf("local decision after this instance's own admission at step %d: %s", la[0], where)
						}
						fresh = false
					}
				}
				switch {
				case gotErr != nil && step.Op == sluicetest.OpAllowAll:
					// Only the verdict of a refused AllowAll is specified.
				case fresh:
					if got != want || !slices.Equal(gotOut, wantOut) {
						t.Fatalf("decisions differ: %s", where)
					}
					if wasLocal {
						checked++
					}
				case step.Op != sluicetest.OpAllowAll && want.RetryAfter != sluice.Never:
					if got.Remaining < want.Remaining || got.RetryAfter > want.RetryAfter {
						t.Fatalf("a stale local refusal reports a fuller state than Redis's: %s", where)
					}
				}
				for _, q := range step.Reqs {
					pair := q.Policy.String() + "\x00" + q.Key
					// A refused AllowAll with a request over its capacity
					// tells the store nothing.
					if !wasLocal && !(step.Op == sluicetest.OpAllowAll && gotErr != nil) {
						lastAsked[inst][pair] = i
					}
					if want.Allowed && step.Op != sluicetest.OpPeek {
						lastAdmit[pair] = [2]int{i, inst}
					}
				}
			}
			local += localCount(stores...)
		})
	}
	t.Logf("%d decisions refused locally, %d of them checked field by field", local, checked)
	if local < 500 || checked < 200 {
		t.Errorf("%d local refusals, %d checked field by field: the traces do not exercise the local path", local, checked)
	}
}

// applyStep runs one step of a trace on st.
func applyStep(st sluice.Store, step sluicetest.Step) (d sluice.Decision, out []sluice.Decision, err error) {
	ctx := context.Background()
	switch step.Op {
	case sluicetest.OpAllow:
		d, err = st.Allow(ctx, step.At, step.Reqs[0])
	case sluicetest.OpPeek:
		d, err = st.Peek(ctx, step.At, step.Reqs[0])
	default:
		out = make([]sluice.Decision, len(step.Reqs))
		d, err = st.AllowAll(ctx, step.At, step.Reqs, out)
	}
	return d, out, err
}

func errClassOf(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, sluice.ErrCostExceedsCapacity):
		return "capacity"
	case errors.Is(err, sluice.ErrInvalidCost):
		return "cost"
	case errors.Is(err, sluice.ErrInvalidPolicy):
		return "policy"
	}
	return err.Error()
}

// TestLocalRefusalsFlood floods one key from 3 instances of 8 callers
// each, on Redis's clock, for every algorithm and for an AllowAll over two
// policies: exactly the limit is admitted, and most refusals are local.
func TestLocalRefusalsFlood(t *testing.T) {
	srv := testkit.StartRedis(t)
	const (
		instances = 3
		callers   = 8
		attempts  = 40
		limit     = 50
	)
	for _, a := range sluice.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			// New instances for each try: a try's local refusals must not
			// carry over to the next.
			stores := hammerExactly(t, a, limit, callers, attempts, func(int) ([]*Store, string) {
				return newInstances(t, []string{srv.Addr}, instances, Options{Failure: FailError}), "hot"
			})
			total := int64(instances * callers * attempts)
			if n := localCount(stores...); int64(n) < (total-limit)/2 {
				t.Errorf("%d of %d refusals were local, want most", n, total-limit)
			}
		})
	}
	t.Run("AllowAll", func(t *testing.T) {
		stores := newInstances(t, []string{srv.Addr}, instances, Options{Failure: FailError})
		reqs := []sluice.Request{
			{Policy: new(sluice.TokenBucket(limit, time.Hour, limit).Named("tb")), Key: "hot", Cost: 1},
			{Policy: new(sluice.SlidingWindow(1000, time.Hour).Named("sw")), Key: "hot", Cost: 1},
		}
		var ok, bad atomic.Int64
		var wg sync.WaitGroup
		for _, st := range stores {
			for range callers {
				wg.Go(func() {
					for range attempts {
						out := make([]sluice.Decision, len(reqs))
						d, err := st.AllowAll(t.Context(), time.Time{}, reqs, out)
						switch {
						case err != nil || d.Degraded:
							bad.Add(1)
						case d.Allowed:
							ok.Add(1)
						case out[0].Allowed || !out[1].Allowed || out[0].RetryAfter <= 0:
							bad.Add(1) // the token bucket refuses, the window would pass
						}
					}
				})
			}
		}
		wg.Wait()
		if bad.Load() > 0 || ok.Load() != limit {
			t.Errorf("AllowAll flood: %d admitted (want %d), %d failed or malformed", ok.Load(), limit, bad.Load())
		}
		if n := localCount(stores...); n < (instances*callers*attempts-limit)/2 {
			t.Errorf("%d refusals were local, want most", n)
		}
		// Nothing was charged to the window by the refused requests.
		d, err := stores[0].Peek(t.Context(), time.Time{}, reqs[1])
		if err != nil || d.Remaining != 1000-limit-1 {
			t.Errorf("Peek of the window after the flood = %+v, %v; want %d remaining after it", d, err, 1000-limit-1)
		}
	})
}

// TestLocalRefusalsKeepScriptsOff counts the scripts Redis runs (INFO
// commandstats) while 3 instances of 8 callers send 2,000 requests for one
// key: with local refusals, Redis decides the admitted requests and about
// one refusal per caller and refill interval; without, every request.
func TestLocalRefusalsKeepScriptsOff(t *testing.T) {
	srv := testkit.StartRedis(t)
	const (
		instances = 3
		callers   = 8
		requests  = 2000
	)
	run := func(t *testing.T, p sluice.Policy, pause time.Duration, opts Options) (scripts int64, elapsed time.Duration) {
		stores := newInstances(t, []string{srv.Addr}, instances, opts)
		if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		var sent atomic.Int64
		for _, st := range stores {
			for range callers {
				wg.Go(func() {
					for sent.Add(1) <= requests {
						if _, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "flood", Cost: 1}); err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						time.Sleep(pause) // the load under test: callers spread over the refill intervals
					}
				})
			}
		}
		wg.Wait()
		return scriptCalls(t, srv), time.Since(start)
	}
	t.Run("SlowRefill", func(t *testing.T) {
		p := sluice.TokenBucket(5, time.Hour, 5)
		on, _ := run(t, p, 0, Options{})
		off, _ := run(t, p, 0, Options{LocalRefusals: LocalRefusals{Off: true}})
		t.Logf("scripts for %d requests: %d with local refusals, %d without", requests, on, off)
		if max := int64(5 + instances*callers); on > max {
			t.Errorf("%d scripts with local refusals, want at most %d (the admitted requests and one refusal per caller)", on, max)
		}
		// Batches make fewer scripts than requests without local refusals,
		// but still many.
		if off < 2*on {
			t.Errorf("%d scripts without local refusals, want many more than %d", off, on)
		}
	})
	t.Run("Refilling", func(t *testing.T) {
		// One unit every 10 ms, callers pausing 1 ms between requests: each
		// time a unit comes back, each caller may ask Redis once more.
		p := sluice.TokenBucket(100, time.Second, 2)
		on, elapsed := run(t, p, time.Millisecond, Options{})
		intervals := int64(elapsed/(10*time.Millisecond)) + 2
		t.Logf("scripts for %d requests over %v: %d", requests, elapsed, on)
		if max := intervals * (instances*callers + 1); on > max {
			t.Errorf("%d scripts over %v (%d refill intervals), want at most %d", on, elapsed, intervals, max)
		}
	})
}

// TestLocalRefusalsClockOffset runs the local path with a local monotonic
// clock an hour away from Redis's, ahead and behind, against a bucket that
// refills every 20 ms, and checks every local refusal against Redis: the
// key's state read from Redis right after the decision must refuse the
// request at a Redis time read right before it (admission only grows with
// time, so a refusal later implies one then). A failure says how far each
// clock went since the entry's call (see clockReport).
func TestLocalRefusalsClockOffset(t *testing.T) {
	srv := testkit.StartRedis(t)
	for _, offset := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			start := time.Now()
			st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
			st.refusals.base = st.refusals.base.Add(-offset) // mono reads offset more
			st.refusals.refunded.Add(offset.Microseconds())  // and so does the subscription's time
			p := sluice.TokenBucket(50, time.Second, 3)
			req := sluice.Request{Policy: &p, Key: "k", Cost: 2}
			c := st.policies.get(&p)
			key := c.key(st.prefix, req.Key)
			var checked int
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) || checked < 50 {
				if checked > 2000 || time.Now().After(deadline.Add(20*time.Second)) {
					break
				}
				before := redisMicros(t, st)
				read := st.refusals.mono() // after before's reply
				n := st.LocalRefusalStats().Local
				d, err := st.Allow(t.Context(), time.Time{}, req)
				if err != nil {
					t.Fatal(err)
				}
				if st.LocalRefusalStats().Local == n {
					continue
				}
				checked++
				v, err := srv.Do("GET", key)
				if err != nil {
					t.Fatal(err)
				}
				if v == nil {
					continue // the bucket is full again since: nothing to check
				}
				s, _ := v.(string)
				at, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					t.Fatalf("GET %s = %v", key, v)
				}
				_, want := c.pp.TokenBucket(algo.TAT{At: at}, before, req.Cost)
				if want.Allowed && wallJumpCovers(c, at, before, req.Cost, start) {
					// The documented exception (docs/redis.md, "Clocks"):
					// Redis's clock, this machine's wall clock, jumped
					// forward against the monotonic clock, and an entry
					// may refuse for as long as the jump.
					t.Logf("a local refusal covered by a forward jump of the wall clock: %s", clockReport(st, c, req.Key, before, read, start))
					continue
				}
				if want.Allowed {
					t.Fatalf("refused locally (%+v), but Redis's state %q admits the request at %d, a Redis time read before the decision; %s",
						d, s, before, clockReport(st, c, req.Key, before, read, start))
				}
			}
			if checked < 50 {
				t.Errorf("only %d local refusals", checked)
			}
		})
	}
}

// wallJumpCovers reports whether the wall clock, which is Redis's clock
// here, has jumped forward against the monotonic clock since start by
// enough that the state at refuses the request at before less the jump:
// a local refusal then is the case docs/redis.md ("Clocks") allows.
func wallJumpCovers(c *compiled, at, before, cost int64, start time.Time) bool {
	now := time.Now()
	jump := now.Round(0).Sub(start.Round(0)) - now.Sub(start)
	if jump <= 0 {
		return false
	}
	_, then := c.pp.TokenBucket(algo.TAT{At: at}, before-jump.Microseconds()-1, cost)
	return !then.Allowed
}

// clockReport explains a local refusal that Redis's state contradicts at
// before, a Redis time whose reply came before the local monotonic time
// read: the local bound of Redis's clock now, and how far each clock went
// from the call that made the entry, which the bound takes for equal (the
// Redis time of its reply against the local time before it was sent).
// Redis's TIME is this machine's wall clock (the test's redis-server runs
// here), so it also reports how far the wall clock moved against the
// monotonic clock since start: a step of the wall clock, which the bound
// does not cover (docs/redis.md, "Clocks"), shows there.
func clockReport(st *Store, c *compiled, userKey string, before, read int64, start time.Time) string {
	rf := st.refusals
	e := rf.hotGet(c, userKey)
	if e == nil {
		e = rf.get([]byte(c.key(st.prefix, userKey)), &c.policy)
	}
	now := time.Now()
	steps := now.Round(0).Sub(start.Round(0)) - now.Sub(start)
	if e == nil {
		return fmt.Sprintf("the entry is gone; the wall clock moved %v against the monotonic clock", steps)
	}
	bound, _ := rf.at(e, 0, false)
	return fmt.Sprintf("the local bound of Redis's clock, now, is %d (%d µs behind before); from the entry's call to before, Redis's clock went %d µs (from %d), the local monotonic clock %d µs (to its reply); the wall clock moved %v against the monotonic clock",
		bound, before-bound, before-e.redisAt, e.redisAt, read-e.sentAt, steps)
}

// TestLocalRefusalsRedisDown: a refusal cached before Redis went away is
// still a refusal, not degraded, until its state would admit; degraded
// decisions are never cached; and a Redis restarted empty is asked again
// once the cached state would admit (at most its RetryAfter later). The
// states refuse for a minute (MaxAge), however long a loaded machine
// takes to stop and restart redis-server.
func TestLocalRefusalsRedisDown(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailDeny, Timeout: time.Second, BreakerThreshold: 1, BreakerCooldown: 20 * time.Millisecond,
		LocalRefusals: LocalRefusals{MaxAge: time.Minute}})
	// One unit back every 1.5 s.
	p := sluice.TokenBucket(2, 3*time.Second, 2)
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	for i, want := range []bool{true, true, false} {
		if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || d.Allowed != want || d.Degraded {
			t.Fatalf("Allow %d = %+v, %v; want allowed %t from Redis", i, d, err, want)
		}
	}
	srv.Kill()
	n := st.LocalRefusalStats().Local
	d, err := st.Allow(t.Context(), time.Time{}, req)
	if err != nil || d.Allowed || d.Degraded || d.RetryAfter <= 0 || d.RetryAfter > 1500*time.Millisecond {
		t.Fatalf("Allow with Redis down = %+v, %v; want refused as cached, not degraded", d, err)
	}
	if st.LocalRefusalStats().Local != n+1 {
		t.Fatalf("the refusal with Redis down was not local")
	}
	// Another key: the failure policy decides, and nothing is cached.
	entries := st.LocalRefusalStats().Entries
	other := sluice.Request{Policy: &p, Key: "other", Cost: 1}
	for range 3 {
		if d, err := st.Allow(t.Context(), time.Time{}, other); err != nil || !d.Degraded || d.Allowed {
			t.Fatalf("Allow of another key with Redis down = %+v, %v; want denied by the failure policy", d, err)
		}
	}
	if got := st.LocalRefusalStats().Entries; got != entries {
		t.Errorf("degraded decisions made %d entries, want none", got-entries)
	}

	// Redis comes back empty: the cached entry still refuses until its
	// state would admit (the documented cost of a lost state), then Redis
	// decides, afresh.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	d, err = st.Allow(t.Context(), time.Time{}, req)
	if err != nil || d.Allowed || d.Degraded {
		t.Fatalf("Allow after the restart = %+v, %v; want refused as cached", d, err)
	}
	// Move the cache's clock on by RetryAfter rather than wait for it: the
	// restarted Redis holds no state to wait for.
	st.refusals.base = st.refusals.base.Add(-d.RetryAfter)
	d = allowByRedis(t, st, req, 10*time.Second)
	if !d.Allowed || d.Remaining != 1 {
		t.Errorf("Allow after the retry = %+v; want allowed by the empty Redis, 1 remaining", d)
	}
}

// TestLocalRefusalsPolicyChange: a changed policy (numbers or name) for
// the same key is another entry, decided by Redis.
func TestLocalRefusalsPolicyChange(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	p := sluice.FixedWindow(1, time.Hour).Named("plan-free")
	for _, want := range []bool{true, false} {
		if d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1}); err != nil || d.Allowed != want {
			t.Fatalf("Allow = %+v, %v; want allowed %t", d, err, want)
		}
	}
	for _, q := range []sluice.Policy{sluice.FixedWindow(2, time.Hour).Named("plan-free"), sluice.FixedWindow(1, time.Hour).Named("plan-pro")} {
		n := st.LocalRefusalStats().Local
		d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &q, Key: "k", Cost: 1})
		if err != nil || !d.Allowed || st.LocalRefusalStats().Local != n {
			t.Errorf("Allow under %v after %v refused = %+v, %v; want allowed by Redis", q, p, d, err)
		}
	}
	if s := st.LocalRefusalStats(); s.ByPolicy["plan-free"] != 0 {
		t.Errorf("local refusals by policy = %v", s.ByPolicy)
	}
	if d, _ := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1}); d.Allowed {
		t.Errorf("the first policy admits again")
	}
	if s := st.LocalRefusalStats(); s.ByPolicy["plan-free"] != 1 || s.Local != 1 || s.Decisions != 5 {
		t.Errorf("stats = %+v; want 1 local refusal (plan-free) of 5 decisions", s)
	}
}

// TestLocalRefusalsBounded: the cache never holds more than its entries
// and bytes allow; Off sends every request to Redis.
func TestLocalRefusalsBounded(t *testing.T) {
	srv := testkit.StartRedis(t)
	p := sluice.TokenBucket(1, time.Hour, 1)
	for _, c := range []struct {
		name     string
		opts     LocalRefusals
		maxCount int
	}{
		{"entries", LocalRefusals{MaxEntries: 64}, 64},
		{"bytes", LocalRefusals{MaxBytes: int64(refusalShards * EntryBytes(40, 0))}, refusalShards},
		{"off", LocalRefusals{Off: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, LocalRefusals: c.opts})
			for i := range 300 {
				req := sluice.Request{Policy: &p, Key: fmt.Sprint("key-", i), Cost: 1}
				for range 2 {
					if _, err := st.Allow(t.Context(), time.Time{}, req); err != nil {
						t.Fatal(err)
					}
				}
			}
			s := st.LocalRefusalStats()
			if s.Entries > c.maxCount || (c.maxCount > 0 && s.Entries < c.maxCount/4) {
				t.Errorf("%d entries held, want at most %d (and not far fewer)", s.Entries, c.maxCount)
			}
			if c.opts.MaxBytes > 0 && s.Bytes > c.opts.MaxBytes+refusalShards {
				t.Errorf("%d bytes held, want at most %d", s.Bytes, c.opts.MaxBytes)
			}
			// The most recent refusal is cached (when on) and answered locally.
			req := sluice.Request{Policy: &p, Key: "key-299", Cost: 1}
			st.Allow(t.Context(), time.Time{}, req)
			if got := st.LocalRefusalStats().Local; (got == 1) != !c.opts.Off {
				t.Errorf("local refusals after a repeated refusal = %d (off %t)", got, c.opts.Off)
			}
		})
	}
}

// TestLocalRefusalsCluster floods one key of a Redis Cluster from 3
// instances: exactly the limit passes, and most refusals are local.
func TestLocalRefusalsCluster(t *testing.T) {
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
	stores := newInstances(t, c.Addrs[:1], 3, Options{Failure: FailError})
	p := sluice.GCRA(20, time.Hour, 20)
	admitted, failed := hammer(t, stores, 8, 30, sluice.Request{Policy: &p, Key: "hot", Cost: 1})
	if failed > 0 || admitted != 20 {
		t.Errorf("%d admitted, %d failed; want exactly 20 admitted", admitted, failed)
	}
	if n := localCount(stores...); n < (3*8*30-20)/2 {
		t.Errorf("%d refusals were local, want most", n)
	}
}

// TestLocalRefusalsHotSlot checks the lock-free front of the cache: a
// refusal by Redis puts the key's state in its hot slot, where the next
// calls find it; the entry's removal (after an admission, or evicted)
// empties the slot, so that a state no longer cached is never used.
func TestLocalRefusalsHotSlot(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, CallerTime: true, LocalRefusals: LocalRefusals{MaxEntries: refusalShards}})
	p := sluice.TokenBucket(1, time.Second, 1)
	c := st.policies.get(&p)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	allow := func(key string, at time.Duration) sluice.Decision {
		t.Helper()
		d, err := st.Allow(t.Context(), t0.Add(at), sluice.Request{Policy: &p, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	allow("k", 0)
	if d := allow("k", 0); d.Allowed {
		t.Fatalf("second request in the same second admitted: %+v", d)
	}
	e := st.refusals.hotGet(c, "k")
	if e == nil {
		t.Fatal("no entry in the hot slot after a refusal by Redis")
	}
	local := st.LocalRefusalStats().Local
	if d := allow("k", time.Second/2); d.Allowed || st.LocalRefusalStats().Local != local+1 {
		t.Errorf("a request the cached state refuses = %+v, with %d local refusals (want %d)", d, st.LocalRefusalStats().Local, local+1)
	}
	// The policy compiled again, as when another policy took its slot of
	// the policy cache in between: the hot slot still finds the entry.
	for i := range st.policies.slots {
		if st.policies.slots[i].Load() == c {
			st.policies.slots[i].Store(compile(p))
		}
	}
	if c2 := st.policies.get(&p); c2 == c || st.refusals.hotGet(c2, "k") != e {
		t.Errorf("the policy compiled again (a new copy: %v) does not find the entry in the hot slot", c2 != c)
	}
	if d := allow("k", time.Second); !d.Allowed {
		t.Fatalf("a request once the bucket refilled = %+v, want admitted", d)
	}
	if got := st.refusals.hotGet(c, "k"); got != nil || e.hot.Load() == e {
		t.Errorf("after an admission by Redis the hot slot holds %p (the dropped entry was %p)", got, e)
	}
	// Evictions: many more refused keys than the cache holds.
	for i := range 20 * refusalShards {
		key := fmt.Sprint("e", i)
		allow(key, 2*time.Second)
		allow(key, 2*time.Second)
	}
	held := 0
	for i := range 20 * refusalShards {
		if e := st.refusals.hotGet(c, fmt.Sprint("e", i)); e != nil {
			held++
			if st.refusals.get([]byte(e.key), &p) != e {
				t.Errorf("the hot slot of %s holds an entry no longer cached", e.userKey)
			}
		}
	}
	if held == 0 || held > st.LocalRefusalStats().Entries {
		t.Errorf("%d entries in hot slots, %d cached", held, st.LocalRefusalStats().Entries)
	}
}

// TestLocalRefusalsHotSlotAllowAll: the states an AllowAll refused by
// Redis learns go to their hot slots too, holding as the caller's key the
// part of the Redis key that is that key (no memory of their own, so not
// counted), unless the Redis key escapes it; either way the next refusal
// is local, and an admission empties the slots.
func TestLocalRefusalsHotSlotAllowAll(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, CallerTime: true})
	p, q := sluice.TokenBucket(1, time.Second, 1), sluice.FixedWindow(100, time.Hour)
	cp, cq := st.policies.get(&p), st.policies.get(&q)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	allowAll := func(key string, at time.Duration) sluice.Decision {
		t.Helper()
		d, err := st.AllowAll(t.Context(), t0.Add(at), []sluice.Request{{Policy: &q, Key: key, Cost: 1}, {Policy: &p, Key: key, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, key := range []string{"k", "a:b"} {
		allowAll(key, 0)
		if d := allowAll(key, 0); d.Allowed {
			t.Fatalf("%s: second request in the same second admitted: %+v", key, d)
		}
		ep, eq := st.refusals.hotGet(cp, key), st.refusals.hotGet(cq, key)
		if key == "k" {
			if ep == nil || eq == nil || ep.userKey != key || eq.userKey != key {
				t.Fatalf("%s: hot slots hold %v and %v after a refusal by Redis, want both entries", key, ep, eq)
			}
			if want := int64(EntryBytes(len(ep.key), 0) + EntryBytes(len(eq.key), 0)); st.LocalRefusalStats().Bytes != want {
				t.Errorf("%s: %d bytes counted, want %d (the Redis keys only)", key, st.LocalRefusalStats().Bytes, want)
			}
		} else if ep != nil || eq != nil {
			t.Errorf("%s: an escaped key's entries are in hot slots: %v, %v", key, ep, eq)
		}
		local := st.LocalRefusalStats().Local
		if d := allowAll(key, time.Second/2); d.Allowed || st.LocalRefusalStats().Local != local+1 {
			t.Errorf("%s: a request the cached state refuses = %+v, with %d local refusals (want %d)", key, d, st.LocalRefusalStats().Local, local+1)
		}
		if d := allowAll(key, time.Second); !d.Allowed {
			t.Fatalf("%s: a request once the bucket refilled = %+v, want admitted", key, d)
		}
		if st.refusals.hotGet(cp, key) != nil || st.refusals.hotGet(cq, key) != nil || st.LocalRefusalStats().Entries != 0 {
			t.Errorf("%s: entries left after an admission by Redis: %+v", key, st.LocalRefusalStats())
		}
	}
}

// TestCounterExact: a counter's stripes sum to every add, from goroutines
// adding at once on 8 times as many processors as stripes (so that
// processors share stripes, as on a machine of more than 8 cores).
func TestCounterExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8 * counterStripes))
	const goroutines, adds = 64, 200_000
	c := new(counter)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range adds {
				c.add()
			}
		})
	}
	wg.Wait()
	if got := c.load(); got != goroutines*adds {
		t.Errorf("%d goroutines × %d adds counted %d", goroutines, adds, got)
	}
}
