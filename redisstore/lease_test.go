package redisstore

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

func TestParseLease(t *testing.T) {
	id := leaseID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	keys := []string{"sluice:{k:user-1}:cc:3:10s:0", "sluice:{k:user-1}:cc:5:1m0s:0:wide"}
	lease, err := encodeLease(id, keys)
	if err != nil {
		t.Fatal(err)
	}
	gotID, gotKeys, err := parseLease(lease)
	if err != nil || gotID != id || strings.Join(gotKeys, "|") != strings.Join(keys, "|") {
		t.Fatalf("parseLease(encodeLease(...)) = %v, %q, %v; want %v, %q", gotID, gotKeys, err, id, keys)
	}
	long := strings.Repeat("k", maxLeaseBytes)
	if _, err := encodeLease(id, []string{long}); !errors.Is(err, errLeaseTooLong) {
		t.Errorf("encodeLease of a %d-byte key: error %v, want errLeaseTooLong", len(long), err)
	}
	for _, bad := range []string{
		"", "r1.", "m1." + lease[3:], "r2." + lease[3:], lease + "A", lease[:len(lease)-1], lease + "=",
		leasePrefix + leaseEncoding.EncodeToString(id[:]),                       // no key
		leasePrefix + leaseEncoding.EncodeToString(append(id[:], 0)),            // an empty key
		leasePrefix + leaseEncoding.EncodeToString(append(id[:], 5, 'a')),       // a length past the end
		leasePrefix + leaseEncoding.EncodeToString(append(id[:], 0x81, 0, 'a')), // an overlong length
		leasePrefix + strings.Repeat("A", leaseEncoding.EncodedLen(maxLeaseBytes)+1),
		strings.Replace(lease, "A", "+", 1), "r1.!!!!",
	} {
		if _, _, err := parseLease(bad); !errors.Is(err, sluice.ErrInvalidLease) {
			t.Errorf("parseLease(%.40q) error = %v, want ErrInvalidLease", bad, err)
		}
	}
}

// FuzzParseLease checks that parseLease takes exactly what encodeLease
// makes: anything else is an error wrapping sluice.ErrInvalidLease, and
// what it takes encodes back to itself, within the bounds.
func FuzzParseLease(f *testing.F) {
	id := leaseID{0xff, 1, 2}
	for _, keys := range [][]string{{"sluice:{k:a}:cc:3:10s:0"}, {"p:{k:a}:cc:1:1s:0", "p:{k:a}:cc:2:1s:0:n"}} {
		lease, err := encodeLease(id, keys)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(lease)
	}
	f.Add("r1.")
	f.Add("m1.AAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, lease string) {
		id, keys, err := parseLease(lease)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLease) {
				t.Fatalf("parseLease(%q) error %v does not wrap ErrInvalidLease", lease, err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > maxLeaseKeys {
			t.Fatalf("parseLease(%q) = %d keys", lease, len(keys))
		}
		for _, k := range keys {
			if k == "" {
				t.Fatalf("parseLease(%q) has an empty key", lease)
			}
		}
		again, err := encodeLease(id, keys)
		if err != nil || again != lease {
			t.Fatalf("encodeLease(parseLease(%q)) = %q, %v", lease, again, err)
		}
		for i := 0; i < len(lease); i++ {
			if lease[i] < 0x21 || lease[i] > 0x7e {
				t.Fatalf("lease %q is not printable", lease)
			}
		}
	})
}

// leaseTests checks leases on Redis at addrs beyond the conformance
// suite: across store instances, exactness with several instances, and
// expiry on Redis's clock.
func leaseTests(t *testing.T, addrs []string) {
	t.Run("AcrossInstances", func(t *testing.T) { leaseAcrossInstances(t, addrs) })
	t.Run("Exact", func(t *testing.T) { leaseExactInstances(t, addrs) })
	t.Run("Expiry", func(t *testing.T) { leaseExpiry(t, addrs) })
	t.Run("AcrossSlots", func(t *testing.T) { leaseAcrossSlots(t, addrs) })
	t.Run("Differential", func(t *testing.T) { leaseDifferential(t, addrs, 4) })
}

