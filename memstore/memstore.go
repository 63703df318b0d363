// Package memstore is Sluice's in-process Store: fast, exact, and local to
// one process (each instance of a service counts on its own; use redisstore
// to share limits between instances).
//
// The store is sharded by key hash; each shard has its own lock and its own
// open-addressing tables, so a decision on an existing key allocates nothing
// and touches one lock. Keys are not kept: the store tracks a seeded 64-bit
// hash of (policy, key), so a tracked token-bucket key costs 24 bytes of
// table slot (30 to 45 bytes of heap with the table's spare room), whatever
// the key's length. Two different pairs share state only if their hashes
// collide: with n keys tracked the chance that any pair collides is about
// n²/2⁶⁵ (3·10⁻⁶ at ten million keys), and the seed is random per store, so
// clients cannot aim for a collision.
//
// Memory is bounded: a key whose state is back to initial (a full bucket, an
// empty window) is dropped, which changes no future decision; drops happen a
// few slots at a time on every insert, and in full on Prune or every
// Options.SweepInterval. Options.MaxKeys caps the tracked pairs; at the cap a
// new key evicts, among a few sampled entries, the one closest to initial.
// Evicting a key that is not yet initial forgets its history: that key's
// next request starts from a fresh bucket. Nothing ever sweeps all keys
// under one lock.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/splitmix"
)

// Options configure a Store. The zero value is valid: the defaults are
// given with each field.
type Options struct {
	// Now returns the current time. The default reads the monotonic clock
	// from a wall-clock start, so the store's time never steps backwards.
	Now func() time.Time
	// Sleep waits for d on the store's clock, or until ctx ends (then it
	// returns ctx's error). Limiter.Wait and sluice.WaitAll sleep with it,
	// so that they wait on the clock the store decides by; a fake clock
	// passes its Now and a Sleep that advances it, and waits then take no
	// real time. The default is a timer, which suits the default Now (and
	// any Now that follows the system clock).
	Sleep func(ctx context.Context, d time.Duration) error
	// MaxKeys caps the number of tracked (policy, key) pairs; 0 means no
	// cap. The cap is split evenly over the shards, and each shard evicts
	// when it holds its share, even if other shards have room; a cap below
	// the number of shards lowers the number of shards to fit.
	MaxKeys int
	// Shards is the number of shards, rounded up to a power of two.
	// Default 64.
	Shards int
	// SweepInterval, when positive, starts a goroutine that calls Prune at
	// that interval, on the store's clock, until Close. A store that is
	// passed explicit times should call Prune itself, with those times.
	SweepInterval time.Duration
	// OnDecided, if set, is told of each request that Allow, AllowAll and
	// Peek decided, once the shard is unlocked, with the caller's context:
	// the time it was decided at, which is the time the call was given
	// (or the store's clock) unless a shard had seen a later one (a
	// shard's time never steps backwards), and its order, a number taken
	// under the shard's lock from one counter of the store: of two
	// decisions on one key, the later one has a time no earlier and the
	// greater order, so that sorting by time, then order, puts every
	// key's decisions in the order they were made. The requests of one
	// AllowAll share a time and an order; a call that fails (a cost
	// above the capacity) tells nothing. A decision log writes both, so
	// that a replay decides in the same order at the same instants. It
	// must be quick, safe for concurrent use, and must not call the
	// store. When it is set, Allow's shortest path (a token bucket or
	// GCRA without a penalty) is not taken: every decision goes through
	// the path that tells it. When it is nil the store counts nothing.
	OnDecided func(ctx context.Context, req sluice.Request, at time.Time, order uint64)
}

// Store is an in-memory sluice.Store. It is safe for concurrent use.
type Store struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
	// now is Options.Now; when it is nil the store's time is baseUS plus
	// the monotonic time elapsed since base.
	now      func() time.Time
	sleep    func(ctx context.Context, d time.Duration) error
	base     time.Time
	baseUS   int64
	policies [policyCacheSize]atomic.Pointer[compiled]
	// decided is Options.OnDecided; order counts its decisions.
	decided func(ctx context.Context, req sluice.Request, at time.Time, order uint64)
	order   atomic.Uint64

	// expired counts, per concurrency policy's fingerprint, the holds
	// that ran out without a release (*atomic.Int64 values).
	expired sync.Map
	// pending holds the estimates that leases have to settle, by lease
	// identifier, in shards chosen by its first byte; usage counts
	// debited, refunded and unsettled units per policy's fingerprint
	// (*usageCounts).
	pending [pendingShards]pendingShard
	usage   sync.Map

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ sluice.Store = (*Store)(nil)

