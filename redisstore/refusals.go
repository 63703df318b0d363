package redisstore

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Local refusals (docs/redis.md, "Refused floods").
//
// When Redis refuses a request, the script also returns the key's state and
// the time it decided at. The store keeps that state in a bounded cache and,
// for the next requests on the same policy and key, evolves it with the
// algorithm of internal/algo (the one the scripts mirror) to the present.
// Other instances can only add to a key's state, never take from it, and
// every algorithm admits no more at a fuller state: so while the cached
// state refuses a request, the state in Redis refuses it too, and the store
// refuses it without calling Redis. As soon as the cached state would admit
// the request, the call goes to Redis, whose answer replaces the entry (a
// refusal) or removes it (an admission). Nothing is ever admitted locally.

// Defaults of LocalRefusals.
const (
	DefaultLocalRefusalEntries = 65536
	DefaultLocalRefusalBytes   = 16 << 20
	DefaultLocalRefusalMaxAge  = time.Second
)

// LocalRefusals configures the store's local refusals: the cache of the
// states of refused keys with which the store refuses, without calling
// Redis, the requests that Redis would refuse too. The zero value turns
// them on with the default sizes.
type LocalRefusals struct {
	// Off turns local refusals off: every request goes to Redis.
	Off bool
	// MaxEntries bounds the number of (policy, key) states held; default
	// DefaultLocalRefusalEntries (65,536).
	MaxEntries int
	// MaxBytes bounds their memory, counted as EntryBytes for each; default
	// DefaultLocalRefusalBytes (16 MiB).
	MaxBytes int64
	// MaxAge bounds how long a state Redis returned refuses locally: past
	// it, the next request on the key goes to Redis, whose answer replaces
	// the state. Other instances only add to a key's state, except when
	// they give units back (Refund, a settlement below its estimate,
	// Reset): each such script publishes the key on the channel Prefix +
	// "refunded", which the store subscribes to on a connection of its
	// own, dropping the key's state when it hears it. While it is not
	// subscribed (Redis down, say) it learns no new state and keeps those
	// it has; once subscribed again it drops them all. MaxAge bounds, in
	// any case, how long a state refuses. Default DefaultLocalRefusalMaxAge
	// (1 s); negative for no bound.
	MaxAge time.Duration
}

// entryOverhead is what an entry costs besides its Redis key and its log:
// the entry itself, the map's slot (key header, pointer, hash byte) and the
// allocation's rounding.
const entryOverhead = int(unsafe.Sizeof(entry{})) + 48

// EntryBytes returns what one cached state counts against
// LocalRefusals.MaxBytes: about 340 bytes, plus keyBytes, the length of its
// Redis key (see docs/redis.md, "Key layout") and, for a state refused by
// Allow or Peek, of the key the caller passed, plus 16 bytes per entry of
// a sliding log (a state is returned for logs of up to 1,024 entries).
func EntryBytes(keyBytes, logEntries int) int {
	return entryOverhead + keyBytes + 16*logEntries
}

// refusalShards is the number of independently locked parts of the cache.
const refusalShards = 32

// hotSlots is the number of slots of the cache's lock-free front (see
// refusals.hot), 16 KiB of pointers.
const hotSlots = 2048

// maxCountedNames bounds the policy names whose local refusals are counted
// apart; the others share one count, under otherName.
const (
	maxCountedNames = 1024
	otherName       = "(other)"
)

// refusals is the cache of refused states, and its counts.
type refusals struct {
	seed   maphash.Seed
	shards [refusalShards]refusalShard
	// hot is a direct-mapped front of the shards' maps, found from the
	// compiled policy and the caller's key without building the Redis
	// key, and read without a lock: a flood of callers on one key would
	// otherwise all take that key's shard's read lock, whose shared count
	// bounces between cores. A slot holds the entry last put there while
	// it is still in its shard: an entry is stored in its slot only by
	// its put and cleared from it by its removal, both under its shard's
	// lock, so a dropped or evicted entry never comes back.
	hot        [hotSlots]atomic.Pointer[entry]
	maxEntries int       // per shard
	maxBytes   int       // per shard
	base       time.Time // the origin of mono
	// refunded is when (mono) the store last gave units back to a key
	// (Refund, Reset, a settlement below its estimate), heard that another
	// instance did, or subscribed to hear it: a state from a call sent
	// before then is not kept (see Store.forget and Store.hearRefunds).
	refunded atomic.Int64
	// live reports that the store hears the refunds of other instances
	// (see Store.hearRefunds): only then are states learnt, and the cache
	// is emptied whenever it starts again.
	live   atomic.Bool
	maxAge int64 // LocalRefusals.MaxAge in µs

	// remote counts the calls that were not refused locally (the calls
	// refused locally are counted by policy name, in byName), so that a
	// local refusal adds to one counter. Allocated on its own (see
	// counter): its stripes share no cache line with the fields a local
	// refusal reads.
	remote *counter

	// latest is the latest Redis TIME of a reply on Redis's clock, which
	// dates a local refusal in its place among the decisions of Redis
	// (see decidedAt). Allocated on its own, as remote: every reply
	// writes it.
	latest *latestTime

	namesMu sync.Mutex
	byName  map[string]*counter
}