// leaseAcrossInstances takes a lease on one store and releases it on
// another on the same Redis; the other store, which Redis refused while
// the lease held the units, must admit at once after the release (no
// local refusal of a concurrency policy).
func leaseAcrossInstances(t *testing.T, addrs []string) {
	stores := newInstances(t, addrs, 2, Options{Failure: FailError})
	ctx := t.Context()
	p := sluice.Concurrency(2, time.Hour).Named("across")
	req := sluice.Request{Policy: &p, Key: "k", Cost: 2}
	d, err := stores[0].Allow(ctx, time.Time{}, req)
	if err != nil || !d.Allowed || !strings.HasPrefix(d.Lease, leasePrefix) {
		t.Fatalf("Allow on store 0 = %+v, %v; want allowed with an r1. lease", d, err)
	}
	lease := d.Lease
	for range 3 {
		if d, err := stores[1].Allow(ctx, time.Time{}, req); err != nil || d.Allowed || d.Lease != "" {
			t.Fatalf("Allow on store 1 while held = %+v, %v; want refused", d, err)
		}
	}
	if in, err := stores[1].Renew(ctx, time.Time{}, lease); err != nil || in <= 59*time.Minute || in > time.Hour {
		t.Errorf("Renew on store 1 = %v, %v; want about 1h", in, err)
	}
	if ok, err := stores[1].Release(ctx, time.Time{}, lease, nil); err != nil || !ok {
		t.Fatalf("Release on store 1 = %v, %v; want true", ok, err)
	}
	d, err = stores[1].Allow(ctx, time.Time{}, req)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow on store 1 after the release = %+v, %v; want allowed", d, err)
	}
	if n := localCount(stores...); n != 0 {
		t.Errorf("%d local refusals of a concurrency policy, want none", n)
	}
	if ok, err := stores[0].Release(ctx, time.Time{}, d.Lease, nil); err != nil || !ok {
		t.Errorf("Release on store 0 of store 1's lease = %v, %v; want true", ok, err)
	}
	// A lease naming a key that is not a concurrency key of this prefix.
	other := newTestStore(t, addrs, Options{Failure: FailError})
	if _, err := other.Release(ctx, time.Time{}, lease, nil); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("Release on a store of another prefix: error %v, want ErrInvalidLease", err)
	}
	// A lease may name the key of an estimate to settle, but one made up
	// has no settlement under its id: it touches nothing.
	tb := sluice.TokenBucket(1, time.Hour, 0)
	if d, err := stores[0].Allow(ctx, time.Time{}, sluice.Request{Policy: &tb, Key: "k", Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	forged, err := encodeLease(newLeaseID(), []string{stores[0].policies.get(&tb).key(stores[0].prefix, "k")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := stores[0].Release(ctx, time.Time{}, forged, []int64{0}); err != nil || ok {
		t.Errorf("Release of a made-up lease naming a token-bucket key = %v, %v; want false, nil", ok, err)
	}
	if d, err := stores[0].Peek(ctx, time.Time{}, sluice.Request{Policy: &tb, Key: "k", Cost: 1}); err != nil || d.Allowed {
		t.Errorf("Peek after the made-up lease = %+v, %v; want refused: nothing given back", d, err)
	}
	forged, err = encodeLease(newLeaseID(), []string{stores[0].prefix + "{k:k}:xx:1:1s:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].Release(ctx, time.Time{}, forged, nil); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("Release of a lease naming a key of no algorithm: error %v, want ErrInvalidLease", err)
	}
}

// leaseExactInstances has several store instances, each with several
// goroutines, take and release units of one key on Redis's clock: never
// more than the limit held at once, and the limit reached.
func leaseExactInstances(t *testing.T, addrs []string) {
	const (
		instances  = 4
		goroutines = 4
		attempts   = 40
		limit      = 3
	)
	stores := newInstances(t, addrs, instances, Options{Failure: FailError, Timeout: 5 * time.Second})
	ctx := t.Context()
	p := sluice.Concurrency(limit, time.Hour).Named("exact")
	rate := sluice.TokenBucket(1_000_000, time.Hour, 0).Named("rate")
	var held, most, admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range instances * goroutines {
		st := stores[i%instances]
		wg.Go(func() {
			reqs := []sluice.Request{{Policy: &p, Key: "k", Cost: 1}, {Policy: &rate, Key: "k", Cost: 1}}
			for j := range attempts {
				var d sluice.Decision
				var err error
				if j%2 == 0 {
					d, err = st.Allow(ctx, time.Time{}, reqs[0])
				} else {
					d, err = st.AllowAll(ctx, time.Time{}, reqs, nil)
				}
				if err != nil {
					t.Errorf("decision: %v", err)
					return
				}
				if !d.Allowed {
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				n := held.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond) // hold the unit a little while
				held.Add(-1)
				if ok, err := st.Release(ctx, time.Time{}, d.Lease, nil); err != nil || !ok {
					t.Errorf("Release = %v, %v; want true", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d admitted, %d refused, at most %d held at once", admitted.Load(), refused.Load(), most.Load())
	if m := most.Load(); m != limit {
		t.Errorf("at most %d units held at once, want exactly the limit %d (never more, and reached)", m, limit)
	}
	d, err := stores[0].Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: limit})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("Peek of the whole limit after every release = %+v, %v; want allowed", d, err)
	}
}

// leaseExpiry checks holds expiring on Redis's clock: a hold not released
// frees its unit after its lease and no sooner; a renewed one holds on.
func leaseExpiry(t *testing.T, addrs []string) {
	// Long enough that a loaded machine's pauses (a renewal every third
	// of it) never let a renewed hold lapse.
	const lease = 2 * time.Second
	st := newTestStore(t, addrs, Options{Failure: FailError})
	ctx := t.Context()
	p := sluice.Concurrency(1, lease).Named("expiry")
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}

	start := time.Now()
	d, err := st.Allow(ctx, time.Time{}, req)
	if err != nil || !d.Allowed || d.ResetAfter != lease {
		t.Fatalf("Allow = %+v, %v; want allowed, ResetAfter %v", d, err, lease)
	}
	held := d.Lease
	d, err = st.Allow(ctx, time.Time{}, req)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > lease {
		t.Fatalf("Allow while held = %+v, %v; want refused with RetryAfter in (0, %v]", d, err, lease)
	}
	waitAdmitted(t, st, req, 5*time.Second)
	if el := time.Since(start); el < lease {
		t.Errorf("the unit was free again %v after it was taken, before its lease of %v", el, lease)
	}
	if ok, err := st.Release(ctx, time.Time{}, held, nil); err != nil || ok {
		t.Errorf("Release after expiry = %v, %v; want false, nil", ok, err)
	}
	if _, err := st.Renew(ctx, time.Time{}, held); !errors.Is(err, sluice.ErrLeaseExpired) {
		t.Errorf("Renew after expiry: error %v, want ErrLeaseExpired", err)
	}

	// Renewed every third of its lease, a hold outlives its lease.
	d, err = st.Allow(ctx, time.Time{}, req)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v; want allowed", d, err)
	}
	held = d.Lease
	for range 4 {
		time.Sleep(lease / 3)
		if in, err := st.Renew(ctx, time.Time{}, held); err != nil || in != lease {
			t.Fatalf("Renew = %v, %v; want %v", in, err, lease)
		}
		if d, err := st.Peek(ctx, time.Time{}, req); err != nil || d.Allowed {
			t.Fatalf("Peek while renewed = %+v, %v; want refused", d, err)
		}
	}
	waitAdmitted(t, st, req, 5*time.Second)
}

// waitAdmitted peeks req until it would be admitted, failing t after
// within.
func waitAdmitted(t *testing.T, st *Store, req sluice.Request, within time.Duration) {
	t.Helper()
	testkit.WaitFor(t, within, "the unit to be free", func() bool {
		d, err := st.Peek(t.Context(), time.Time{}, req)
		return err == nil && d.Allowed
	})
}

// leaseAcrossSlots releases and renews a lease whose keys lie in two hash
// slots, which no AllowAll makes on Cluster: its holds are taken here
// with one id by calling the AllowAll script on each key.
func leaseAcrossSlots(t *testing.T, addrs []string) {
	st := newTestStore(t, addrs, Options{Failure: FailError})
	ctx := t.Context()
	p := sluice.Concurrency(2, time.Hour).Named("slots")
	c := st.policies.get(&p)
	id := newLeaseID()
	var keys []string
	for _, k := range []string{"a", "b"} { // slots 15495 and 3300, see TestCluster
		key := c.key(st.prefix, k)
		reqs := []sluice.Request{{Policy: &p, Key: k, Cost: 1}}
		args, err := st.manyArgs([]*compiled{c}, reqs, "", time.Time{}, id.text())
		if err != nil {
			t.Fatal(err)
		}
		if vals, err := st.eval(ctx, st.many, []string{key}, args, nil); err != nil || len(vals) < replyHeader+1 || vals[replyHeader] != 1 {
			t.Fatalf("taking a unit of %q: %v, %v", key, vals, err)
		}
		keys = append(keys, key)
	}
	if slot(keys[0]) == slot(keys[1]) {
		t.Fatalf("keys %q share a slot; pick other keys", keys)
	}
	lease, err := encodeLease(id, keys)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := st.Renew(ctx, time.Time{}, lease); err != nil || in <= 59*time.Minute {
		t.Errorf("Renew = %v, %v; want about 1h", in, err)
	}
	if ok, err := st.Release(ctx, time.Time{}, lease, nil); err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	for _, k := range []string{"a", "b"} {
		d, err := st.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: k, Cost: 2})
		if err != nil || !d.Allowed {
			t.Errorf("Peek(%q) after the release = %+v, %v; want allowed with nothing held", k, d, err)
		}
	}
}

// TestLeaseKeyExpires checks that a concurrency key leaves Redis by itself
// two minutes after its last hold expires, and at once when a script
// finds it holding nothing.
func TestLeaseKeyExpires(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError})
	p := sluice.Concurrency(2, 200*time.Millisecond)
	d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	key := st.policies.get(&p).key(st.prefix, "k")
	if ttl, err := srv.Do("PTTL", key); err != nil || ttl.(int64) <= 120000 || ttl.(int64) > 120201 {
		t.Errorf("PTTL %s = %v, %v; want in (120000, 120201] ms", key, ttl, err)
	}
	waitHoldsExpire(t, srv.Addr, key)
	if d, err := st.Peek(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 2}); err != nil || !d.Allowed {
		t.Fatalf("Peek after the hold expired = %+v, %v", d, err)
	}
	if n, err := srv.Do("EXISTS", key); err != nil || n != int64(0) {
		t.Errorf("EXISTS %s after a Peek found its hold expired = %v, %v; want 0", key, n, err)
	}
	if n, err := st.Expired(&p); err != nil || n != 1 {
		t.Errorf("Expired = %d, %v; want 1", n, err)
	}
}