// shard is one lock's share of the keys. It is 128 bytes, two cache lines
// (TestShardLayout checks it), so that no two shards share a line and a
// token-bucket decision writes only the first: the lock, the clock and the
// token-bucket table's header.
type shard struct {
	mu    sync.Mutex
	hw    int64 // the latest time seen, so time never steps backwards
	tat   table[algo.TAT]
	win   table[algo.Window]
	logs  table[*logState]
	sweep int // cursor of the incremental sweep
	cap   int // the most entries the shard may hold; 0 means no cap
	conc  table[*concState]
	pen   table[algo.Block] // the blocks and offences of penalized policies
}

type logState struct {
	log    algo.Log
	expire int64
}

// New returns a Store. Call Close when Options.SweepInterval is set.
func New(opts Options) *Store {
	n := 64
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	if opts.MaxKeys > 0 {
		for n > opts.MaxKeys {
			n >>= 1
		}
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	if opts.MaxKeys > 0 {
		// Shares that add up to exactly MaxKeys.
		for i := range s.shards {
			s.shards[i].cap = opts.MaxKeys / n
			if i < opts.MaxKeys%n {
				s.shards[i].cap++
			}
		}
	}
	s.sleep, s.decided = opts.Sleep, opts.OnDecided
	if s.sleep == nil {
		s.sleep = ctxsleep.Sleep
	}
	if opts.Now != nil {
		s.now = opts.Now
	} else {
		s.base = time.Now()
		s.baseUS = s.base.UnixMicro()
	}
	if opts.SweepInterval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.sweeper(opts.SweepInterval)
	}
	return s
}

// Close stops the sweeper goroutine, if any, and waits for it to end. It
// may be called more than once, concurrently. The store stays usable.
func (s *Store) Close() error {
	if s.stop != nil {
		s.closeOnce.Do(func() { close(s.stop) })
		<-s.done
	}
	return nil
}

func (s *Store) sweeper(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Prune(time.Time{})
		}
	}
}

// micros returns now in µs since the Unix epoch; a zero now means the
// store's clock.
func (s *Store) micros(now time.Time) int64 {
	if !now.IsZero() {
		return now.UnixMicro()
	}
	return s.clock()
}

// Now returns the time on the store's clock (Options.Now, or the system's
// monotonic clock from a wall-clock start): the time a zero now means to
// Allow, AllowAll, Peek and Inspect, which read it to the microsecond. On
// the system's clock the time carries its monotonic reading, so that
// sluice.WaitAll, which measures a context's deadline from it, is not
// moved by a step of the wall clock since the store started.
func (s *Store) Now() time.Time {
	if s.now != nil {
		return time.UnixMicro(s.now().UnixMicro())
	}
	return s.base.Add(time.Since(s.base))
}

// Sleep waits for d on the store's clock (Options.Sleep), or until ctx
// ends, when it returns ctx's error. sluice.WaitAll and Limiter.Wait sleep
// with it.
func (s *Store) Sleep(ctx context.Context, d time.Duration) error {
	return s.sleep(ctx, d)
}

// clock reads the store's clock in µs since the Unix epoch. The default
// clock is the monotonic clock counted from a wall-clock start, so it
// never steps backwards; it costs one reading of the monotonic clock.
func (s *Store) clock() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.baseUS + int64(time.Since(s.base)/time.Microsecond)
}

// compiled is a validated policy with what its decisions need worked out
// once: the fingerprint that keeps its keys apart from other policies' and
// the algorithm's constants.
type compiled struct {
	policy sluice.Policy
	err    error
	fp     uint64
	// tokenBucket is set for TokenBucketAlgorithm and GCRAAlgorithm, which
	// decide alike and take Allow's shortest path, without a penalty, on
	// a store without Options.OnDecided (the path tells it nothing).
	tokenBucket bool
	pp          algo.Prepared
	// penalized is set for a policy with a penalty, pen.
	penalized bool
	pen       algo.Penalty
}

// policyCacheSize is the number of compiled policies a Store keeps; more
// distinct policies than this still work, a little slower.
const policyCacheSize = 256

// compile returns p compiled, from a small direct-mapped cache. Entries are
// immutable, so readers need no lock. A hit costs a few multiplications and
// comparisons; a miss validates and compiles p.
func (s *Store) compile(p *sluice.Policy) *compiled {
	slot := &s.policies[policySlot(p)]
	if c := slot.Load(); c != nil && c.is(p) {
		return c
	}
	return s.compileSlow(p, slot)
}

// policySlot returns the index of p's slot in the compiled-policy cache.
func policySlot(p *sluice.Policy) uint64 {
	x := uint64(p.Limit)*0x9e3779b97f4a7c15 ^ uint64(p.Period)*0xc2b2ae3d27d4eb4f ^ uint64(p.Burst)*0x165667b19e3779f9 ^ uint64(p.Algorithm)<<8 ^ uint64(len(p.Name))
	return (x * 0xff51afd7ed558ccd) >> 56
}