// latestTime is a time in µs that only moves forwards, alone in its 128
// bytes.
type latestTime struct {
	t atomic.Int64
	_ [120]byte
}

// saw moves the latest time to t, if t is later.
func (l *latestTime) saw(t int64) {
	for {
		old := l.t.Load()
		if t <= old || l.t.CompareAndSwap(old, t) {
			return
		}
	}
}

// decidedAt returns the time (µs) a local refusal on Redis's clock
// reports to Options.OnDecided: of the states it decided on, the latest
// time one was read at (from), or the latest TIME of any reply since, if
// later, but never past the refusal's own time t, an upper bound of
// Redis's clock. Any time from from to t refuses as t does (a later time
// admits at least as much), and a time no earlier than the replies
// received before puts the refusal in its place among Redis's decisions,
// for a replay of the decision log; t itself may come after Redis's next
// decisions, by as much as a round trip.
func (rf *refusals) decidedAt(from, t int64) int64 {
	return min(max(from, rf.latest.t.Load()), t)
}

// counterStripes is the number of stripes a counter is spread over: one
// a processor up to GOMAXPROCS 8, shared by two or more beyond.
const counterStripes = 8

// counter is a count that callers on different cores add to on different
// cache lines, summed when read: a count on one cache line, which every
// local refusal of a flood adds to, would move that line from core to
// core at every refusal. 1,152 bytes; allocated on its own, it starts at
// a multiple of 128 bytes, so no other data shares its cache lines.
type counter struct {
	// The bytes a nil check of c reads: no stripe is there, so no write
	// takes the line from the cores that read it.
	_       [128]byte
	stripes [counterStripes]struct {
		n atomic.Uint64
		// 128 bytes a stripe: a core that writes a cache line also
		// fetches the line next to it.
		_ [120]byte
	}
}

// add adds 1 to c, on the stripe of the processor (Go's P) the caller
// runs on (see stripeTokens). A stripe chosen by goroutine, by the address
// of its stack, was tried: a flood's goroutines move from core to core,
// and their stripes with them.
func (c *counter) add() {
	t, _ := stripeTokens.Get().(*stripeToken)
	if t == nil {
		t = &stripeToken{i: nextStripe.Add(1) % counterStripes}
	}
	c.stripes[t.i].n.Add(1)
	stripeTokens.Put(t)
}

// load returns c's count: the sum of its stripes.
func (c *counter) load() uint64 {
	var n uint64
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}

// stripeTokens holds the stripe tokens, one a processor: a sync.Pool
// keeps the token a goroutine puts back in its processor's own slot, where
// the next goroutine to run there takes it, so that the callers on one
// core add to one stripe, which stays in that core's cache, whatever
// goroutine they run in. Which stripe a caller adds to never changes a
// count, only where it is kept; a token the pool drops is replaced.
var stripeTokens sync.Pool

// stripeToken names a stripe of every counter.
type stripeToken struct{ i uint32 }

// nextStripe hands out the stripes to new tokens in turn.
var nextStripe atomic.Uint32

type refusalShard struct {
	mu    sync.RWMutex
	m     map[string]*entry
	bytes int
	_     [40]byte // keeps shards' locks on different cache lines
}

