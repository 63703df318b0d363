package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	mathbig "math/big"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// deepDebtPolicies are policies whose debts take longer than 2^53 µs
// (285 years) to repay, up to the 2^61 µs bound: their keys' times pass
// what Lua's numbers hold exactly (big.lua).
func deepDebtPolicies() []sluice.Policy {
	return []sluice.Policy{
		sluice.TokenBucket(3, 10*24*time.Hour, 2).Named("tb-slow"),
		sluice.GCRA(1, 24*time.Hour, 1).Named("gcra-daily"),
		sluice.LeakyBucket(1, time.Minute, 5).Named("leaky-slow"),
		sluice.LeakyBucket(7, 13*time.Second, 3).Named("leaky-odd"),
		sluice.TokenBucket(999_999_937, time.Hour, 17).Named("tb-fast"),
		sluice.FixedWindow(10, time.Hour).Named("fixed"),
		sluice.SlidingWindow(9, 10*time.Minute).Named("window"),
		sluice.SlidingLog(6, 90*time.Second).Named("log"),
	}
}

// TestDeepDebt compares the Redis store with the memory store (whose
// arithmetic is internal/algo's) decision by decision on random traces of
// debits of every size (up to the largest int64), refunds, checks and
// admissions with and without MaxDelay (up to the longest duration), on
// policies whose debts pass 2^53 µs: every field of every decision must
// agree, saturated durations included.
func TestDeepDebt(t *testing.T) {
	srv := testkit.StartRedis(t)
	ps := deepDebtPolicies()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			big := func() int64 {
				switch r.IntN(4) {
				case 0:
					return 1 + r.Int64N(10)
				case 1:
					return 1 + r.Int64N(1<<32)
				case 2:
					return 1 + r.Int64N(1<<r.IntN(63))
				}
				return math.MaxInt64 - r.Int64N(3)
			}
			// internal/algo's SlidingLogDebit overflows on sum + cost near
			// 2^63: its debits stay below.
			// Its token-bucket Debit overflows when the cost's time
			// (min(cost, 2^32−1)·T) lies in [2^63 − 2^61, 2^63): such
			// debits are made the largest instead.
			bigFor := func(p *sluice.Policy) int64 {
				c := big()
				if p.Algorithm == sluice.SlidingLogAlgorithm {
					return min(c, 1<<62)
				}
				if p.Algorithm.HasBurst() {
					q := new(mathbig.Int).Mul(mathbig.NewInt(min(c, math.MaxUint32)), mathbig.NewInt(int64(p.Period/time.Microsecond)))
					q.Quo(q, mathbig.NewInt(p.Limit))
					if q.Cmp(mathbig.NewInt(1<<62)) >= 0 && q.BitLen() <= 64 {
						return math.MaxInt64
					}
				}
				return c
			}
			var tr sluicetest.Trace
			tr.Seed = seed
			for range 600 {
				at = at.Add(time.Duration(r.Int64N(int64(time.Hour) >> r.IntN(40))))
				p := &ps[r.IntN(len(ps))]
				req := sluice.Request{Policy: p, Key: fmt.Sprint("k", r.IntN(2))}
				st := sluicetest.Step{At: at, Reqs: []sluice.Request{req}}
				switch n := r.IntN(10); {
				case n < 3:
					st.Op = sluicetest.OpDebit
					st.Reqs[0].Cost = bigFor(p)
				case n < 5:
					st.Op = sluicetest.OpRefund
					st.Reqs[0].Cost = big()
				case n < 8:
					st.Op = sluicetest.OpAllow
					st.Reqs[0].Cost = r.Int64N(p.Capacity() + 2)
				default:
					st.Op = sluicetest.OpPeek
					st.Reqs[0].Cost = r.Int64N(p.Capacity() + 2)
				}
				if st.Op != sluicetest.OpDebit && st.Op != sluicetest.OpRefund && p.Algorithm == sluice.LeakyBucketAlgorithm && r.IntN(2) == 0 {
					st.Reqs[0].MaxDelay = time.Duration(big())
				}
				tr.Steps = append(tr.Steps, st)
			}
			rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
			sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, tr)
			// The trace went where Lua's numbers are not exact: a key's
			// time passed 2^53 µs.
			deep := 0
			for _, k := range srv.Keys(t, rs.prefix+"*") {
				if v, err := srv.Do("GET", k); err == nil {
					if s, ok := v.(string); ok {
						if at := strings.Fields(s)[0]; len(at) > 16 || len(at) == 16 && at > "9007199254740992" {
							deep++
						}
					}
					if false {
						deep++
					}
				}
			}
			if deep == 0 {
				t.Errorf("no key's time passed 2^53 µs: the trace did not test big.lua")
			}
		})
	}
}

