package redisstore

import (
	"fmt"
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
		})
	})
	t.Run("ConformanceRedisTime", func(t *testing.T) {
		sluicetest.Run(t, func(t *testing.T) sluice.Store {
			return newTestStore(t, addrs, Options{Failure: FailError})
		}, sluicetest.StoreClock())
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
}

func TestCluster(t *testing.T) {
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
	conformance(t, c.Addrs[:1], 4)
	t.Run("Exactness", func(t *testing.T) { exactness(t, c.Addrs) })
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