// entry is one key's state as Redis returned it with a refusal. Only w
// changes after it is made.
type entry struct {
	key    string // the Redis key
	policy sluice.Policy
	// c and userKey are the compiled policy and the caller's key of an
	// entry in the hot slot hot (see refusals.hot); userKey is "" for
	// one that is not. An entry refused by AllowAll holds as userKey the
	// part of key that is the caller's key (see Store.learnMany).
	c       *compiled
	userKey string
	hot     *atomic.Pointer[entry]
	pp      algo.Prepared // the scripts' numbers (see compiled.pp)
	tat     algo.TAT
	win     algo.Window
	log     *algo.Log // never changed once made
	// caller reports that the state was read at a caller's time
	// (Options.CallerTime); then w is the latest time the key has seen,
	// raised by every local refusal as Redis would have raised it.
	caller bool
	w      atomic.Int64
	// On Redis's clock: Redis's TIME of the decision, and the local
	// monotonic time (µs) just before the call was sent. Redis read its
	// TIME after that, so redisAt + (now − sentAt) is never earlier than
	// Redis's clock at local time now.
	redisAt, sentAt int64
	until           int64 // local monotonic µs when the state is back to initial
	size            int
	count           *counter // local refusals under the policy's name
	// A block entry (blockEnd > 0) holds no state but a penalty's block
	// (see Store.refuseBlocked): in Redis's µs, the end of the block and
	// the instants the refusal of a request of cost said it would pass and
	// the key be back to initial.
	blockEnd, retryAt, resetAt, cost int64
}

// newRefusals returns the cache for o, or nil when it is off.
func newRefusals(o LocalRefusals) *refusals {
	if o.Off {
		return nil
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultLocalRefusalEntries
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultLocalRefusalBytes
	}
	rf := &refusals{
		seed:       maphash.MakeSeed(),
		maxEntries: max(1, (o.MaxEntries+refusalShards-1)/refusalShards),
		maxBytes:   int(min(o.MaxBytes/refusalShards+1, math.MaxInt32)),
		base:       time.Now(),
		remote:     new(counter),
		latest:     new(latestTime),
		byName:     make(map[string]*counter),
	}
	for i := range rf.shards {
		rf.shards[i].m = make(map[string]*entry)
	}
	rf.refunded.Store(math.MinInt64) // no refund yet (mono may be negative)
	switch {
	case o.MaxAge < 0:
		rf.maxAge = math.MaxInt64
	case o.MaxAge == 0:
		rf.maxAge = int64(DefaultLocalRefusalMaxAge / time.Microsecond)
	default:
		rf.maxAge = int64(o.MaxAge / time.Microsecond)
	}
	return rf
}

// mono returns the local monotonic time in µs.
func (rf *refusals) mono() int64 {
	return int64(time.Since(rf.base) / time.Microsecond)
}

func (rf *refusals) shard(key []byte) *refusalShard {
	return &rf.shards[maphash.Bytes(rf.seed, key)%refusalShards]
}

// shardString is shard for a key held as a string (maphash.String hashes
// as maphash.Bytes does).
func (rf *refusals) shardString(key string) *refusalShard {
	return &rf.shards[maphash.String(rf.seed, key)%refusalShards]
}

// hotSlot returns the hot slot of the caller's key userKey under c.
func (rf *refusals) hotSlot(c *compiled, userKey string) *atomic.Pointer[entry] {
	return &rf.hot[(maphash.String(rf.seed, userKey)^c.salt)%hotSlots]
}

// hotGet returns the entry of the caller's key userKey under c if it is in
// its hot slot, else nil (get may still find it). The entry may have been
// made under another compiled copy of c's policy (see saltSeed).
func (rf *refusals) hotGet(c *compiled, userKey string) *entry {
	if e := rf.hotSlot(c, userKey).Load(); e != nil && (e.c == c || e.policy == c.policy) && e.userKey == userKey {
		return e
	}
	return nil
}

// getFor returns the entry of the caller's key userKey under c, whose
// Redis key has the prefix prefix, or nil.
func (rf *refusals) getFor(c *compiled, prefix, userKey string) *entry {
	var buf [128]byte
	return rf.get(c.appendKey(buf[:0], prefix, userKey), &c.policy)
}

// get returns the entry of the Redis key key under policy p, or nil.
func (rf *refusals) get(key []byte, p *sluice.Policy) *entry {
	sh := rf.shard(key)
	sh.mu.RLock()
	e := sh.m[string(key)]
	sh.mu.RUnlock()
	if e == nil || e.policy != *p {
		return nil
	}
	return e
}