// TestLeaseFailure checks the failure policies with concurrency policies
// while Redis is away (killed, or paused so that its keys survive), and
// the leases taken before: released once Redis is back when their keys
// survived, and releasing nothing, without error, when they did not.
func TestLeaseFailure(t *testing.T) {
	for _, fp := range []FailurePolicy{FailAllow, FailDeny, FailLocal} {
		for _, how := range []string{"kill", "pause"} {
			t.Run(fp.String()+"/"+how, func(t *testing.T) { leaseFailure(t, fp, how) })
		}
	}
}

func leaseFailure(t *testing.T, fp FailurePolicy, how string) {
	srv := testkit.StartRedis(t)
	opts := Options{Failure: fp, Timeout: failTimeout, BreakerThreshold: 3, BreakerCooldown: failCooldown}
	if fp == FailLocal {
		opts.Local = memstore.New(memstore.Options{})
	}
	st := newTestStore(t, []string{srv.Addr}, opts)
	warm(t, st, srv.Addr)
	script, err := leaseScript()
	if err != nil {
		t.Fatal(err)
	}
	src, _ := scriptSource(false, nil, textNow, "muldivmod.lua", "lib.lua", "concurrency.lua", "lease.lua")
	if _, err := srv.Do("SCRIPT", "LOAD", src); err != nil || script == nil {
		t.Fatalf("SCRIPT LOAD of lease.lua: %v", err)
	}
	ctx := t.Context()
	p := sluice.Concurrency(2, time.Hour).Named("fail")
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	d, err := st.Allow(ctx, time.Time{}, req)
	if err != nil || !d.Allowed || d.Degraded || !strings.HasPrefix(d.Lease, leasePrefix) {
		t.Fatalf("Allow with Redis up = %+v, %v; want allowed by Redis with an r1. lease", d, err)
	}
	before := d.Lease

	takeRedisAway(t, srv, how)
	for i := range 6 {
		d, err := st.Allow(ctx, time.Time{}, req)
		if err != nil || !d.Degraded {
			t.Fatalf("Allow %d with Redis away = %+v, %v; want a degraded decision", i, d, err)
		}
		switch fp {
		case FailAllow:
			if !d.Allowed || d.Lease != "" {
				t.Errorf("FailAllow: Allow = %+v; want allowed without a lease", d)
			}
		case FailDeny:
			if d.Allowed || d.Lease != "" {
				t.Errorf("FailDeny: Allow = %+v; want refused", d)
			}
		case FailLocal:
			// The local store's limit of 2, its leases released to it.
			if !d.Allowed || !strings.HasPrefix(d.Lease, localLeasePrefix) {
				t.Fatalf("FailLocal: Allow = %+v; want allowed with the local store's lease", d)
			}
			if i%2 == 1 {
				if in, err := st.Renew(ctx, time.Time{}, d.Lease); err != nil || in != time.Hour {
					t.Errorf("FailLocal: Renew of a local lease = %v, %v; want 1h", in, err)
				}
			}
			if ok, err := st.Release(ctx, time.Time{}, d.Lease, nil); err != nil || !ok {
				t.Errorf("FailLocal: Release of a local lease = %v, %v; want true", ok, err)
			}
		}
	}
	if fp == FailLocal {
		// The local store's limit: 2 held, the third refused.
		for i := range 3 {
			if d, err := st.Allow(ctx, time.Time{}, req); err != nil || d.Allowed != (i < 2) {
				t.Errorf("FailLocal: Allow %d = %+v, %v; want allowed %v", i, d, err, i < 2)
			}
		}
	}
	if _, err := st.Release(ctx, time.Time{}, before, nil); err == nil || errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("Release of a Redis lease with Redis away: error %v, want Redis's failure", err)
	}

	bringRedisBack(t, srv, how)
	if how == "kill" {
		// The restarted Redis is empty: it needs lease.lua again.
		if _, err := srv.Do("SCRIPT", "LOAD", src); err != nil {
			t.Fatal(err)
		}
	}
	allowByRedis(t, st, sluice.Request{Policy: new(sluice.TokenBucket(10, time.Hour, 0)), Key: "probe", Cost: 1}, 3*time.Second)
	// One answer from the restarted Redis does not renew every connection
	// of the client: it multiplexes several, picks one per call, and finds
	// one left to the killed server broken only when a call uses it. Such
	// a call fails on the dead socket (EOF, reset, broken pipe) and the
	// connection is replaced, so each may cost one failed Release; any
	// other error, or more failures than that, fails the test.
	ok, err := st.Release(ctx, time.Time{}, before, nil)
	for stale := 0; how == "kill" && isDeadConn(err) && stale < maxConns; stale++ {
		t.Logf("Release on a connection to the killed Redis: %v; again", err)
		ok, err = st.Release(ctx, time.Time{}, before, nil)
	}
	if err != nil || ok != (how == "pause") {
		t.Errorf("Release of the lease taken before, after Redis came back (%s) = %v, %v; want %v", how, ok, err, how == "pause")
	}
}

