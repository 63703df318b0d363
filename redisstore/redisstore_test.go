package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// prefixes makes every test store's key prefix unique within a server.
var prefixes atomic.Int64

// newTestStore returns a store on addrs, closed when t ends, with a fresh
// key prefix unless opts.Prefix names one. opts.Addrs is filled in, and a
// zero opts.Timeout is 10s.
func newTestStore(t testing.TB, addrs []string, opts Options) *Store {
	t.Helper()
	opts.Addrs = addrs
	if opts.Timeout == 0 {
		// Correctness tests must not fail because a loaded machine is
		// slow; the failure tests set their own, short, timeout.
		opts.Timeout = 10 * time.Second
	}
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("t%d:", prefixes.Add(1))
	}
	st, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// conformance runs the conformance suite and random traces against the
// memory store on Redis at addrs.
func conformance(t *testing.T, addrs []string, seeds int) {
	t.Run("Conformance", func(t *testing.T) {
		sluicetest.Run(t, func(t *testing.T) sluice.Store {
			return newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
		}, sluicetest.Leases(), sluicetest.Usage(), sluicetest.Penalties())
	})
	t.Run("ConformanceRedisTime", func(t *testing.T) {
		sluicetest.Run(t, func(t *testing.T) sluice.Store {
			return newTestStore(t, addrs, Options{Failure: FailError})
		}, sluicetest.StoreClock(), sluicetest.Leases(), sluicetest.Usage(), sluicetest.Penalties())
	})
	t.Run("Differential", func(t *testing.T) {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 1500})
				rs := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
				sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
			})
		}
	})
	t.Run("DifferentialUsage", func(t *testing.T) {
		// Debits past the capacity, refunds and checks, between the
		// admissions of every algorithm.
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 1500, Usage: true})
				rs := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
				sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
			})
		}
	})
	t.Run("DifferentialPenalty", func(t *testing.T) {
		// Blocks, their escalation and forgetting, beside debits, refunds
		// and checks.
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 1500, Keys: 4, Usage: true, Policies: sluicetest.PenaltyPolicies()})
				rs := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
				sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
			})
		}
	})
	t.Run("DifferentialCalendar", func(t *testing.T) {
		// Calendar windows across a daylight-saving change, a month end,
		// Feb 29 and a year end.
		for i, start := range sluicetest.CalendarTraceStarts() {
			t.Run(start.Format("2006-01-02"), func(t *testing.T) {
				tr := sluicetest.RandomTrace(uint64(i), sluicetest.TraceConfig{Steps: 1500, Policies: sluicetest.CalendarTracePolicies(), Start: start})
				rs := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
				sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
			})
		}
	})
}

func TestSingle(t *testing.T) {
	srv := testkit.StartRedis(t)
	conformance(t, []string{srv.Addr}, 12)
	t.Run("Leases", func(t *testing.T) { leaseTests(t, []string{srv.Addr}) })
}