// put stores e as key's entry, evicting others when the shard is full:
// first entries whose state is back to initial, then any; and with a
// userKey (the caller's key), in its hot slot. inKey says that userKey is
// part of key (AllowAll's; see Store.learnMany), which holds no memory of
// its own and is not counted.
//
// Nothing is stored from a call sent (mono) at or before the latest refund
// (see refunded), nor while the store does not hear other instances'
// refunds (see live): checked under the shard's lock, which the removal
// after a refund takes too, so that a state learnt before a refund never
// outlives it.
func (rf *refusals) put(key, userKey string, inKey bool, e *entry, sent int64) {
	e.size = EntryBytes(len(key), 0)
	if !inKey {
		e.size += len(userKey)
	}
	if e.log != nil {
		e.size += 16 * e.log.Len()
	}
	if e.size > rf.maxBytes {
		rf.drop(key)
		return
	}
	e.count = rf.counter(e.policy.Name)
	e.key = key
	if userKey != "" {
		e.userKey, e.hot = userKey, rf.hotSlot(e.c, userKey)
	}
	now := rf.mono()
	sh := rf.shardString(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	remove(sh, key)
	if sent <= rf.refunded.Load() || !rf.live.Load() {
		return
	}
	for len(sh.m) > 0 && (len(sh.m) >= rf.maxEntries || sh.bytes+e.size > rf.maxBytes) {
		sh.evictOne(now)
	}
	sh.m[key] = e
	sh.bytes += e.size
	if e.hot != nil {
		e.hot.Store(e)
	}
}

// remove removes key's entry from sh, if any, and from its hot slot. sh.mu
// is held.
func remove(sh *refusalShard, key string) {
	old := sh.m[key]
	if old == nil {
		return
	}
	sh.bytes -= old.size
	delete(sh.m, key)
	if old.hot != nil {
		old.hot.CompareAndSwap(old, nil)
	}
}

// evictOne removes one entry: the first of a few that is back to initial,
// else the first of them (map order is random). sh.mu is held.
func (sh *refusalShard) evictOne(now int64) {
	var victim string
	seen := 0
	for k, e := range sh.m {
		if seen == 0 {
			victim = k
		}
		if !e.caller && e.until <= now {
			victim = k
			break
		}
		if seen++; seen == 8 {
			break
		}
	}
	remove(sh, victim)
}

// clear removes every entry.
func (rf *refusals) clear() {
	for i := range rf.shards {
		sh := &rf.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			remove(sh, k)
		}
		sh.mu.Unlock()
	}
}

// drop removes key's entry, if any.
func (rf *refusals) drop(key string) {
	sh := rf.shardString(key)
	sh.mu.Lock()
	remove(sh, key)
	sh.mu.Unlock()
}

// counter returns the count of local refusals under a policy name.
func (rf *refusals) counter(name string) *counter {
	rf.namesMu.Lock()
	defer rf.namesMu.Unlock()
	if c := rf.byName[name]; c != nil {
		return c
	}
	if len(rf.byName) >= maxCountedNames {
		name = otherName
		if c := rf.byName[name]; c != nil {
			return c
		}
	}
	c := new(counter)
	rf.byName[name] = c
	return c
}

// at returns the time (µs) at which e decides a call at now, and whether e
// can decide it: an entry read at a caller's time decides only calls at a
// caller's time, and one read on Redis's clock only calls on Redis's clock.
// On Redis's clock it is an upper bound of Redis's clock now, with 1 µs
// and 0.1% of the time since the reply added for clock rates that differ:
// a later time admits at least as much, so a refusal there is one at
// Redis's own time too.
func (rf *refusals) at(e *entry, callerNow int64, caller bool) (int64, bool) {
	if caller {
		return max(callerNow, e.w.Load()), e.caller
	}
	return e.redisClock(rf.mono(), rf.maxAge)
}

// redisClock returns e's upper bound of Redis's clock at local monotonic time
// mono (see refusals.at), and whether e may refuse then: on Redis's clock,
// and read from Redis at most maxAge µs before.
func (e *entry) redisClock(mono, maxAge int64) (int64, bool) {
	if e.caller || mono-e.sentAt > maxAge {
		return 0, false // on the caller's time; or older than LocalRefusals.MaxAge
	}
	d := max(mono-e.sentAt, 0)
	return e.redisAt + d + d>>10 + 1, true
}

// decide decides a request of the given cost on e's state at t, as the
// scripts would, into r (a Verdict returned by value would be copied
// through the stack at each call).
func (e *entry) decide(r *algo.Verdict, t, cost int64, maxDelay time.Duration) {
	switch e.policy.Algorithm {
	case sluice.LeakyBucketAlgorithm:
		// The scripts take MaxDelay in whole µs, rounded down: m ≥ 0 for
		// any positive MaxDelay, refusing a wait w > m. For m = 0, 1ns
		// refuses the same waits (w ≥ 1 µs), with the same retry.
		md := maxDelay / time.Microsecond * time.Microsecond
		if md == 0 && maxDelay > 0 {
			md = 1
		}
		e.pp.LeakyBucketTo(e.tat, t, cost, md, r)
	case sluice.FixedWindowAlgorithm:
		algo.FixedWindow(e.pp.Params, e.win, t, cost, r)
	case sluice.SlidingWindowAlgorithm:
		algo.SlidingWindow(e.pp.Params, e.win, t, cost, r)
	case sluice.SlidingLogAlgorithm:
		algo.SlidingLogPeek(e.pp.Params, e.log, t, cost, r)
	default:
		e.pp.TokenBucketTo(e.tat, t, cost, r)
	}
}