// TestSettleAcrossStores settles leases from three stores on one Redis (a
// single server, and a cluster) at once, each lease released by a store
// other than the one that took it, some twice: the key is charged exactly
// the actual costs, every lease settles once, and the stores' Usage counts
// add up to the differences settled.
func TestSettleAcrossStores(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		settleAcrossStores(t, []string{srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
		settleAcrossStores(t, c.Addrs)
	})
}

func settleAcrossStores(t *testing.T, addrs []string) {
	ctx := t.Context()
	var stores []*Store
	for i := range 3 {
		o := Options{Failure: FailError}
		if i > 0 {
			o.Prefix = stores[0].prefix
		}
		stores = append(stores, newTestStore(t, addrs, o))
	}
	p := sluice.FixedWindow(sluice.MaxLimit, 24*time.Hour).Named("sum")
	q := sluice.TokenBucket(sluice.MaxLimit, 24*time.Hour, 0).Named("tokens")
	const callers, each, estimate = 6, 30, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sum, settledTwice int64
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				st := stores[(g+i)%3]
				reqs := []sluice.Request{
					{Policy: &p, Key: "k", Cost: estimate, SettleWithin: time.Hour},
					{Policy: &q, Key: "k", Cost: estimate, SettleWithin: time.Hour},
				}
				d, err := st.AllowAll(ctx, time.Time{}, reqs, nil)
				if err != nil || !d.Allowed || d.Lease == "" {
					t.Errorf("AllowAll of estimates = %+v, %v", d, err)
					return
				}
				actual := int64((g*7 + i*3) % 11) // below, at and above the estimate
				ok, err := stores[(g+i+1)%3].Release(ctx, time.Time{}, d.Lease, []int64{actual, actual})
				if err != nil || !ok {
					t.Errorf("Release = %v, %v; want true", ok, err)
					return
				}
				again, err := stores[(g+i+2)%3].Release(ctx, time.Time{}, d.Lease, []int64{100, 100})
				if err != nil || again {
					t.Errorf("Release again = %v, %v; want false", again, err)
					return
				}
				mu.Lock()
				sum += actual
				settledTwice++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, pol := range []*sluice.Policy{&p, &q} {
		d, err := stores[0].Peek(ctx, time.Time{}, sluice.Request{Policy: pol, Key: "k", Cost: 0})
		// The token bucket refills meanwhile (11,574 units a second).
		slack := int64(0)
		if pol.Algorithm.HasBurst() {
			slack = 1_000_000
		}
		if err != nil || d.Remaining > sluice.MaxLimit-sum+slack || d.Remaining < sluice.MaxLimit-sum {
			t.Errorf("%s after every settlement: %+v, %v; want %d remaining", pol.Name, d, err, sluice.MaxLimit-sum)
		}
		var debited, refunded int64
		for _, st := range stores {
			db, rf, un, err := st.Usage(pol)
			if err != nil || un != 0 {
				t.Fatalf("Usage = %d, %d, %d, %v", db, rf, un, err)
			}
			debited, refunded = debited+db, refunded+rf
		}
		if got := callers*each*estimate + debited - refunded; got != sum {
			t.Errorf("%s: estimates %d + debited %d − refunded %d = %d, want the actual costs' sum %d", pol.Name, callers*each*estimate, debited, refunded, got, sum)
		}
	}
	if settledTwice != callers*each {
		t.Errorf("%d leases settled, want %d", settledTwice, callers*each)
	}
}