// is reports whether c was compiled from p, field by field, the numbers
// first.
func (c *compiled) is(p *sluice.Policy) bool {
	q := &c.policy
	return q.Limit == p.Limit && q.Period == p.Period && q.Burst == p.Burst &&
		q.Algorithm == p.Algorithm && sameString(q.Name, p.Name) && q.Calendar == p.Calendar && q.Penalty == p.Penalty
}

// sameString is a == b, without comparing the bytes when both are empty
// or are the same bytes in memory (a policy's Name is usually the very
// string the cached copy was made from).
func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// compileSlow validates and compiles p and stores it in slot.
func (s *Store) compileSlow(p *sluice.Policy, slot *atomic.Pointer[compiled]) *compiled {
	c := &compiled{policy: *p}
	if err := p.Validate(); err != nil {
		c.err = fmt.Errorf("memstore: %w", err)
	} else {
		f := uint64(p.Algorithm)<<56 ^ uint64(p.Limit)*0x9e3779b97f4a7c15 ^ uint64(p.Burst)*0xc2b2ae3d27d4eb4f ^ uint64(p.Period)*0x165667b19e3779f9
		if p.Name != "" {
			f ^= maphash.String(s.seed, p.Name)
		}
		if cal := p.Calendar; cal.Unit != sluice.NoCalendar {
			f ^= maphash.String(s.seed, "\x00"+cal.String())
		}
		c.fp = splitmix.Mix(f)
		c.pen, c.penalized = engine.PenaltyParams(p)
		c.tokenBucket = (p.Algorithm == sluice.TokenBucketAlgorithm || p.Algorithm == sluice.GCRAAlgorithm) && !c.penalized && s.decided == nil
		c.pp = algo.Prepare(engine.Params(p))
	}
	slot.Store(c)
	return c
}

// hash returns the non-zero 64-bit hash that stands for (policy, key): the
// seeded hash of the key, uniform over 64 bits and unpredictable without
// the seed, XORed with the policy's fingerprint. XOR with a constant keeps
// it uniform, and two pairs collide only if the hashes of their keys differ
// by exactly the XOR of their fingerprints (for one policy: only if the key
// hashes collide), so no second mixing round is needed.
func (s *Store) hash(c *compiled, key string) uint64 {
	h := maphash.String(s.seed, key) ^ c.fp
	if h == 0 {
		h = 1
	}
	return h
}