func TestCluster(t *testing.T) {
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
	conformance(t, c.Addrs[:1], 4)
	t.Run("Exactness", func(t *testing.T) { exactness(t, c.Addrs) })
	t.Run("Leases", func(t *testing.T) { leaseTests(t, c.Addrs) })
	t.Run("CrossSlot", func(t *testing.T) {
		st := newTestStore(t, c.Addrs, Options{Failure: FailError})
		p := sluice.TokenBucket(10, time.Minute, 0)
		// "a" and "b" hash to different slots (15495 and 3300); the check
		// below makes the test fail loudly if the key layout changes that.
		ka, kb := st.policies.get(&p).key(st.prefix, "a"), st.policies.get(&p).key(st.prefix, "b")
		if slot(ka) == slot(kb) {
			t.Fatalf("keys %q and %q share slot %d; pick other keys", ka, kb, slot(ka))
		}
		reqs := []sluice.Request{{Policy: &p, Key: "a", Cost: 1}, {Policy: &p, Key: "b", Cost: 1}}
		_, err := st.AllowAll(t.Context(), time.Time{}, reqs, nil)
		if !errorsIs(err, ErrCrossSlot) || !errorsIs(err, sluice.ErrNotAtomic) {
			t.Fatalf("AllowAll over keys a and b on a cluster: error = %v, want ErrCrossSlot, wrapping sluice.ErrNotAtomic", err)
		}
		// Nothing was charged: a Peek of cost 1 leaves 9.
		for _, r := range reqs {
			d, err := st.Peek(t.Context(), time.Time{}, r)
			if err != nil || d.Remaining != 9 {
				t.Errorf("Peek(%q) after the refused AllowAll = %+v, %v; want Remaining 9", r.Key, d, err)
			}
		}
		// Every policy of one key shares a slot, so AllowAll over them works.
		reqs = []sluice.Request{{Policy: &p, Key: "a", Cost: 1}, {Policy: new(sluice.FixedWindow(5, time.Hour).Named("h")), Key: "a", Cost: 1}}
		if d, err := st.AllowAll(t.Context(), time.Time{}, reqs, nil); err != nil || !d.Allowed {
			t.Errorf("AllowAll over two policies of key a = %+v, %v; want allowed", d, err)
		}
	})
}