// TestRefundDropsLocalRefusals checks that a refund, a settlement below
// the estimate and a reset leave no local refusal behind: the request
// that the cached state refused is admitted at once.
func TestRefundDropsLocalRefusals(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	p := sluice.FixedWindow(10, time.Hour).Named("hourly")
	req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "k", Cost: cost} }
	refuseLocally := func(what string) {
		t.Helper()
		for range 2 {
			if d, err := st.Allow(ctx, time.Time{}, req(1)); err != nil || d.Allowed {
				t.Fatalf("%s: Allow = %+v, %v; want refused", what, d, err)
			}
		}
		if n := st.LocalRefusalStats().Local; n == 0 {
			t.Fatalf("%s: no local refusal", what)
		}
	}
	admitted := func(what string) {
		t.Helper()
		n := st.LocalRefusalStats().Local
		if d, err := st.Allow(ctx, time.Time{}, req(1)); err != nil || !d.Allowed {
			t.Fatalf("%s: Allow = %+v, %v; want admitted", what, d, err)
		}
		if st.LocalRefusalStats().Local != n {
			t.Fatalf("%s: refused locally", what)
		}
	}
	if d, err := st.Debit(ctx, time.Time{}, req(12)); err != nil || d.Allowed {
		t.Fatalf("Debit(12 of 10) = %+v, %v", d, err)
	}
	refuseLocally("after the debit")
	if _, err := st.Refund(ctx, time.Time{}, req(5)); err != nil {
		t.Fatal(err)
	}
	admitted("after a refund")

	d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 2, SettleWithin: time.Hour})
	if err != nil || !d.Allowed || d.Lease == "" {
		t.Fatalf("Allow estimate 2 = %+v, %v", d, err)
	}
	refuseLocally("at the limit")
	if ok, err := st.Release(ctx, time.Time{}, d.Lease, []int64{0}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	admitted("after a settlement of 0")

	if d, err := st.Debit(ctx, time.Time{}, req(10)); err != nil || d.Allowed {
		t.Fatalf("Debit(10) = %+v, %v", d, err)
	}
	refuseLocally("in debt again")
	if err := st.Reset(ctx, req(0)); err != nil {
		t.Fatal(err)
	}
	admitted("after a reset")
}

// TestUsageFailure checks Debit, Refund, Reset and a settling Release
// while Redis is unreachable, under each failure policy.
func TestUsageFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	p := sluice.TokenBucket(10, time.Hour, 0)
	req := sluice.Request{Policy: &p, Key: "k", Cost: 3}
	for _, fp := range []FailurePolicy{FailAllow, FailDeny, FailLocal, FailError} {
		t.Run(fp.String(), func(t *testing.T) {
			ctx := t.Context()
			o := Options{Failure: fp, Timeout: 50 * time.Millisecond}
			var local *memstore.Store
			if fp == FailLocal {
				local = memstore.New(memstore.Options{})
				o.Local = local
			}
			st := newTestStore(t, []string{dead}, o)
			d, err := st.Debit(ctx, time.Time{}, req)
			switch fp {
			case FailError:
				if err == nil {
					t.Errorf("Debit = %+v; want the error", d)
				}
			case FailAllow, FailDeny:
				if err != nil || !d.Degraded || d.Allowed != (fp == FailAllow) {
					t.Errorf("Debit = %+v, %v; want degraded, allowed %v", d, err, fp == FailAllow)
				}
			case FailLocal:
				if err != nil || !d.Degraded || !d.Allowed || d.Remaining != 7 {
					t.Errorf("Debit = %+v, %v; want degraded, 7 remaining (by the local store)", d, err)
				}
			}
			d, err = st.Refund(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1})
			if fp == FailError && err == nil || fp != FailError && (err != nil || !d.Degraded || !d.Allowed) {
				t.Errorf("Refund = %+v, %v", d, err)
			}
			if fp == FailLocal && d.Remaining != 8 {
				t.Errorf("Refund = %+v; want 8 remaining (by the local store)", d)
			}
			if err := st.Reset(ctx, req); err == nil {
				t.Error("Reset: no error")
			}
			if fp == FailLocal {
				if d, _ := local.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 0}); d.Remaining != 10 {
					t.Errorf("the local store after Reset: %+v; want reset", d)
				}
				d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 4, SettleWithin: time.Hour})
				if err != nil || !d.Degraded || d.Lease == "" {
					t.Fatalf("Allow estimate = %+v, %v; want a local lease", d, err)
				}
				if ok, err := st.Release(ctx, time.Time{}, d.Lease, []int64{1}); err != nil || !ok {
					t.Errorf("Release of a local lease = %v, %v", ok, err)
				}
				if d, _ := local.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 0}); d.Remaining != 9 {
					t.Errorf("the local store after settling 1 of 4: %+v; want 9 remaining", d)
				}
			}
			lease, err := encodeLease(newLeaseID(), []string{st.policies.get(&p).key(st.prefix, "k")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Release(ctx, time.Time{}, lease, []int64{1}); err == nil || errors.Is(err, sluice.ErrInvalidLease) {
				t.Errorf("Release of a Redis lease with Redis away: error %v, want Redis's failure", err)
			}
		})
	}
}