// check validates r and returns its compiled policy.
func (s *Store) check(r *sluice.Request) (*compiled, error) {
	if r.Cost < 0 {
		return nil, costError(r.Cost)
	}
	c := s.compile(r.Policy)
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// errSettlePenalty is the error of an Allow or AllowAll with an estimate
// to settle (SettleWithin, under a rate policy) and a policy with a
// penalty, which the sluice.Store contract refuses (the Redis store's
// error, the configuration's problem).
var errSettlePenalty = fmt.Errorf("memstore: %w: an estimate to settle (SettleWithin) under a policy with a penalty", sluice.ErrNotSupported)

func costError(cost int64) error {
	return fmt.Errorf("memstore: %w, got %d", sluice.ErrInvalidCost, cost)
}

func capacityError(r *sluice.Request) error {
	p := *r.Policy // a copy, so that no caller's policy escapes with the error
	return fmt.Errorf("memstore: %w: cost %d, capacity %d (%s)", sluice.ErrCostExceedsCapacity, r.Cost, p.Capacity(), p)
}

// Allow decides req and charges it when admitted. A zero now means the
// store's clock. It costs one lookup of the compiled policy, one hash and
// one lock.
func (s *Store) Allow(ctx context.Context, now time.Time, req sluice.Request) (d sluice.Decision, err error) {
	p := req.Policy
	c := s.policies[policySlot(p)].Load()
	if c == nil || !c.is(p) || req.Cost < 1 || !c.tokenBucket || req.SettleWithin > 0 {
		return s.allow(ctx, now, &req)
	}
	var t int64
	switch {
	case !now.IsZero():
		t = now.UnixMicro()
	case s.now == nil:
		t = s.baseUS + int64(time.Since(s.base)/time.Microsecond)
	default:
		t = s.now().UnixMicro()
	}
	h := s.hash(c, req.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	t = sh.advance(t)
	i, found := sh.tat.find(h)
	if found {
		st := &sh.tat.slots[i].v
		if ns, remaining, resetAfter, ok := c.pp.Admit(*st, t, req.Cost); ok && ns.Expiry() > t {
			*st = ns
			// Before the unlock, as put is.
			d = sluice.Decision{Allowed: true, Limit: p.Limit, Remaining: remaining, ResetAfter: resetAfter}
			sh.mu.Unlock()
			return d, nil
		}
	}
	err = sh.allowTAT(&d, s, c, &req, h, t, i, found)
	return d, err
}

// allowTAT is the rest of Allow's token-bucket and GCRA path, with the
// shard locked and the key's slot looked up (i, and found): a denial, a
// new key, or a state back to initial. It writes the decision to *d and
// unlocks the shard.
func (sh *shard) allowTAT(d *sluice.Decision, s *Store, c *compiled, req *sluice.Request, h uint64, t int64, i int, found bool) error {
	var st algo.TAT
	if found {
		st = sh.tat.slots[i].v
	}
	var r algo.Verdict
	ns := c.pp.TokenBucketTo(st, t, req.Cost, &r)
	if r.Allowed {
		sh.storeTAT(s, i, found, h, t, ns)
	}
	put(d, &r, req.Policy.Limit)
	sh.mu.Unlock()
	if r.RetryAfter == sluice.Never {
		return capacityError(req)
	}
	return nil
}

// allow is Allow for every request that does not take its shortest path
// (compiled.tokenBucket).
func (s *Store) allow(ctx context.Context, now time.Time, req *sluice.Request) (d sluice.Decision, err error) {
	c := s.compile(req.Policy)
	if req.Cost < 0 {
		return sluice.Decision{}, costError(req.Cost)
	}
	if c.err != nil {
		return sluice.Decision{}, c.err
	}
	if req.Policy.Algorithm == sluice.ConcurrencyAlgorithm || req.SettleWithin > 0 {
		if c.penalized && req.Policy.Algorithm != sluice.ConcurrencyAlgorithm {
			return sluice.Decision{}, errSettlePenalty
		}
		return s.allowLeased(ctx, now, req, c)
	}
	sh, h, t := s.lockKey(c, req.Key, now)
	var r algo.Verdict
	sh.run(&r, s, c, req, h, t, req.Cost, true, nil)
	order := s.nextOrder()
	put(&d, &r, req.Policy.Limit)
	sh.mu.Unlock()
	if d.RetryAfter == sluice.Never {
		return d, capacityError(req)
	}
	s.report(ctx, req, t, order)
	return d, nil
}

// nextOrder returns the order of a decision, when Options.OnDecided is set:
// called with the decision's shards locked.
func (s *Store) nextOrder() uint64 {
	if s.decided == nil {
		return 0
	}
	return s.order.Add(1)
}

// report tells Options.OnDecided, if set, that req was decided at t (µs)
// with order.
func (s *Store) report(ctx context.Context, req *sluice.Request, t int64, order uint64) {
	if s.decided != nil {
		s.decided(ctx, *req, time.UnixMicro(t), order)
	}
}

// allowLeased is allow for a request that takes a lease: under a
// concurrency policy, or with an estimate to settle.
func (s *Store) allowLeased(ctx context.Context, now time.Time, req *sluice.Request, c *compiled) (d sluice.Decision, err error) {
	var hb [1]uint64
	lt := newLeaseTaker(hb[:])
	sh, h, t := s.lockKey(c, req.Key, now)
	var r algo.Verdict
	sh.run(&r, s, c, req, h, t, req.Cost, true, &lt)
	if r.Allowed {
		lt.estimate(0, c, req, h, t)
	}
	order := s.nextOrder()
	put(&d, &r, req.Policy.Limit)
	sh.mu.Unlock()
	if r.RetryAfter == sluice.Never {
		return d, capacityError(req)
	}
	s.report(ctx, req, t, order)
	d.Lease = s.lease(&lt)
	return d, nil
}

// Peek decides req without charging it.
func (s *Store) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	c, err := s.check(&req)
	if err != nil {
		return sluice.Decision{}, err
	}
	sh, _, t, d := s.lockPeek(c, &req, now)
	order := s.nextOrder()
	sh.mu.Unlock()
	if d.RetryAfter == sluice.Never {
		return d, capacityError(&req)
	}
	s.report(ctx, &req, t, order)
	return d, nil
}

// lockKey locks the shard of key under c and returns it, still locked,
// with the key's hash and the shard's time in microseconds of a decision
// at now.
func (s *Store) lockKey(c *compiled, key string, now time.Time) (sh *shard, h uint64, t int64) {
	t = s.micros(now)
	h = s.hash(c, key)
	sh = &s.shards[h&s.mask]
	sh.mu.Lock()
	return sh, h, sh.advance(t)
}

// lockPeek locks the shard of req's key and decides req at now without
// charging it, for Peek and Inspect. It returns the shard, still locked,
// the key's hash and the shard's time in microseconds.
func (s *Store) lockPeek(c *compiled, req *sluice.Request, now time.Time) (sh *shard, h uint64, t int64, d sluice.Decision) {
	sh, h, t = s.lockKey(c, req.Key, now)
	var r algo.Verdict
	sh.run(&r, s, c, req, h, t, req.Cost, false, nil)
	put(&d, &r, req.Policy.Limit)
	return sh, h, t, d
}

// AllowAll decides every request and charges them all, or none when one is
// denied. All the shards involved are locked together, in index order.
// Requests for the same policy and key decide as one request of their summed
// cost.
func (s *Store) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if len(reqs) == 0 {
		return sluice.Decision{}, errors.New("memstore: no requests")
	}
	if out != nil && len(out) != len(reqs) {
		return sluice.Decision{}, fmt.Errorf("memstore: out has %d decisions for %d requests", len(out), len(reqs))
	}
	var cbuf [8]*compiled
	cs := cbuf[:0]
	settle, penalized := false, false
	for i := range reqs {
		c, err := s.check(&reqs[i])
		if err != nil {
			return sluice.Decision{}, err
		}
		cs = append(cs, c)
		settle = settle || reqs[i].SettleWithin > 0 && reqs[i].Policy.Algorithm != sluice.ConcurrencyAlgorithm
		penalized = penalized || c.penalized
	}
	if settle && penalized {
		return sluice.Decision{}, errSettlePenalty
	}
	var hbuf [8]uint64
	var ibuf [8]int
	hs, idx, ds := hbuf[:0], ibuf[:0], out[:0]
	if out == nil {
		var dbuf [8]sluice.Decision // zeroed (448 bytes) only when it is used
		ds = dbuf[:0]
	}
	for i := range reqs {
		h := s.hash(cs[i], reqs[i].Key)
		hs = append(hs, h)
		idx = append(idx, int(h&s.mask))
	}
	if err := leaseKeys(reqs, hs); err != nil {
		return sluice.Decision{}, err
	}
	// A repeated (policy, key) sees the cost of the requests before it.
	var sbuf [engine.SmallRepeat]int64
	sums, _ := engine.SummedCosts(hs, reqs, sbuf[:0])
	var lbuf [8]int
	locked, t := s.lockAll(now, idx, lbuf[:0])
	d, err := s.allowAll(reqs, cs, hs, idx, sums, ds, t)
	order := s.nextOrder()
	s.unlockAll(locked)
	if err == nil && s.decided != nil {
		for i := range reqs {
			s.report(ctx, &reqs[i], t, order)
		}
	}
	return d, err
}