// TestCallerTimeNeverGoesBack checks, for every algorithm, that with the
// caller's time a key remembers the latest time it has seen even when a
// call changes nothing else (an admitted Peek), so that a later call with
// an earlier time is decided at that latest time (see lib.lua).
func TestCallerTimeNeverGoesBack(t *testing.T) {
	srv := testkit.StartRedis(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	for a := range sluice.Algorithm(len(algorithmFiles)) {
		req := sluice.Request{Policy: &sluice.Policy{Algorithm: a, Limit: 1, Period: time.Second}, Key: "k", Cost: 1}
		steps := []struct {
			peek bool
			at   time.Duration
			want bool
		}{
			{false, 0, true},
			{true, 2 * time.Second, true},  // seen: the key's time is now t0+2s
			{false, time.Second / 2, true}, // decided at t0+2s, not at t0+0.5s
			{false, time.Second / 2, false},
		}
		for i, s := range steps {
			call := st.Allow
			if s.peek {
				call = st.Peek
			}
			d, err := call(t.Context(), t0.Add(s.at), req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != s.want {
				t.Errorf("%s, step %d (peek %t at t0+%v): allowed %t, want %t", a, i, s.peek, s.at, d.Allowed, s.want)
			}
		}
	}
}

// edgePeriod is the longest period (in µs) for which a token bucket of
// limit 1 and burst 15 still qualifies: 15·P <= 2^52 − 2.
const edgePeriod = 300239975158032 * time.Microsecond

// TestSupportedPolicies checks which valid policies the Redis store takes:
// every practical one, and all but those whose empty bucket takes more
// than 2^52 µs (about 142 years) to refill.
func TestSupportedPolicies(t *testing.T) {
	day, year := 24*time.Hour, 365*24*time.Hour
	for _, c := range []struct {
		p  sluice.Policy
		ok bool
	}{
		{sluice.TokenBucket(10, time.Second, 0), true},
		{sluice.TokenBucket(100, time.Minute, 0), true},
		{sluice.TokenBucket(1_000_000, day, 1_000_000), true},
		{sluice.GCRA(999_999_937, time.Hour, 17), true},
		{sluice.LeakyBucket(3, time.Second, 4), true},
		{sluice.TokenBucket(sluice.MaxLimit, year, sluice.MaxLimit), true},
		{sluice.TokenBucket(sluice.MaxLimit, sluice.MaxPeriod, 0), true},
		{sluice.TokenBucket(7, sluice.MaxPeriod, 7), true},
		{sluice.FixedWindow(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingWindow(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingLog(sluice.MaxLimit, sluice.MaxPeriod), true},
		{sluice.SlidingWindow(1_000_000, day), true},
		{sluice.TokenBucket(1, edgePeriod, 15), true},
		// One µs more and the refill time passes 2^52 − 2 µs.
		{sluice.TokenBucket(1, edgePeriod+time.Microsecond, 15), false},
		{sluice.TokenBucket(1, year, 1000), false},
		{sluice.GCRA(3, sluice.MaxPeriod, 1000), false},
		{sluice.Concurrency(1, time.Millisecond), true},
		{sluice.Concurrency(sluice.MaxLimit, sluice.MaxPeriod), true},
	} {
		if err := c.p.Validate(); err != nil {
			t.Fatalf("%v is not a valid policy: %v", c.p, err)
		}
		err := compile(c.p).err
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrUnsupportedPolicy)) {
			t.Errorf("compile(%v) error = %v, want supported = %v", c.p, err, c.ok)
		}
	}
}

// TestRefusedPolicy checks that a policy the store cannot decide exactly
// is refused with ErrUnsupportedPolicy before Redis is asked, by every
// method, while the memory store decides it.
func TestRefusedPolicy(t *testing.T) {
	srv := testkit.StartRedis(t)
	srv.Kill() // nothing may reach Redis: a call would fail differently
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailAllow})
	p := sluice.TokenBucket(1, 365*24*time.Hour, 1000)
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	if _, err := memstore.New(memstore.Options{}).Allow(t.Context(), time.Time{}, req); err != nil {
		t.Fatalf("memstore refuses %v: %v", p, err)
	}
	if d, err := st.Allow(t.Context(), time.Time{}, req); !errors.Is(err, ErrUnsupportedPolicy) || d.Degraded {
		t.Errorf("Allow(%v) = %+v, %v; want ErrUnsupportedPolicy", p, d, err)
	}
	if _, err := st.Peek(t.Context(), time.Time{}, req); !errors.Is(err, ErrUnsupportedPolicy) {
		t.Errorf("Peek(%v) error = %v, want ErrUnsupportedPolicy", p, err)
	}
	reqs := []sluice.Request{{Policy: new(sluice.TokenBucket(5, time.Second, 0)), Key: "k", Cost: 1}, req}
	if _, err := st.AllowAll(t.Context(), time.Time{}, reqs, nil); !errors.Is(err, ErrUnsupportedPolicy) {
		t.Errorf("AllowAll(..., %v) error = %v, want ErrUnsupportedPolicy", p, err)
	}
	if _, err := sluice.New(st, p); err != nil {
		t.Logf("sluice.New accepts the policy (valid); the store refuses it per call: %v", err)
	}
	if st.BreakerState() != BreakerClosed {
		t.Errorf("a refused policy reached Redis: the breaker is %v", st.BreakerState())
	}
}

// TestExtremes replays random traces whose policies sit at the limits the
// Redis store takes (the longest refill it accepts, the largest limits and
// periods) at times near the end of its range, in 2112, where timestamps
// approach 2^53 µs: the store must still agree with the memory store.
func TestExtremes(t *testing.T) {
	srv := testkit.StartRedis(t)
	policies := []sluice.Policy{
		sluice.TokenBucket(1, edgePeriod, 15).Named("edge"),
		sluice.LeakyBucket(1, edgePeriod, 15).Named("edge-leaky"),
		sluice.GCRA(999_999_937, sluice.MaxPeriod, 14_000).Named("prime"),
		sluice.SlidingWindow(sluice.MaxLimit, sluice.MaxPeriod).Named("window"),
		sluice.SlidingWindow(999_999_999, 86_399_999_999*time.Microsecond).Named("window-odd"),
		sluice.FixedWindow(sluice.MaxLimit, sluice.MaxPeriod).Named("fixed"),
		sluice.SlidingLog(3, sluice.MaxPeriod).Named("log"),
	}
	for _, p := range policies {
		if err := compile(p).err; err != nil {
			t.Fatalf("%v: %v", p, err)
		}
	}
	start := time.UnixMicro(maxTime).Add(-30 * 24 * time.Hour)
	for seed := range uint64(4) {
		tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{Steps: 400, Policies: policies, Start: start, MaxGap: time.Hour, BigCostOneIn: 4})
		rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
		sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
	}
	// Past the range: refused, not decided wrongly.
	rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	_, err := rs.Allow(t.Context(), time.UnixMicro(maxTime), sluice.Request{Policy: &policies[0], Key: "k", Cost: 1})
	if err == nil {
		t.Errorf("Allow at 2^52 µs succeeded, want an error naming the time range")
	}
}