// TestSettleLeaseChecks checks what a settling Release refuses: a lease
// naming a key of another store, and a lease whose keys are not those of
// its settlement (made up by the holder of its id).
func TestSettleLeaseChecks(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := context.Background()
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	p := sluice.TokenBucket(10, time.Hour, 0)
	d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "a", Cost: 4, SettleWithin: time.Hour})
	if err != nil || d.Lease == "" {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	id, keys, err := parseLease(d.Lease)
	if err != nil || len(keys) != 1 {
		t.Fatalf("parseLease = %v, %v", keys, err)
	}
	// The holder of the id may name other keys: on another caller's key
	// the lease finds no settlement (it is kept in the slot, and under the
	// hash tag, of its first key); on another policy of the same key the
	// settlement names a key the lease does not, and nothing is settled.
	other, err := encodeLease(id, []string{st.policies.get(&p).key(st.prefix, "b")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Release(ctx, time.Time{}, other, []int64{0}); err != nil || ok {
		t.Errorf("Release of the lease's id over another caller's key = %v, %v; want false, nil", ok, err)
	}
	q := sluice.FixedWindow(10, time.Hour)
	other, err = encodeLease(id, []string{st.policies.get(&q).key(st.prefix, "a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Release(ctx, time.Time{}, other, []int64{0}); err == nil {
		t.Error("Release of the lease's id over another policy's key: no error")
	}
	foreign, err := encodeLease(id, []string{"elsewhere:{k:a}:tb:10:1h0m0s:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Release(ctx, time.Time{}, foreign, nil); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("Release of a lease naming another prefix's key: %v, want ErrInvalidLease", err)
	}
	// The lease itself still settles, once.
	if ok, err := st.Release(ctx, time.Time{}, d.Lease, []int64{1}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if d, err := st.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "a", Cost: 0}); err != nil || d.Remaining != 9 {
		t.Errorf("after settling 1 of 4: %+v, %v; want 9 remaining", d, err)
	}
}

// TestDeepDebtBands drives the token-bucket family's keys to the largest
// debt (2^61 µs, or B·T plus 2^32−1 units), then by refunds to backlogs
// just past 2^53 µs, where the scripts reply durations in whole
// milliseconds (b_reply), and compares every microsecond of one
// millisecond there with the memory store: a backlog off by one µs, or a
// duration rounded the wrong way, shows.
func TestDeepDebtBands(t *testing.T) {
	srv := testkit.StartRedis(t)
	at := time.Date(2025, 3, 1, 0, 0, 0, 123_000, time.UTC)
	for _, p := range deepDebtPolicies() {
		if !p.Algorithm.HasBurst() {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "k", Cost: cost} }
			// Two debits: the first owes 2^32−1 units more than empty, the
			// second reaches the most debt.
			maxDebit := sluicetest.Step{At: at, Op: sluicetest.OpDebit, Reqs: []sluice.Request{req(math.MaxInt64)}}
			steps := []sluicetest.Step{maxDebit, maxDebit}
			// The most debt, min((B + 2^32 − 1)·P/L, 2^61) µs; a refund of
			// k units leaves most − k·P/L, just past 9.1e15 µs, between
			// 2^53 and the longest duration.
			P, L := mathbig.NewInt(int64(p.Period/time.Microsecond)), mathbig.NewInt(p.Limit)
			most := new(mathbig.Int).Mul(mathbig.NewInt(p.Capacity()+math.MaxUint32), P)
			most.Quo(most, L)
			if most.Cmp(mathbig.NewInt(1<<61)) > 0 {
				most.SetInt64(1 << 61)
			}
			refundTo := func(at time.Time, backlog int64) {
				k := new(mathbig.Int).Sub(most, mathbig.NewInt(backlog))
				k.Mul(k, L).Quo(k, P)
				if k.Sign() <= 0 {
					t.Skipf("the most debt, %v µs, stays below %d", most, backlog)
				}
				steps = append(steps, sluicetest.Step{At: at, Op: sluicetest.OpRefund, Reqs: []sluice.Request{req(k.Int64())}})
			}
			if p.Algorithm == sluice.LeakyBucketAlgorithm {
				// Past the longest duration, to which Go's waits saturate:
				// a MaxDelay of m µs retries after that duration less m.
				refundTo(at, 9_223_372_136_854_775)
				for m := range 3000 {
					r := req(1)
					r.MaxDelay = time.Duration(m)*time.Microsecond + time.Duration(m%3)
					steps = append(steps, sluicetest.Step{At: at, Op: sluicetest.OpAllow, Reqs: []sluice.Request{r}})
				}
				steps = append(steps, maxDebit, maxDebit)
			}
			refundTo(at, 9_100_000_000_000_000)
			for d := range 1000 {
				now := at.Add(time.Duration(d) * time.Microsecond)
				steps = append(steps, sluicetest.Step{At: now, Op: sluicetest.OpPeek, Reqs: []sluice.Request{req(1)}})
				if d%97 == 0 {
					r := req(0)
					steps = append(steps, sluicetest.Step{At: now, Op: sluicetest.OpAllow, Reqs: []sluice.Request{r}})
					r = req(1)
					r.MaxDelay = time.Duration(d) * 24 * time.Hour
					steps = append(steps, sluicetest.Step{At: now, Op: sluicetest.OpAllow, Reqs: []sluice.Request{r}})
				}
			}
			rs := newTestStore(t, []string{srv.Addr}, Options{CallerTime: true, Failure: FailError})
			sluicetest.CompareStores(t, memstore.New(memstore.Options{}), rs, sluicetest.Trace{Steps: steps})
		})
	}
}

// TestRefundOnAnotherStore checks that a refund, a settlement below its
// estimate and a reset by one store reach the local refusals of another
// on the same Redis through the refund channel: with no MaxAge to fall
// back on, the other store would refuse the key locally for ever.
func TestRefundOnAnotherStore(t *testing.T) {
	t.Run("single", func(t *testing.T) { refundOnAnotherStore(t, []string{testkit.StartRedis(t).Addr}) })
	t.Run("cluster", func(t *testing.T) {
		// The message is published on the key's master and heard on
		// whichever node each store subscribed through.
		c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{})
		refundOnAnotherStore(t, c.Addrs)
	})
}