// allowAll is AllowAll's decision at t, with the shards of idx locked.
func (s *Store) allowAll(reqs []sluice.Request, cs []*compiled, hs []uint64, idx []int, sums []int64, ds []sluice.Decision, t int64) (sluice.Decision, error) {
	// Decide without charging.
	allowed, blocked := true, false
	var r algo.Verdict
	for i := range reqs {
		s.shards[idx[i]].run(&r, s, cs[i], &reqs[i], hs[i], t, sums[i], false, nil)
		if r.RetryAfter == sluice.Never {
			var d sluice.Decision
			put(&d, &r, reqs[i].Policy.Limit)
			return d, capacityError(&reqs[i])
		}
		allowed = allowed && r.Allowed
		blocked = blocked || cs[i].penalized && s.shards[idx[i]].blocks(hs[i], t)
		ds = append(ds, sluice.Decision{})
		put(&ds[i], &r, reqs[i].Policy.Limit)
	}
	if !allowed && !blocked {
		// A refusal by a penalized policy itself, while no key of the
		// request is blocked, is that policy's offence.
		for i := range reqs {
			if cs[i].penalized && !ds[i].Allowed {
				r := s.shards[idx[i]].offend(s, cs[i], hs[i], t, verdict(ds[i]))
				put(&ds[i], &r, reqs[i].Policy.Limit)
			}
		}
	}
	var lease string
	if allowed && anyLease(reqs) {
		lease = s.settleLeased(reqs, cs, hs, idx, ds, t)
	} else {
		s.settleAll(reqs, cs, hs, idx, ds, t, allowed, nil)
	}
	d := algo.Combine(ds)
	d.Lease = lease
	return d, nil
}

// settleLeased is settleAll for admitted requests of which some are under
// concurrency policies: it returns the lease of their holds.
func (s *Store) settleLeased(reqs []sluice.Request, cs []*compiled, hs []uint64, idx []int, ds []sluice.Decision, t int64) string {
	var hb [8]uint64
	lt := newLeaseTaker(hb[:])
	s.settleAll(reqs, cs, hs, idx, ds, t, true, &lt)
	for i := range reqs {
		lt.estimate(i, cs[i], &reqs[i], hs[i], t)
	}
	return s.lease(&lt)
}

// lockAll locks the shards of idx, each once and in index order, and
// returns them (appended to locked) with the time of a decision at now: the
// latest time any of them has seen, if later, which they all see from then
// on.
func (s *Store) lockAll(now time.Time, idx, locked []int) ([]int, int64) {
	locked = append(locked, idx...)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	t := s.micros(now)
	for _, i := range locked {
		t = max(t, s.shards[i].hw)
	}
	for _, i := range locked {
		s.shards[i].hw = t
	}
	return locked, t
}

// unlockAll unlocks the shards that lockAll locked.
func (s *Store) unlockAll(locked []int) {
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
}