// FuzzScriptArgs feeds arbitrary policies, keys, costs and times through the
// Go layer into the Lua scripts of a private redis-server and checks that
// every answer is the memory store's: the same decision, or the same kind
// of error. A policy the Redis store refuses as beyond its exact range
// (ErrUnsupportedPolicy) is the one allowed difference.
func FuzzScriptArgs(f *testing.F) {
	srv := testkit.StartRedis(f)
	st := newTestStore(f, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
	f.Add(uint8(0), int64(10), int64(1_000_000), int64(0), "key", int64(1), int64(1_767_225_600_000_000), int64(250_000))
	f.Add(uint8(2), int64(7), int64(1_000_000), int64(3), "{tag}:x\n\x00", int64(2), int64(1_767_225_659_999_999), int64(1))
	f.Add(uint8(3), int64(100), int64(60_000_000), int64(0), "", int64(100), int64(1_767_225_659_000_000), int64(1_000_000))
	f.Add(uint8(4), int64(3), int64(10_000_000), int64(0), "log", int64(4), int64(0), int64(0))
	f.Add(uint8(5), int64(1_000_000_000), int64(31_536_000_000_000), int64(0), "big", int64(999_999_999), int64(1<<51), int64(1<<40))
	f.Add(uint8(1), int64(-1), int64(0), int64(-5), "bad", int64(0), int64(-1), int64(-1))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, alg uint8, limit, periodUS, burst int64, key string, cost, atUS, gapUS int64) {
		p := sluice.Policy{Algorithm: sluice.Algorithm(alg % 7), Limit: limit, Burst: burst,
			Period: time.Duration(periodUS%(1<<53)) * time.Microsecond}
		// Caller times must lie between 1970 and 2112 for the Redis store.
		at := time.UnixMicro(abs(atUS) % (1 << 52))
		later := at.Add(time.Duration(abs(gapUS)%(1<<40)) * time.Microsecond)
		if later.UnixMicro() >= 1<<52 {
			later = at
		}
		// A key of its own per input, so that inputs do not share state.
		req := sluice.Request{Policy: &p, Key: fmt.Sprintf("%d|%s", n.Add(1), key), Cost: cost}
		mem := memstore.New(memstore.Options{})
		for _, when := range []time.Time{at, later} {
			dm, errm := mem.Allow(t.Context(), when, req)
			dr, errr := st.Allow(t.Context(), when, req)
			if errors.Is(errr, ErrUnsupportedPolicy) && errm == nil {
				return
			}
			for _, kind := range []error{sluice.ErrInvalidPolicy, sluice.ErrInvalidCost, sluice.ErrCostExceedsCapacity} {
				if errors.Is(errm, kind) != errors.Is(errr, kind) {
					t.Fatalf("Allow(%v, %+v) at %v: memory store says %v, Redis store %v", p, req, when, errm, errr)
				}
			}
			if (errm == nil) != (errr == nil) {
				t.Fatalf("Allow(%v, %+v) at %v: memory store says %v, Redis store %v", p, req, when, errm, errr)
			}
			// Leases differ by store; each must have one when the other does.
			if (dm.Lease == "") != (dr.Lease == "") {
				t.Fatalf("Allow(%v, %+v) at %v: lease %q from Redis, %q from memory", p, req, when, dr.Lease, dm.Lease)
			}
			dm.Lease, dr.Lease = "", ""
			if errm == nil && dm != dr {
				t.Fatalf("Allow(%v, %+v) at %v = %+v from Redis, want %+v as from memory", p, req, when, dr, dm)
			}
		}
	})
}