func refundOnAnotherStore(t *testing.T, addrs []string) {
	ctx := t.Context()
	a := newTestStore(t, addrs, Options{Failure: FailError, LocalRefusals: LocalRefusals{MaxAge: -1}})
	b := newTestStore(t, addrs, Options{Failure: FailError, Prefix: a.prefix})
	p := sluice.FixedWindow(10, 24*time.Hour).Named("daily")
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	refusedLocally := func(what string) {
		t.Helper()
		n := a.LocalRefusalStats().Local
		for range 2 {
			if d, err := a.Allow(ctx, time.Time{}, req); err != nil || d.Allowed {
				t.Fatalf("%s: Allow = %+v, %v; want refused", what, d, err)
			}
		}
		if a.LocalRefusalStats().Local == n {
			t.Fatalf("%s: no local refusal", what)
		}
	}
	heard := func(what string) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, what+" to reach the other store", func() bool {
			d, err := a.Allow(ctx, time.Time{}, req)
			return err == nil && d.Allowed
		})
	}

	if _, err := b.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 15}); err != nil {
		t.Fatal(err)
	}
	refusedLocally("in debt")
	if _, err := b.Refund(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 15}); err != nil {
		t.Fatal(err)
	}
	heard("a refund")

	d, err := b.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 9, SettleWithin: time.Hour})
	if err != nil || !d.Allowed {
		t.Fatalf("estimate of 9 = %+v, %v", d, err)
	}
	refusedLocally("at the limit after an estimate")
	if ok, err := b.Release(ctx, time.Time{}, d.Lease, []int64{1}); err != nil || !ok {
		t.Fatalf("settle = %v, %v", ok, err)
	}
	heard("a settlement below the estimate")

	if _, err := b.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 20}); err != nil {
		t.Fatal(err)
	}
	refusedLocally("in debt again")
	if err := b.Reset(ctx, req); err != nil {
		t.Fatal(err)
	}
	heard("a reset")
}