// settleAll ends an AllowAll whose requests were decided, uncharged, into
// ds: when all were allowed it charges them; otherwise the allowed ones
// report their state as it stays, without the charge. The shards of idx
// must be locked.
func (s *Store) settleAll(reqs []sluice.Request, cs []*compiled, hs []uint64, idx []int, ds []sluice.Decision, t int64, allowed bool, lt *leaseTaker) {
	var v algo.Verdict
	for i := range reqs {
		r := &reqs[i]
		if r.MaxDelay != 0 {
			// MaxDelay was checked already, against the summed cost of a
			// repeated (policy, key); charging the second of two must not
			// check it again against the first's delay.
			c := *r
			c.MaxDelay = 0
			r = &c
		}
		switch {
		case allowed:
			s.shards[idx[i]].run(&v, s, cs[i], r, hs[i], t, r.Cost, true, lt) // the decision is ds[i] already
		case ds[i].Allowed:
			// The policy's own state: an offence of another request of
			// the call on the same key may have blocked it since.
			s.shards[idx[i]].runOwn(&v, s, cs[i], r, hs[i], t, 0, false, nil)
			put(&ds[i], &v, r.Policy.Limit)
			ds[i].Allowed, ds[i].Delay = true, 0
		}
	}
}

// advance clamps t so that the shard's time never steps backwards.
func (sh *shard) advance(t int64) int64 {
	if t < sh.hw {
		return sh.hw
	}
	sh.hw = t
	return t
}

// run decides req on the state of h at t, for cost, and writes the verdict
// to *r: req's algorithm, and under a policy with a penalty the
// penalty's (a blocked key is refused without running the algorithm's
// charge, and when commit is set a refusal by the policy itself starts a
// block). With commit, an admitted request's new state is stored, and a
// concurrency policy's hold is taken for lt's lease. sh.mu must be held.
// Verdicts pass down by pointer (docs/BENCHMARKS.md, "Why the hot path is
// shaped as it is").
func (sh *shard) run(r *algo.Verdict, s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64, commit bool, lt *leaseTaker) {
	if !c.penalized {
		sh.runOwn(r, s, c, req, h, t, cost, commit, lt)
		return
	}
	if i, found := sh.pen.find(h); found && sh.pen.slots[i].v.Blocks(t) {
		*r = sh.pen.slots[i].v.During(t, sh.uncharged(s, c, req, h, t, cost))
		return
	}
	sh.runOwn(r, s, c, req, h, t, cost, commit, lt)
	if commit && algo.Offends(*r) {
		*r = sh.offend(s, c, h, t, *r)
	}
}

// uncharged returns the policy's own verdict on req at t for cost, as a
// block needs it: uncharged, and when admitted with the ResetAfter of the
// state as it is.
func (sh *shard) uncharged(s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64) algo.Verdict {
	var own, initial algo.Verdict
	sh.runOwn(&own, s, c, req, h, t, cost, false, nil)
	if own.Allowed {
		sh.step(&initial, s, c, req, h, t, 0, false, nil)
		own.ResetAfter = initial.ResetAfter
	}
	return own
}

// blocks reports whether the key of hash h is blocked at t.
func (sh *shard) blocks(h uint64, t int64) bool {
	i, found := sh.pen.find(h)
	return found && sh.pen.slots[i].v.Blocks(t)
}

// offend records an offence at t of the key of hash h under the penalized
// policy c, whose own refusal was own, and returns the verdict of the
// block it starts; a key blocked already at t (by an earlier request of
// the same AllowAll) is not offended again. sh.mu must be held.
func (sh *shard) offend(s *Store, c *compiled, h uint64, t int64, own algo.Verdict) algo.Verdict {
	i, found := sh.pen.find(h)
	var b algo.Block
	if found {
		b = sh.pen.slots[i].v
	}
	if b.Blocks(t) {
		return b.During(t, own)
	}
	b = c.pen.Offend(b, t)
	if found {
		sh.pen.slots[i].v = b
	} else {
		sh.makeRoom(s, t)
		sh.pen.insert(h, b)
		sh.sweepPen(t)
	}
	v := b.During(t, own)
	v.Offence = true
	return v
}

// verdict returns d as the algorithms' Verdict.
func verdict(d sluice.Decision) algo.Verdict {
	return algo.Verdict{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay}
}

// runOwn is run without the penalty: the policy's own algorithm. A
// request of cost 0 is a check: is a unit left after cost (the costs of
// the requests before it on the same key), charging nothing.
func (sh *shard) runOwn(r *algo.Verdict, s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64, commit bool, lt *leaseTaker) {
	if req.Cost == 0 {
		var next algo.Verdict
		sh.step(r, s, c, req, h, t, cost, false, nil)
		sh.step(&next, s, c, req, h, t, cost+1, false, nil)
		*r = algo.Check(*r, next)
		return
	}
	sh.step(r, s, c, req, h, t, cost, commit, lt)
}