func abs(x int64) int64 {
	if x < 0 {
		if x == -x { // MinInt64
			return 0
		}
		return -x
	}
	return x
}

// exactness stands in for a service of 4 instances with 2 Redis clients
// each, every client used by several goroutines, hammering one key with a
// slow limit (100 per hour, burst 100) on Redis's own clock: exactly 100
// requests must be admitted, for every algorithm.
func exactness(t *testing.T, addrs []string) {
	const (
		instances  = 4
		clients    = 2
		goroutines = 4 // per client
		attempts   = 13
		limit      = 100
	)
	// One prefix for all the clients: they share the key's state.
	stores := newInstances(t, addrs, instances*clients, Options{Failure: FailError, Timeout: 2 * time.Second})
	for _, a := range sluice.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			hammerExactly(t, a, limit, goroutines, attempts, func(try int) ([]*Store, string) {
				return stores, fmt.Sprintf("hot-%s-%d", a, try)
			})
		})
	}
}

// hammerExactly hammers one key under a policy of algorithm a, limit
// per hour (burst limit), with hammer on the stores and the key that next
// returns, on Redis's own clock, and fails unless none of the calls
// failed and exactly limit were admitted. A fixed window whose run
// crossed a window boundary is run again, twice at most, with next's
// stores and key for the next try. It returns the stores of the run it
// judged.
func hammerExactly(t *testing.T, a sluice.Algorithm, limit int64, goroutines, attempts int, next func(try int) ([]*Store, string)) []*Store {
	t.Helper()
	p := sluice.Policy{Algorithm: a, Limit: limit, Period: time.Hour}
	if a.HasBurst() {
		p.Burst = limit
	}
	for try := 0; ; try++ {
		stores, key := next(try)
		before := redisMicros(t, stores[0])
		admitted, failed := hammer(t, stores, goroutines, attempts, sluice.Request{Policy: &p, Key: key, Cost: 1})
		after := redisMicros(t, stores[0])
		if failed > 0 {
			t.Fatalf("%d calls failed", failed)
		}
		period := int64(p.Period / time.Microsecond)
		if a == sluice.FixedWindowAlgorithm && before/period != after/period && try < 2 {
			t.Logf("the run crossed a window boundary; running it again")
			continue
		}
		if admitted != limit {
			t.Errorf("%d stores × %d goroutines × %d attempts admitted %d under %v, want exactly %d",
				len(stores), goroutines, attempts, admitted, p, limit)
		}
		return stores
	}
}

// hammer sends attempts requests from each of goroutines goroutines per
// store, all at once, and counts the admitted and the failed ones.
func hammer(t *testing.T, stores []*Store, goroutines, attempts int, req sluice.Request) (admitted, failed int64) {
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, st := range stores {
		for range goroutines {
			wg.Go(func() {
				<-start
				for range attempts {
					d, err := st.Allow(t.Context(), time.Time{}, req)
					switch {
					case err != nil || d.Degraded:
						bad.Add(1)
					case d.Allowed:
						ok.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return ok.Load(), bad.Load()
}

// redisMicros returns Redis's TIME in µs, through st's client.
func redisMicros(t *testing.T, st *Store) int64 {
	t.Helper()
	c, err := st.conn(t.Context())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tm, err := c.Do(t.Context(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME = %v, %v", tm, err)
	}
	s, err1 := strconv.ParseInt(tm[0], 10, 64)
	us, err2 := strconv.ParseInt(tm[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME = %v", tm)
	}
	return s*1_000_000 + us
}

func TestExactness(t *testing.T) {
	srv := testkit.StartRedis(t)
	exactness(t, []string{srv.Addr})
}