// TestRefundWhileDeaf checks that a store whose subscription to the
// refund channel broke drops every local refusal when it subscribes
// again, so a refund it could not hear leaves no stale refusal behind
// from then on; and that it refuses locally again after.
func TestRefundWhileDeaf(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	a := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, LocalRefusals: LocalRefusals{MaxAge: -1}})
	b := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, Prefix: a.prefix, LocalRefusals: LocalRefusals{Off: true}})
	p := sluice.FixedWindow(10, 24*time.Hour).Named("daily")
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	if _, err := b.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 15}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := a.Allow(ctx, time.Time{}, req); err != nil || d.Allowed {
			t.Fatalf("Allow in debt = %+v, %v", d, err)
		}
	}
	if a.LocalRefusalStats().Local == 0 {
		t.Fatal("no local refusal")
	}
	// Break every subscriber's connection, and refund while a cannot hear.
	c := testkit.RedisClient(t, srv.Addr)
	if err := c.Do(ctx, c.B().ClientKill().TypePubsub().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the store to notice its broken subscription", func() bool { return !a.refusals.live.Load() })
	if _, err := b.Refund(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 15}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the store to subscribe again", func() bool { return a.refusals.live.Load() })
	n := a.LocalRefusalStats().Local
	if d, err := a.Allow(ctx, time.Time{}, req); err != nil || !d.Allowed {
		t.Fatalf("Allow after a refund the store could not hear = %+v, %v; want admitted", d, err)
	}
	if a.LocalRefusalStats().Local != n {
		t.Fatal("refused locally after an unheard refund, once subscribed again")
	}
	// Subscribed again, it keeps refusals again.
	if _, err := b.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 15}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := a.Allow(ctx, time.Time{}, req); err != nil || d.Allowed {
			t.Fatalf("Allow in debt = %+v, %v", d, err)
		}
	}
	if a.LocalRefusalStats().Local == n {
		t.Fatal("no local refusal once subscribed again")
	}
}

// TestSentinelUsage runs the conformance suite's costs known afterwards
// through Redis Sentinel, which names the master the store decides on.
func TestSentinelUsage(t *testing.T) {
	master := testkit.StartRedis(t)
	sentinel := testkit.StartRedisSentinel(t, master, "sluice-master")
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return newTestStore(t, []string{sentinel.Addr}, Options{CallerTime: true, Failure: FailError,
			ClientOption: rueidis.ClientOption{Sentinel: rueidis.SentinelOption{MasterSet: "sluice-master"}}})
	}, sluicetest.Leases(), sluicetest.Usage())
}

// TestLeaseHoldsAndEstimates checks one lease over a concurrency hold and
// an estimate: Renew extends the hold, Release frees it and settles the
// estimate, once.
func TestLeaseHoldsAndEstimates(t *testing.T) {
	srv := testkit.StartRedis(t)
	ctx := t.Context()
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	c := sluice.Concurrency(2, time.Minute)
	p := sluice.TokenBucket(100, time.Hour, 0)
	reqs := []sluice.Request{{Policy: &c, Key: "k", Cost: 2}, {Policy: &p, Key: "k", Cost: 5, SettleWithin: time.Hour}, {Policy: &p, Key: "k", Cost: 0}}
	out := make([]sluice.Decision, len(reqs))
	d, err := st.AllowAll(ctx, time.Time{}, reqs, out)
	if err != nil || !d.Allowed || d.Lease == "" || out[2].Remaining != 95 {
		t.Fatalf("AllowAll = %+v %+v, %v; want allowed with a lease, the check seeing 95 left", d, out, err)
	}
	if in, err := st.Renew(ctx, time.Time{}, d.Lease); err != nil || in <= 59*time.Second {
		t.Errorf("Renew = %v, %v; want about a minute", in, err)
	}
	if d, err := st.Peek(ctx, time.Time{}, sluice.Request{Policy: &c, Key: "k", Cost: 1}); err != nil || d.Allowed {
		t.Errorf("Peek of the held limit = %+v, %v; want refused", d, err)
	}
	if ok, err := st.Release(ctx, time.Time{}, d.Lease, []int64{-1, 8}); err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	if d, err := st.Peek(ctx, time.Time{}, sluice.Request{Policy: &c, Key: "k", Cost: 2}); err != nil || !d.Allowed {
		t.Errorf("Peek after the release = %+v, %v; want the units free", d, err)
	}
	if d, err := st.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 0}); err != nil || d.Remaining != 92 {
		t.Errorf("after settling 8 of 5: %+v, %v; want 92 left", d, err)
	}
	if ok, err := st.Release(ctx, time.Time{}, d.Lease, []int64{-1, 0}); err != nil || ok {
		t.Errorf("Release again = %v, %v; want false", ok, err)
	}
	if _, err := st.Renew(ctx, time.Time{}, d.Lease); !errors.Is(err, sluice.ErrLeaseExpired) {
		t.Errorf("Renew after the release: %v, want ErrLeaseExpired", err)
	}
}