// seen raises an entry read at a caller's time to t, as a call at t would
// raise the key's latest time in Redis.
func (e *entry) seen(t int64) {
	if !e.caller {
		return // on Redis's clock w is not kept (and a write here would be shared by every caller)
	}
	for {
		w := e.w.Load()
		if w >= t || e.w.CompareAndSwap(w, t) {
			return
		}
	}
}

// decisionOf turns an algorithm's verdict under p into a Decision.
func decisionOf(p *sluice.Policy, r *algo.Verdict) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      p.Limit,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
		Delay:      r.Delay,
	}
}

// newEntry makes the entry of a state that a script returned with a
// decision under c: st is the script's time, the key's latest time and
// the algorithm's state (see STATE in lib.lua). reset (µs) is when the
// state is back to initial. ok is false when st is not a state the
// scripts write.
func newEntry(c *compiled, st []int64, caller bool, sentAt, reset int64) (e *entry, ok bool) {
	if len(st) < 2 || st[0] < 0 || st[1] < 0 {
		return nil, false
	}
	e = &entry{policy: c.policy, c: c, pp: c.pp, caller: caller, redisAt: st[0], sentAt: sentAt, until: sentAt + reset}
	e.w.Store(st[1])
	s := st[2:]
	switch c.policy.Algorithm {
	case sluice.TokenBucketAlgorithm, sluice.GCRAAlgorithm, sluice.LeakyBucketAlgorithm:
		if len(s) != 2 || s[0] < 0 || s[1] < 0 || s[1] >= c.pp.Limit {
			return nil, false
		}
		e.tat = algo.TAT{At: s[0], Frac: s[1]}
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		if len(s) != 3 || s[0] < 0 || s[0] >= maxTime || s[1] < 0 || s[1] > math.MaxUint32 || s[2] < 0 || s[2] > math.MaxUint32 {
			return nil, false
		}
		e.win = algo.Window{Start: s[0], Prev: uint32(s[1]), Curr: uint32(s[2]), Expire: c.windowExpire(s[0], s[1], s[2])}
	case sluice.SlidingLogAlgorithm:
		if len(s)%2 != 0 {
			return nil, false
		}
		entries := make([]algo.LogEntry, len(s)/2)
		for i := range entries {
			at, cost := s[2*i], s[2*i+1]
			if at < 0 || cost < 1 || (i > 0 && at <= entries[i-1].At) {
				return nil, false
			}
			entries[i] = algo.LogEntry{At: at, Cost: cost}
		}
		e.log = algo.LogOf(entries)
	default:
		return nil, false
	}
	return e, true
}

// LocalRefusalStats are the counts of a store's local refusals, for
// metrics and status pages.
type LocalRefusalStats struct {
	// On reports whether local refusals are on.
	On bool
	// Decisions counts the calls the store has decided (Allow, Peek and
	// AllowAll), and Local those of them refused locally, which never
	// reached Redis.
	Decisions, Local uint64
	// ByPolicy counts local refusals by policy name (sluice.Policy.Name; a
	// refused AllowAll counts once, under the first of its policies, in
	// request order, that refused it). Past 1,024 names, the others count
	// together under "(other)". Each name's count takes 1,152 bytes,
	// outside LocalRefusals.MaxBytes.
	ByPolicy map[string]uint64
	// Entries is the number of states held, and Bytes what they count
	// against LocalRefusals.MaxBytes.
	Entries int
	Bytes   int64
}

// LocalRefusalStats returns the counts of local refusals since the store
// was made.
func (s *Store) LocalRefusalStats() LocalRefusalStats {
	rf := s.refusals
	if rf == nil {
		return LocalRefusalStats{}
	}
	remote := rf.remote.load()
	st := LocalRefusalStats{On: true}
	rf.namesMu.Lock()
	st.ByPolicy = make(map[string]uint64, len(rf.byName))
	for name, c := range rf.byName {
		n := c.load()
		st.ByPolicy[name] = n
		st.Local += n
	}
	rf.namesMu.Unlock()
	st.Decisions = st.Local + remote
	for i := range rf.shards {
		sh := &rf.shards[i]
		sh.mu.RLock()
		st.Entries += len(sh.m)
		st.Bytes += int64(sh.bytes)
		sh.mu.RUnlock()
	}
	return st
}