// step runs req's algorithm for cost, writing its verdict to *r.
func (sh *shard) step(r *algo.Verdict, s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64, commit bool, lt *leaseTaker) {
	switch req.Policy.Algorithm {
	case sluice.ConcurrencyAlgorithm:
		*r = sh.decideConc(s, c, h, t, cost, commit, lt)
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		sh.decideWindow(r, s, c, req, h, t, cost, commit)
	case sluice.SlidingLogAlgorithm:
		sh.decideLog(r, s, c, h, t, cost, commit)
	default:
		sh.decideTAT(r, s, c, req, h, t, cost, commit)
	}
}

// put writes r to *d, field by field, as the Decision under a policy of
// the given limit. Deciders put before they unlock the shard
// (docs/BENCHMARKS.md, "Why the hot path is shaped as it is").
func put(d *sluice.Decision, r *algo.Verdict, limit int64) {
	d.Allowed, d.Degraded, d.Blocked, d.Offence = r.Allowed, false, r.Blocked, r.Offence
	d.Limit, d.Remaining = limit, r.Remaining
	d.RetryAfter, d.ResetAfter, d.Delay = r.RetryAfter, r.ResetAfter, r.Delay
	d.Lease = ""
}

// storeTAT writes the state ns of h, found in slot i or not, after an
// admitted request at t: a state back to initial is dropped instead.
func (sh *shard) storeTAT(s *Store, i int, found bool, h uint64, t int64, ns algo.TAT) {
	switch {
	case found && ns.Expiry() > t:
		sh.tat.slots[i].v = ns
	case found:
		sh.tat.remove(i)
	case ns.Expiry() > t:
		sh.makeRoom(s, t)
		sh.tat.insert(h, ns)
		sh.sweepTAT(t)
	}
}

func (sh *shard) decideTAT(r *algo.Verdict, s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64, commit bool) {
	i, st, found := sh.tat.lookup(h)
	var ns algo.TAT
	if req.Policy.Algorithm == sluice.LeakyBucketAlgorithm {
		ns = c.pp.LeakyBucketTo(st, t, cost, req.MaxDelay, r)
	} else {
		ns = c.pp.TokenBucketTo(st, t, cost, r)
	}
	if commit && r.Allowed {
		sh.storeTAT(s, i, found, h, t, ns)
	}
}

func (sh *shard) decideWindow(r *algo.Verdict, s *Store, c *compiled, req *sluice.Request, h uint64, t, cost int64, commit bool) {
	i, st, found := sh.win.lookup(h)
	var ns algo.Window
	if req.Policy.Algorithm == sluice.FixedWindowAlgorithm {
		ns = algo.FixedWindow(c.pp.Params, st, t, cost, r)
	} else {
		ns = algo.SlidingWindow(c.pp.Params, st, t, cost, r)
	}
	if commit && r.Allowed {
		sh.storeWin(s, i, found, h, t, ns)
	}
}

// storeWin writes the window state ns of h, found in slot i or not, at t:
// a state back to initial is dropped instead.
func (sh *shard) storeWin(s *Store, i int, found bool, h uint64, t int64, ns algo.Window) {
	switch {
	case found && ns.Expire > t:
		sh.win.slots[i].v = ns
	case found:
		sh.win.remove(i)
	case ns.Expire > t:
		sh.makeRoom(s, t)
		sh.win.insert(h, ns)
		sh.sweepWin(t)
	}
}

func (sh *shard) decideLog(r *algo.Verdict, s *Store, c *compiled, h uint64, t, cost int64, commit bool) {
	ap := c.pp.Params
	i, found := sh.logs.find(h)
	if !found {
		algo.SlidingLogPeek(ap, &algo.Log{}, t, cost, r)
		if commit && r.Allowed && cost > 0 {
			ls := &logState{}
			algo.SlidingLog(ap, &ls.log, t, cost, r)
			sh.addLog(s, h, t, ap.Period, ls)
		}
		return
	}
	ls := sh.logs.slots[i].v
	if !commit {
		algo.SlidingLogPeek(ap, &ls.log, t, cost, r)
		return
	}
	algo.SlidingLog(ap, &ls.log, t, cost, r)
	ls.expire = ls.log.Expiry(ap.Period)
	if ls.log.Len() == 0 {
		sh.logs.remove(i)
	}
}

// addLog tracks ls, the new log of the key of hash h (absent from the
// shard), at t: it expires a period after its last entry.
func (sh *shard) addLog(s *Store, h uint64, t, period int64, ls *logState) {
	ls.expire = ls.log.Expiry(period)
	sh.makeRoom(s, t)
	sh.logs.insert(h, ls)
	sh.sweepLogs(t)
}

func (sh *shard) len() int { return sh.tat.n + sh.win.n + sh.logs.n + sh.conc.n + sh.pen.n }