// maxConns bounds the connections that a client keeps to one Redis for
// its calls: rueidis multiplexes up to 2^MaxPipelineMultiplex.
const maxConns = 1 << rueidis.MaxPipelineMultiplex

// isDeadConn reports whether err is a call's failure on a connection
// whose server has gone: the peer closed it (EOF) or reset it.
func isDeadConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// leaseDifferential replays random decisions, releases and renewals under
// concurrency and rate policies on the memory store and on Redis at the
// same caller times (to the µs): every answer must agree, the leases of one
// decision on both standing for each other.
func leaseDifferential(t *testing.T, addrs []string, seeds int) {
	policies := []sluice.Policy{
		sluice.Concurrency(3, 10*time.Second).Named("c3"),
		sluice.Concurrency(5, 2*time.Second).Named("c5"),
		sluice.Concurrency(1, 1500*time.Millisecond).Named("c1"),
		sluice.TokenBucket(5, 10*time.Second, 0).Named("rate"),
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			mem := memstore.New(memstore.Options{})
			rs := newTestStore(t, addrs, Options{CallerTime: true, Failure: FailError})
			ctx := t.Context()
			now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
			var leases [][2]string // memory's, Redis's
			for step := range 600 {
				now = now.Add(time.Duration(r.Int64N(700_000)) * time.Microsecond)
				key := []string{"a", "b"}[r.IntN(2)]
				req := func() sluice.Request {
					return sluice.Request{Policy: &policies[r.IntN(len(policies))], Key: key, Cost: 1 + r.Int64N(3)}
				}
				what := fmt.Sprintf("step %d at %v", step, now.Format("15:04:05.000000"))
				switch op := r.IntN(10); {
				case op < 5:
					var dm, dr sluice.Decision
					var errm, errr error
					switch q := req(); op {
					case 0, 1:
						dm, errm = mem.Allow(ctx, now, q)
						dr, errr = rs.Allow(ctx, now, q)
						what += fmt.Sprintf(" Allow(%v, %d)", q.Policy, q.Cost)
					case 2:
						dm, errm = mem.Peek(ctx, now, q)
						dr, errr = rs.Peek(ctx, now, q)
						what += fmt.Sprintf(" Peek(%v, %d)", q.Policy, q.Cost)
						// Inspect reads what Peek read, on both stores. The
						// memory store counts the two holds of a lease whose
						// AllowAll repeated the key as two leases, Redis as
						// the one lease they are.
						sm, errsm := mem.Inspect(ctx, now, q)
						sr, errsr := rs.Inspect(ctx, now, q)
						leasesOK := sr.Leases <= sm.Leases && (sr.Leases == 0) == (sm.Leases == 0)
						sr.Leases = sm.Leases
						if (errsm == nil) != (errsr == nil) || sr != sm || !leasesOK || (errsr == nil && sr.Decision != dr) {
							t.Fatalf("%s: Inspect = %+v, %v from Redis; %+v, %v from memory", what, sr, errsr, sm, errsm)
						}
					default:
						reqs := []sluice.Request{q, req(), req()}[:2+r.IntN(2)]
						outm, outr := make([]sluice.Decision, len(reqs)), make([]sluice.Decision, len(reqs))
						dm, errm = mem.AllowAll(ctx, now, reqs, outm)
						dr, errr = rs.AllowAll(ctx, now, reqs, outr)
						what += fmt.Sprintf(" AllowAll(%v)", reqs)
						if errm == nil && fmt.Sprint(outm) != fmt.Sprint(outr) { // out is unspecified with an error
							t.Fatalf("%s: out %v from Redis, %v from memory", what, outr, outm)
						}
					}
					if (errm == nil) != (errr == nil) || (dm.Lease == "") != (dr.Lease == "") {
						t.Fatalf("%s = %+v, %v from Redis; %+v, %v from memory", what, dr, errr, dm, errm)
					}
					if dm.Lease != "" {
						leases = append(leases, [2]string{dm.Lease, dr.Lease})
					}
					dm.Lease, dr.Lease = "", ""
					if dm != dr {
						t.Fatalf("%s = %+v from Redis, want %+v as from memory", what, dr, dm)
					}
				case len(leases) == 0:
				case op < 8:
					l := leases[r.IntN(len(leases))]
					okm, errm := mem.Release(ctx, now, l[0], nil)
					okr, errr := rs.Release(ctx, now, l[1], nil)
					if okm != okr || errm != nil || errr != nil {
						t.Fatalf("%s Release = %v, %v from Redis; %v, %v from memory", what, okr, errr, okm, errm)
					}
				default:
					l := leases[r.IntN(len(leases))]
					inm, errm := mem.Renew(ctx, now, l[0])
					inr, errr := rs.Renew(ctx, now, l[1])
					if inm != inr || errors.Is(errm, sluice.ErrLeaseExpired) != errors.Is(errr, sluice.ErrLeaseExpired) || (errm == nil) != (errr == nil) {
						t.Fatalf("%s Renew = %v, %v from Redis; %v, %v from memory", what, inr, errr, inm, errm)
					}
				}
			}
		})
	}
}