// sweepSteps is how many slots each insert examines for initial entries.
const sweepSteps = 4

func (sh *shard) sweepTAT(t int64) {
	sweepTable(&sh.tat, &sh.sweep, t, func(v algo.TAT) int64 { return v.Expiry() }, nil)
}

func (sh *shard) sweepWin(t int64) {
	sweepTable(&sh.win, &sh.sweep, t, func(v algo.Window) int64 { return v.Expire }, nil)
}

func (sh *shard) sweepPen(t int64) {
	sweepTable(&sh.pen, &sh.sweep, t, algo.Block.Expiry, nil)
}

func (sh *shard) sweepLogs(t int64) {
	sweepTable(&sh.logs, &sh.sweep, t, func(v *logState) int64 { return v.expire }, nil)
}

// sweepTable examines sweepSteps slots from the cursor and drops the
// entries that are back to initial at t.
func sweepTable[V any](tb *table[V], cursor *int, t int64, expiry func(V) int64, drop func(V)) {
	if len(tb.slots) == 0 {
		return
	}
	for range sweepSteps {
		i := *cursor % len(tb.slots)
		if tb.slots[i].h != 0 && expiry(tb.slots[i].v) <= t {
			if drop != nil {
				drop(tb.slots[i].v)
			}
			tb.remove(i) // the slot may now hold a shifted entry: look again next time
		} else {
			*cursor = i + 1
		}
	}
}

// evictSample is how many occupied slots makeRoom compares.
const evictSample = 16

// makeRoom evicts one entry when the shard is at its key cap: among
// evictSample consecutive entries of the fullest table, the one that is
// closest to (or already back at) its initial state.
func (sh *shard) makeRoom(s *Store, t int64) {
	if sh.cap == 0 || sh.len() < sh.cap {
		return
	}
	start := int(uint64(t) * 0x9e3779b97f4a7c15 >> 1)
	switch {
	case sh.pen.n > sh.tat.n && sh.pen.n > sh.win.n && sh.pen.n > sh.logs.n:
		evictOne(&sh.pen, start, algo.Block.Expiry)
	case sh.tat.n >= sh.win.n && sh.tat.n >= sh.logs.n:
		evictOne(&sh.tat, start, func(v algo.TAT) int64 { return v.Expiry() })
	case sh.win.n >= sh.logs.n:
		evictOne(&sh.win, start, func(v algo.Window) int64 { return v.Expire })
	default:
		evictOne(&sh.logs, start, func(v *logState) int64 { return v.expire })
	}
}

func evictOne[V any](tb *table[V], start int, expiry func(V) int64) {
	if tb.n == 0 {
		return
	}
	best, bestExp, seen := -1, int64(0), 0
	for i := start % len(tb.slots); seen < evictSample && seen < tb.n; i = tb.next(i) {
		if tb.slots[i].h == 0 {
			continue
		}
		seen++
		if e := expiry(tb.slots[i].v); best < 0 || e < bestExp {
			best, bestExp = i, e
		}
	}
	tb.remove(best)
}

// Prune drops every entry that is back to initial at now (zero means the
// store's clock), one shard and a bounded run of slots at a time, so no
// lock is held for long. It returns the number of entries dropped.
//
// now counts as a time seen: a later decision at an earlier time decides
// as at now (as for a clock that steps backwards), so that no key is found
// dropped before its state was back to initial.
func (s *Store) Prune(now time.Time) int {
	t := s.micros(now)
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		dropped += pruneTable(sh, &sh.tat, t, func(v algo.TAT) int64 { return v.Expiry() }, nil)
		dropped += pruneTable(sh, &sh.win, t, func(v algo.Window) int64 { return v.Expire }, nil)
		dropped += pruneTable(sh, &sh.logs, t, func(v *logState) int64 { return v.expire }, nil)
		dropped += pruneTable(sh, &sh.conc, t, func(v *concState) int64 { return v.expire }, s.dropConc)
		dropped += pruneTable(sh, &sh.pen, t, algo.Block.Expiry, nil)
	}
	return dropped + s.sweepSettlements(t)
}

// pruneChunk is how many slots Prune examines per lock acquisition.
const pruneChunk = 512

func pruneTable[V any](sh *shard, tb *table[V], t int64, expiry func(V) int64, drop func(V)) int {
	dropped := 0
	for start := 0; ; start += pruneChunk {
		sh.mu.Lock()
		sh.hw = max(t, sh.hw)
		tt := sh.hw
		if start >= len(tb.slots) {
			tb.shrink()
			sh.mu.Unlock()
			return dropped
		}
		for i := start; i < min(start+pruneChunk, len(tb.slots)); i++ {
			for tb.slots[i].h != 0 && expiry(tb.slots[i].v) <= tt {
				if drop != nil {
					drop(tb.slots[i].v)
				}
				tb.remove(i)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of (policy, key) pairs tracked.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}
