// Package redisstore is a sluice.Store kept in Redis, so that every
// instance of a service shares one limit: with N instances behind a load
// balancer, a key still gets exactly its limit, not N times it.
//
// Decisions are those of the memory store (github.com/sluicehq/sluice/
// memstore), field for field: the six algorithms and the concurrency limit
// run as Lua scripts that mirror internal/algo decision by decision, with
// exact integer arithmetic, and one script call (EVALSHA) decides a request
// atomically, however many instances send requests for the same key at
// once. A concurrency policy's leases can be released or renewed by any
// store on the same Redis and Prefix (see Store.Release). AllowAll decides all its
// requests in the same single call. Under load, the calls of concurrent
// callers go to Redis together in one script call, each decided exactly as
// alone (Options.MaxBatch).
//
// Time is Redis's own clock (TIME), read inside the script, so instances
// whose clocks disagree still agree on every decision. Options.CallerTime
// makes the store use the times passed to it instead, for tests and
// simulations.
//
// The store works with a single Redis, Redis Sentinel or Redis Cluster
// through github.com/redis/rueidis. On a cluster every policy of one key
// lands in one hash slot (see docs/redis.md for the key layout), so
// sluice.Limiter's all-or-nothing decisions work unchanged; an AllowAll over
// keys in different slots fails with ErrCrossSlot.
//
// When Redis fails or is too slow (Options.Timeout), Options.Failure decides:
// allow, deny, or a local in-memory store, and the decision says Degraded. A
// circuit breaker stops calling a Redis that keeps failing, so callers pay
// nothing for it, and probes it until it answers again.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/engine"
)

// Errors.
var (
	// ErrCrossSlot is returned, before anything is charged, for an
	// AllowAll on Redis Cluster whose keys lie in different hash slots:
	// one script cannot touch them atomically. It wraps
	// sluice.ErrNotAtomic. sluice.Limiter never causes it (all its
	// requests have one key).
	ErrCrossSlot = fmt.Errorf("requests of one AllowAll map to different Redis Cluster hash slots: %w", sluice.ErrNotAtomic)
	// ErrCircuitOpen is the error of a call that the circuit breaker kept
	// from Redis (returned only under FailError).
	ErrCircuitOpen = errors.New("redis circuit breaker is open")
	// ErrClosed is returned by a store after Close.
	ErrClosed = errors.New("redis store is closed")
)

// Defaults of Options.
const (
	DefaultPrefix           = "sluice:"
	DefaultTimeout          = 50 * time.Millisecond
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 250 * time.Millisecond
)

// Options configure a Store. The zero value of each field means the default
// given with it.
type Options struct {
	// Client is an existing rueidis client (single Redis, Sentinel or
	// Cluster) for the store to use; the store does not close it. When it
	// is nil the store connects with ClientOption and Addrs.
	Client rueidis.Client
	// Addrs are the address of a single Redis, or of one or more nodes of a
	// Redis Cluster (the others are discovered), used when Client is nil.
	// They replace ClientOption.InitAddress.
	Addrs []string
	// ClientOption configures the connection the store makes when Client
	// is nil: password, TLS, Sentinel and so on. DisableCache is always set
	// (the store does not use client-side caching).
	ClientOption rueidis.ClientOption
	// Prefix starts every key the store writes; default "sluice:". It must
	// not contain '{' or '}'.
	Prefix string
	// Timeout bounds each call to Redis; default 50 ms. A call that takes
	// longer counts as a failure.
	Timeout time.Duration
	// Failure says what is decided when Redis cannot decide; the default,
	// FailAllow, admits the request.
	Failure FailurePolicy
	// Local is the in-process store that decides under FailLocal, such as
	// memstore.New(memstore.Options{MaxKeys: ...}); required with it.
	Local sluice.Store
	// BreakerThreshold is how many calls in a row must fail to open the
	// circuit breaker; default 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker keeps calls from Redis
	// before it lets one through as a probe; default 250 ms.
	BreakerCooldown time.Duration
	// OnError, if set, is called with the error of every failed call to
	// Redis (not with the calls the open breaker skips), for logs and
	// metrics. It must be quick and safe for concurrent use.
	OnError func(error)
	// OnBreakerChange, if set, is called on every change of the breaker's
	// state, in order: on Redis Cluster, where each master has its own
	// breaker, of the worst of them (see BreakerState). It must be quick
	// and must not call the store.
	OnBreakerChange func(from, to BreakerState)
	// OnRecover, if set, is called when Redis answers a call after calls
	// to it failed, once for each run of failures (on Redis Cluster, of
	// each master's), with how many failed and for how long. It must be
	// quick, safe for concurrent use, and must not call the store.
	OnRecover func(Recovery)
	// MaxBatch is the most requests one script call decides when calls
	// wait for Redis; default DefaultMaxBatch (64), 1 turns batching off.
	// A call is sent at once while fewer than two of the store's calls are
	// in flight; the calls that come meanwhile wait and then go together
	// (a whole batch at once, up to eight calls in flight), so that under
	// load Redis runs one script per batch instead of one per call. Each
	// call stays atomic and is decided exactly as alone. Calls are not
	// batched on Redis Cluster, nor with CallerTime times.
	MaxBatch int
	// LocalRefusals configures local refusals, on by default: the store
	// keeps the state of keys that Redis refused, and refuses without
	// calling Redis the requests that this state, evolved to the present,
	// still refuses (Redis would refuse them too). See docs/redis.md,
	// "Refused floods".
	LocalRefusals LocalRefusals
	// CallerTime makes the store decide at the non-zero now passed to
	// Allow, AllowAll and Peek instead of at Redis's TIME (a zero now still
	// means Redis's TIME). It is for tests and simulations: the callers'
	// clocks must then agree, and every call records its time in the key it
	// touches. Times must lie between 1970 and 2112.
	CallerTime bool
	// Observe, if set, is told of every script call to Redis when it
	// returns, with the caller's context, for traces: which script, on
	// Redis Cluster which slot and master, how long, and its error. It must
	// be quick, safe for concurrent use, and must not call the store.
	Observe func(ctx context.Context, c Call)
	// OnDecided, if set, is told the time at which each request of a
	// decision on Redis's clock was decided, with the caller's context:
	// the TIME of the script that decided it (returned with every
	// decision), or for a refusal made locally (LocalRefusals) a time at
	// which Redis refuses too, no earlier than the store's latest reply
	// from Redis. It is told nothing of decisions at the caller's time
	// (CallerTime), of degraded ones and of failed calls. order puts the
	// decisions of one TIME in the order Redis made them: the calls
	// batched into one script (MaxBatch) share its TIME and are decided
	// in their order in the batch, which is order, from 1; a call that
	// ran alone has order 0, and a local refusal order 2³²−1, after the
	// replies of its time. A decision log writes both, so that a replay
	// decides at the same instants in the same order. It must be quick,
	// safe for concurrent use, and must not call the store.
	OnDecided func(ctx context.Context, req sluice.Request, at time.Time, order uint64)
}

// Call is one script call to Redis, as Options.Observe sees it.
type Call struct {
	// Script names the script: "single" (one decision; "tat_single" for
	// the token-bucket family's flat script), "many" (AllowAll),
	// "allow_settle", "usage", "settle", "lease", "penalty", and so on.
	Script string
	// Slot is the hash slot of the call's first key on Redis Cluster, -1
	// elsewhere; Master the address of the master that serves it, when
	// the store knows it.
	Slot   int
	Master string
	// Start is when the call began, Duration how long it took (waiting
	// for a connection, or for a batch to go, included); Err its error,
	// if any (ErrCircuitOpen when the breaker kept it from Redis).
	Start    time.Time
	Duration time.Duration
	Err      error
}

// Store is a sluice.Store in Redis. It is safe for concurrent use. Close it
// to release the connection it made.
type Store struct {
	prefix     string
	timeout    time.Duration
	failure    FailurePolicy
	local      sluice.Store
	onError    func(error)
	callerTime bool
	observe    func(context.Context, Call)
	onDecided  func(context.Context, sluice.Request, time.Time, uint64)

	single   [len(algorithmFiles)]*rueidis.Lua
	general  [len(algorithmFiles)]*rueidis.Lua // single.lua for the flat algorithms, whose keys in debt it decides
	many     *rueidis.Lua
	settle   *rueidis.Lua // AllowAll's script when it keeps estimates (allow_settle.lua)
	batch    *batcher     // nil when batching is off
	refusals *refusals    // nil when local refusals are off
	policies policyCache
	expired  expiredCounts
	usage    sync.Map // policy fingerprint -> *usageCounts
	breakers *breakers

	client    atomic.Pointer[rueidis.Client]
	own       bool // the store made the client and closes it
	clientOpt rueidis.ClientOption

	mu      sync.Mutex
	dialing *dial // the connection attempt in progress, if any
	closed  atomic.Bool
	wg      sync.WaitGroup
	// deafen stops hearRefunds, which closes deaf when it returns; both
	// nil when local refusals are off.
	deafen context.CancelFunc
	deaf   chan struct{}
	users  *users // goroutines using the client
}

// dial is one attempt to connect; err is set before done is closed.
type dial struct {
	done chan struct{}
	err  error
}

var _ sluice.Store = (*Store)(nil)

// CheckPrefix returns an error, which says why, when prefix cannot start
// the store's keys (Options.Prefix): when it contains '{' or '}', which
// would choose the Redis Cluster hash slot of every key. The empty prefix
// passes (New reads it as the default).
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return errors.New("must not contain '{' or '}': they would choose the Redis Cluster hash slot of every key, which the store chooses by each key's own hash tag")
	}
	return nil
}

// New returns a store. It does not wait for Redis: when Redis cannot be
// reached yet, calls are decided by the failure policy until it can.
func New(opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := CheckPrefix(opts.Prefix); err != nil {
		return nil, fmt.Errorf("redisstore: prefix %q %w", opts.Prefix, err)
	}
	if opts.Timeout < 0 || opts.BreakerThreshold < 0 || opts.BreakerCooldown < 0 || opts.MaxBatch < 0 {
		return nil, errors.New("redisstore: Timeout, BreakerThreshold, BreakerCooldown and MaxBatch must not be negative")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.BreakerThreshold == 0 {
		opts.BreakerThreshold = DefaultBreakerThreshold
	}
	if opts.BreakerCooldown == 0 {
		opts.BreakerCooldown = DefaultBreakerCooldown
	}
	if opts.Failure >= numFailurePolicies {
		return nil, fmt.Errorf("redisstore: unknown failure policy %d", uint8(opts.Failure))
	}
	if opts.Failure == FailLocal && opts.Local == nil {
		return nil, errors.New("redisstore: failure policy local needs Options.Local, an in-process store such as memstore.New(...)")
	}
	if opts.Client == nil && len(opts.Addrs) == 0 && len(opts.ClientOption.InitAddress) == 0 {
		return nil, errors.New("redisstore: no Redis: set Options.Client or Options.Addrs")
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.LocalRefusals.MaxEntries < 0 || opts.LocalRefusals.MaxBytes < 0 {
		return nil, errors.New("redisstore: LocalRefusals.MaxEntries and MaxBytes must not be negative")
	}
	single, general, many, settle, batch, batchOne, err := scripts(!opts.LocalRefusals.Off)
	if err != nil {
		return nil, err
	}
	s := &Store{
		prefix:     opts.Prefix,
		timeout:    opts.Timeout,
		failure:    opts.Failure,
		local:      opts.Local,
		onError:    opts.OnError,
		callerTime: opts.CallerTime,
		observe:    opts.Observe,
		onDecided:  opts.OnDecided,
		many:       named(rueidis.NewLuaScript(many), "many"),
		settle:     named(rueidis.NewLuaScript(settle), "allow_settle"),
		breakers:   newBreakers(opts.BreakerThreshold, opts.BreakerCooldown, opts.OnBreakerChange, opts.OnRecover),
		users:      newUsers(),
		refusals:   newRefusals(opts.LocalRefusals),
	}
	s.policies.seed = maphash.MakeSeed()
	for a, src := range single {
		name := "single"
		if flat(sluice.Algorithm(a)) {
			name = "tat_single"
		}
		s.single[a] = named(rueidis.NewLuaScript(src), name)
		if general[a] != "" {
			s.general[a] = named(rueidis.NewLuaScript(general[a]), "single")
		}
	}
	if opts.MaxBatch > 1 {
		s.batch = newBatcher(opts.MaxBatch, batch, batchOne, s.single, s.many, s.users)
	}
	if opts.Client != nil {
		c := opts.Client
		s.client.Store(&c)
	} else {
		s.own = true
		s.clientOpt = opts.ClientOption
		if len(opts.Addrs) > 0 {
			s.clientOpt.InitAddress = append([]string(nil), opts.Addrs...)
		}
		s.clientOpt.DisableCache = true
		// Connect now if Redis is there; if not, the first calls retry.
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		s.conn(ctx)
		cancel()
	}
	s.listen()
	return s, nil
}

// listen starts hearing other instances' refunds when the store keeps
// local refusals, and, when it has a connection, waits (within the
// store's timeout) for the first subscription, so that local refusals
// work from the first refusal on.
func (s *Store) listen() {
	if s.refusals == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.deafen, s.deaf = cancel, make(chan struct{})
	tried := make(chan struct{})
	go func() {
		defer close(s.deaf)
		s.hearRefunds(ctx, tried)
	}()
	if s.client.Load() == nil {
		return
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case <-tried:
	case <-t.C:
	}
}

// Close closes the connection the store made (not a Client passed in
// Options), after waiting for a connection attempt and the calls in flight
// to end (each within the store's Timeout). Calls after Close fail with
// ErrClosed, decided by the failure policy.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	s.mu.Unlock()
	if s.deafen != nil {
		s.deafen()
		<-s.deaf
	}
	s.wg.Wait()
	// Calls in flight end within the timeout; nothing is sent after.
	s.users.close()
	if c := s.client.Load(); c != nil && s.own {
		(*c).Close()
	}
	return nil
}

// conn returns the client, connecting first if the store has none yet.
// Connecting runs in its own goroutine, one attempt at a time, so that a
// caller waits no longer than ctx allows.
func (s *Store) conn(ctx context.Context) (rueidis.Client, error) {
	if c := s.client.Load(); c != nil {
		return *c, nil
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	d := s.dialing
	if d == nil {
		d = &dial{done: make(chan struct{})}
		s.dialing = d
		s.wg.Add(1)
		go s.connect(d)
	}
	s.mu.Unlock()
	select {
	case <-d.done:
		if d.err != nil {
			return nil, d.err
		}
		return *s.client.Load(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("connect to redis: %w", ctx.Err())
	}
}

// connBy is conn within a call's timeout, which ends at deadline: the
// client at once when the store has one, else conn.
func (s *Store) connBy(ctx context.Context, deadline time.Time) (rueidis.Client, error) {
	if c := s.client.Load(); c != nil {
		return *c, nil
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return s.conn(cctx)
}

func (s *Store) connect(d *dial) {
	defer s.wg.Done()
	c, err := rueidis.NewClient(s.clientOpt)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		d.err = fmt.Errorf("connect to redis %v: %w", s.clientOpt.InitAddress, err)
	case s.closed.Load():
		c.Close()
		d.err = ErrClosed
	default:
		s.client.Store(&c)
	}
	s.dialing = nil
	close(d.done)
}

// BreakerState returns the circuit breaker's state, for metrics: on Redis
// Cluster, where each master has its own breaker, the worst of them.
func (s *Store) BreakerState() BreakerState { return s.breakers.state() }

// Allow decides req and charges it when admitted. now is ignored (Redis's
// TIME decides) unless Options.CallerTime is set. A check (Cost 0), a
// request with an estimate to settle (SettleWithin) and one under a
// policy with a penalty are decided by AllowAll's scripts, which keep
// them.
func (s *Store) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	if req.Cost == 0 || req.Policy != nil && (req.SettleWithin > 0 && req.Policy.Algorithm != sluice.ConcurrencyAlgorithm || req.Policy.Penalty != (sluice.Penalty{})) {
		reqs := [1]sluice.Request{req}
		return s.AllowAll(ctx, now, reqs[:], nil)
	}
	return s.one(ctx, now, &req, opAllow)
}

// Peek decides req as Allow would, without charging it. A check (Cost 0),
// which charges nothing, is Allow's.
func (s *Store) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	if req.Policy != nil && req.Policy.Penalty != (sluice.Penalty{}) {
		return s.peekPenalized(ctx, now, req)
	}
	if req.Cost == 0 {
		req.SettleWithin = 0
		reqs := [1]sluice.Request{req}
		return s.AllowAll(ctx, now, reqs[:], nil)
	}
	return s.one(ctx, now, &req, opPeek)
}

// one decides req for Allow or Peek: refused locally when its cached
// state refuses it, else by Redis (oneRemote). Only what a local refusal
// needs comes before it: the Redis key is built after, and the caller's
// time is passed as a number. A local refusal's fields are written one by
// one into d, which the return reads one by one: a Decision made whole
// and returned would be copied through the stack 16 bytes at a time, each
// load waiting for the two 8-byte stores it spans to reach the cache.
func (s *Store) one(ctx context.Context, now time.Time, req *sluice.Request, op string) (d sluice.Decision, err error) {
	c, err := s.check(req)
	if err != nil {
		return d, err
	}
	us, err := s.micros(now)
	if err != nil {
		return d, err
	}
	var e *entry
	if rf := s.refusals; rf != nil && !c.conc() {
		// A concurrency policy is never refused locally: a release can
		// admit, at any moment, what Redis refused.
		if e = rf.hotGet(c, req.Key); e == nil {
			e = rf.getFor(c, s.prefix, req.Key)
		}
		var r algo.Verdict
		if e != nil {
			if t, ok := s.refuseOne(e, us, req, &r); ok {
				d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay = req.Policy.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay
				if us < 0 && s.onDecided != nil {
					s.onDecided(ctx, *req, time.UnixMicro(rf.decidedAt(e.redisAt, t)), localOrder)
				}
				return d, nil
			}
		}
	}
	return s.oneRemote(ctx, now, req, op, c, e, us)
}

// oneRemote is one for a request that was not refused locally: Redis
// decides it. e is its cached state, if any, and us the caller's time in
// µs, or -1 for Redis's clock.
func (s *Store) oneRemote(ctx context.Context, now time.Time, req *sluice.Request, op string, c *compiled, e *entry, us int64) (sluice.Decision, error) {
	var nowArg string
	if us >= 0 {
		if e != nil && e.caller {
			// The latest time e has seen, as Redis would have recorded it
			// had the local refusals gone to Redis.
			us = max(us, e.w.Load())
		}
		nowArg = strconv.FormatInt(us, 10)
	}
	var sent int64
	if rf := s.refusals; rf != nil {
		rf.remote.add()
		sent = rf.mono()
	}
	var buf [128]byte
	key := string(c.appendKey(buf[:0], s.prefix, req.Key))
	var id, lease string // a Peek takes nothing: no id
	if c.conc() && op == opAllow {
		// Made before the call: a decision whose lease could not be made
		// takes nothing.
		lid := newLeaseID()
		id = lid.text()
		var err error
		if lease, err = encodeLease(lid, []string{key}); err != nil {
			return sluice.Decision{}, err
		}
	}
	keys, args, wire, err := s.oneArgs(c, key, req, op, nowArg, now, id)
	if err != nil {
		return sluice.Decision{}, err
	}
	vals, order, err := s.evalOrder(ctx, s.single[req.Policy.Algorithm], keys, args, wire)
	if err == nil && len(vals) == 1 && vals[0] == 2 {
		// The key is in debt: tat_single.lua leaves it to single.lua over
		// tat.lua, which takes the same argument.
		vals, order, err = s.evalOrder(ctx, s.general[req.Policy.Algorithm], keys, args, wire)
	}
	var d sluice.Decision
	if err == nil {
		var v [replyWidth]int64
		var st []int64
		var at int64
		v, at, st, err = s.oneReply(vals)
		if err == nil {
			s.concDropped(c, v[:])
			d, err = parseDecision(req.Policy, v[:])
			if err == nil && nowArg == "" {
				if s.refusals != nil {
					s.refusals.latest.saw(at)
				}
				if s.onDecided != nil {
					s.onDecided(ctx, *req, time.UnixMicro(at), order)
				}
			}
		}
		if err != nil {
			s.report(err)
		} else if s.refusals != nil && !c.conc() {
			s.learn(c, key, req.Key, false, e, d.Allowed, st, nowArg != "", sent, v[3])
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return sluice.Decision{}, fmt.Errorf("redisstore: %w", err)
		}
		reqs := [1]sluice.Request{*req}
		return s.degrade(ctx, now, reqs[:], nil, op, err)
	}
	if d.RetryAfter == sluice.Never {
		return d, capacityError(req)
	}
	if d.Allowed {
		d.Lease = lease
	}
	return d, nil
}

// oneReply reads the reply of a single-request script (see reply in
// lib.lua): the decision's five numbers, the script's time (µs), and
// after a refusal the time and state that follow the five, if any.
func (s *Store) oneReply(vals []int64) (v [replyWidth]int64, at int64, st []int64, err error) {
	switch {
	case len(vals) == 4 && vals[0] == 1:
		v, at = [replyWidth]int64{1, vals[1], 0, vals[2], 0}, vals[3]
	case len(vals) == 5 && vals[0] == 1:
		v, at = [replyWidth]int64{1, vals[1], 0, vals[2], vals[4]}, vals[3]
	case len(vals) == replyWidth+1 && vals[0] == 0,
		len(vals) >= replyWidth+2 && vals[0] == 0 && s.refusals != nil:
		copy(v[:], vals)
		at = vals[replyWidth]
		if len(vals) > replyWidth+1 {
			st = vals[replyWidth:]
		}
	default:
		return v, 0, nil, s.malformed(vals)
	}
	return v, at, st, nil
}

// refuseOne decides req on its cached state e into r, and reports whether
// that refuses it, and at which time t (µs). us is the caller's time in
// µs, or -1 for Redis's clock.
func (s *Store) refuseOne(e *entry, us int64, req *sluice.Request, r *algo.Verdict) (t int64, ok bool) {
	t, ok = s.refusals.at(e, us, us >= 0)
	if !ok {
		return 0, false
	}
	e.decide(r, t, req.Cost, req.MaxDelay)
	if r.Allowed || r.RetryAfter == algo.Never {
		return 0, false
	}
	e.seen(t)
	e.count.add()
	return t, true
}

// callerMicros returns the caller's time of a time argument, or 0 for
// Redis's clock.
func callerMicros(nowArg string) int64 {
	if nowArg == "" {
		return 0
	}
	us, _ := strconv.ParseInt(nowArg, 10, 64)
	return us
}

// timeArg returns the time argument for a call that e could not refuse:
// with a caller's time, the later of nowArg and the latest time e has
// seen, as Redis would have recorded it had the local refusals gone to
// Redis.
func (e *entry) timeArg(nowArg string) string {
	if nowArg == "" || !e.caller {
		return nowArg
	}
	if w := e.w.Load(); w > callerMicros(nowArg) {
		return strconv.FormatInt(w, 10)
	}
	return nowArg
}

// learn keeps what a script's decision under c on key (the caller's key
// userKey, or "" to keep the state out of the hot slots; inKey when
// userKey is part of key, see refusals.put) says about the key: after a
// refusal with a state (st: the script's time, then the state; see STATE
// in lib.lua), the state; after an admission, nothing (the entry old, if
// any, is dropped). reset is the decision's ResetAfter in µs.
func (s *Store) learn(c *compiled, key, userKey string, inKey bool, old *entry, allowed bool, st []int64, caller bool, sent, reset int64) {
	rf := s.refusals
	if !allowed && len(st) > 0 && sent > rf.refunded.Load() {
		// A call sent before the latest refund may have seen the state
		// before it: never kept.
		if e, ok := newEntry(c, st, caller, sent, reset); ok {
			rf.put(key, userKey, inKey, e, sent)
			return
		}
		s.report(fmt.Errorf("redisstore: malformed state %v from the script for %q", st, key))
	}
	if old != nil {
		rf.drop(key)
	}
}

// AllowAll decides every request and charges them all, or none when one is
// denied, in one script call. Requests for the same policy and key decide
// as one request of their summed cost. On Redis Cluster all the requests'
// keys must lie in one hash slot (as every policy of one key does), else
// the call fails with ErrCrossSlot.
//
// A local refusal (see refuseMany) comes before the Redis keys are built:
// of up to maxLocalAll requests, it allocates nothing.
func (s *Store) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if len(reqs) == 0 {
		return sluice.Decision{}, errors.New("redisstore: AllowAll: no requests")
	}
	if out != nil && len(out) != len(reqs) {
		return sluice.Decision{}, fmt.Errorf("redisstore: AllowAll: out has %d decisions for %d requests", len(out), len(reqs))
	}
	us, err := s.micros(now)
	if err != nil {
		return sluice.Decision{}, err
	}
	var csBuf [maxLocalAll]*compiled
	cs := csBuf[:0]
	if len(reqs) > len(csBuf) {
		cs = make([]*compiled, 0, len(reqs))
	}
	conc, settle, penalized := false, false, false
	for i := range reqs {
		c, err := s.check(&reqs[i])
		if err != nil {
			return sluice.Decision{}, err
		}
		cs = append(cs, c)
		conc = conc || c.conc()
		settle = settle || reqs[i].SettleWithin > 0 && !c.conc()
		penalized = penalized || c.penalized
	}
	if penalized {
		if settle {
			return sluice.Decision{}, fmt.Errorf("redisstore: %w: an estimate to settle (SettleWithin) under a policy with a penalty", sluice.ErrNotSupported)
		}
		return s.allowPenalized(ctx, now, us, cs, reqs, out, opAllow)
	}
	var keys []string
	if len(reqs) > 1 && !oneKey(reqs) && s.cluster() {
		// Keys of different slots fail before anything, a local refusal
		// included. The keys of one caller's key share its slot.
		keys = s.keysOf(cs, reqs)
		if err := checkSlots(keys); err != nil {
			return sluice.Decision{}, err
		}
	}
	var esBuf [maxLocalAll]*entry
	var es []*entry
	var sent int64
	if rf := s.refusals; rf != nil && !conc {
		// With a concurrency policy, never: a release can admit, at any
		// moment, what Redis refused.
		es = esBuf[:0]
		if len(reqs) > len(esBuf) {
			es = make([]*entry, 0, len(reqs))
		}
		var d sluice.Decision
		var done bool
		var at int64
		es, d, at, done = s.refuseMany(cs, reqs, out, us, es)
		if done {
			if us < 0 && s.onDecided != nil {
				s.decided(ctx, reqs, at, localOrder)
			}
			return d, nil
		}
		rf.remote.add()
		sent = rf.mono()
	}
	var nowArg string
	if us >= 0 {
		nowArg = strconv.FormatInt(us, 10)
	}
	for _, e := range es {
		if e != nil {
			nowArg = e.timeArg(nowArg)
		}
	}
	if keys == nil {
		keys = s.keysOf(cs, reqs)
	}
	var id, lease string
	script, callKeys := s.many, keys
	if conc || settle {
		// The lease is made before the call: a decision whose lease could
		// not be made takes nothing.
		lid := newLeaseID()
		id = lid.text()
		if lease, err = leaseOf(lid, cs, keys, reqs); err != nil {
			return sluice.Decision{}, err
		}
	}
	args, err := s.manyArgs(cs, reqs, nowArg, now, id)
	if err != nil {
		return sluice.Decision{}, err
	}
	if settle {
		// The estimates are kept under the lease's settlement key, in the
		// slot of the first of their keys.
		script, callKeys = s.settle, append(slices.Clone(keys), settleKey(s.prefix, firstSettled(cs, keys, reqs), id))
		for i := range reqs {
			args = append(args, strconv.FormatInt(settleMicros(cs[i], &reqs[i]), 10))
		}
	}
	vals, order, err := s.evalOrder(ctx, script, callKeys, args, nil)
	if err == nil {
		var d sluice.Decision
		var done bool
		d, done, err = s.parseMany(vals, cs, reqs, out)
		if done && nowArg == "" {
			s.sawMany(ctx, reqs, vals, order)
		}
		if done {
			if err == nil && es != nil {
				// es is nil when the call skipped the local refusals: no
				// refusals kept, or a concurrency policy among the
				// requests (a release may admit it any time), whose send
				// time was not taken either; such a call teaches them
				// nothing.
				s.learnMany(cs, keys, reqs, es, d.Allowed, vals, nowArg != "", sent)
			}
			if err == nil && d.Allowed {
				d.Lease = lease
			}
			return d, err
		}
		s.report(err)
	}
	if ctx.Err() != nil || errors.Is(err, ErrCrossSlot) {
		return sluice.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	return s.degrade(ctx, now, reqs, out, opMany, err)
}

// maxLocalAll is the most requests of an AllowAll whose local refusal
// keeps its work on the stack: at most engine.SmallRepeat, up to which
// engine.SummedCosts allocates nothing.
const maxLocalAll = engine.SmallRepeat

// oneKey reports whether every request of reqs has the same key.
func oneKey(reqs []sluice.Request) bool {
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Key != reqs[0].Key {
			return false
		}
	}
	return true
}

// refuseMany decides an AllowAll on the cached states of its requests, at
// us (the caller's time in µs, or -1 for Redis's clock): when every request
// has one and at least one of them refuses, the whole is refused (done),
// with the decisions the script would make on those states, made on
// Redis's clock at at (see refusals.decidedAt). It appends to
// es the entries found (nil where none), found as Allow finds them: in
// their hot slots, else by their Redis keys built on the stack.
func (s *Store) refuseMany(cs []*compiled, reqs []sluice.Request, out []sluice.Decision, us int64, es []*entry) (_ []*entry, d sluice.Decision, at int64, done bool) {
	rf := s.refusals
	complete := true
	for i := range reqs {
		e := rf.hotGet(cs[i], reqs[i].Key)
		if e == nil {
			e = rf.getFor(cs[i], s.prefix, reqs[i].Key)
		}
		es = append(es, e)
		complete = complete && e != nil
	}
	if !complete {
		return es, d, 0, false
	}
	// One time for every request, as the script has: with a caller's time
	// the latest any of the keys has seen; on Redis's clock the least of
	// the entries' upper bounds of Redis's clock (the keys share one slot,
	// so one Redis), all at one reading of the local clock, which is an
	// upper bound too.
	caller, callerNow := us >= 0, max(us, 0)
	var mono int64
	if !caller {
		mono = rf.mono()
	}
	var tbuf [maxLocalAll]int64
	ts := tbuf[:0]
	if len(reqs) > len(tbuf) {
		ts = make([]int64, 0, len(reqs))
	}
	for _, e := range es {
		var t int64
		var ok bool
		if caller {
			t, ok = rf.at(e, callerNow, true)
		} else {
			t, ok = e.redisClock(mono, rf.maxAge)
		}
		if !ok {
			return es, d, 0, false
		}
		ts, callerNow = append(ts, t), max(callerNow, t)
	}
	t := callerNow
	if !caller {
		t = slices.Min(ts)
	}
	var buf [maxLocalAll]algo.Verdict
	res := buf[:0]
	if len(reqs) > len(buf) {
		res = make([]algo.Verdict, 0, len(reqs))
	}
	res = res[:len(reqs)]
	// The same Redis key: one request of their summed cost.
	var kbuf [maxLocalAll]string
	keys := kbuf[:0]
	for _, e := range es {
		keys = append(keys, e.key)
	}
	var sbuf [maxLocalAll]int64
	sums, _ := engine.SummedCosts(keys, reqs, sbuf[:0])
	refused, never := verdicts(es, reqs, sums, t, res)
	if never || !refused {
		return es, d, 0, false // a cost that can never pass: the script reports it, with its error
	}
	if !caller {
		// Reported at the time that dates the refusal among Redis's
		// decisions (refusals.decidedAt): no later than t, it refuses
		// too, and every request's decision is the one made then.
		for _, e := range es {
			at = max(at, e.redisAt)
		}
		if at = rf.decidedAt(at, t); at < t {
			if refused, _ := verdicts(es, reqs, sums, at, res); !refused {
				at = t
				verdicts(es, reqs, sums, t, res)
			}
		}
		t = at
	}
	var dbuf [maxLocalAll]sluice.Decision
	ds := dbuf[:0]
	if out != nil {
		ds = out[:0]
	} else if len(reqs) > len(dbuf) {
		ds = make([]sluice.Decision, 0, len(reqs))
	}
	counted := false
	for i := range reqs {
		r := &res[i]
		if r.Allowed {
			// Not charged: the state as it stays.
			es[i].decide(r, t, 0, 0)
			r.Delay = 0
		} else if !counted {
			// One decision, counted under the first policy that refused.
			es[i].count.add()
			counted = true
		}
		es[i].seen(t)
		ds = append(ds, decisionOf(reqs[i].Policy, r))
	}
	return es, algo.Combine(ds), at, true
}

// verdicts decides each request of reqs, of summed costs sums (see
// engine.SummedCosts), on its entry of es at t into res, as AllowAll's script
// would before charging anything, and reports whether one refuses and
// whether one can never pass.
func verdicts(es []*entry, reqs []sluice.Request, sums []int64, t int64, res []algo.Verdict) (refused, never bool) {
	for i := range reqs {
		es[i].decide(&res[i], t, sums[i], reqs[i].MaxDelay)
		if reqs[i].Cost == 0 {
			// A check, as many.lua decides it: is a unit left.
			var one algo.Verdict
			es[i].decide(&one, t, sums[i]+1, reqs[i].MaxDelay)
			res[i] = algo.Check(res[i], one)
		}
		if res[i].RetryAfter == algo.Never {
			return refused, true
		}
		refused = refused || !res[i].Allowed
	}
	return refused, false
}

// learnMany keeps what AllowAll's reply vals says about its keys: after a
// refusal, the state of every request (see many.lua); after an admission,
// nothing (the entries es found before are dropped). A state goes to its
// hot slot, as Allow's, when the caller's key is written as itself in the
// Redis key: the entry then holds that part of the Redis key as the
// caller's key, which takes no memory of its own.
func (s *Store) learnMany(cs []*compiled, keys []string, reqs []sluice.Request, es []*entry, allowed bool, vals []int64, caller bool, sent int64) {
	n := len(keys)
	st := vals[min(len(vals), replyHeader+replyWidth*n):]
	if allowed || len(st) == 0 || sent <= s.refusals.refunded.Load() {
		for i, e := range es {
			if e != nil {
				s.refusals.drop(keys[i])
			}
		}
		return
	}
	redisAt := vals[2]
	for i := range n {
		if len(st) == 0 || st[0] < 0 || st[0] > int64(len(st)-1) {
			s.report(s.malformed(vals))
			return
		}
		m := st[0]
		state := append([]int64{redisAt}, st[1:1+m]...)
		st = st[1+m:]
		var old *entry
		if es != nil {
			old = es[i]
		}
		var userKey string
		if text := keyText(keys[i], s.prefix, cs[i]); text == reqs[i].Key {
			userKey = text
		}
		s.learn(cs[i], keys[i], userKey, true, old, m == 0, state, caller, sent, vals[replyHeader+replyWidth*i+3])
	}
}

// oneArgs returns the keys and arguments of the single-request script for
// req, whose compiled policy is c, at now (zero for Redis's clock): args as
// the batch scripts take them, and wire, the packed argument that the
// single-request scripts take (see packOne and Store.eval).
func (s *Store) oneArgs(c *compiled, key string, req *sluice.Request, op, nowArg string, now time.Time, id string) (keys, args, wire []string, err error) {
	p := c.p
	var cal *calendarArg
	if c.cal != nil {
		if cal, err = c.calendar(now); err != nil {
			return nil, nil, nil, err
		}
		p = cal.arg
	}
	b := c.b
	if c.conc() {
		b = id
	}
	keys = []string{key}
	args = []string{nowArg, op, c.l, p, b, strconv.FormatInt(req.Cost, 10), maxDelayArg(req.MaxDelay)}
	wire = []string{packOne(c, cal, req, op, nowArg, id)}
	return keys, args, wire, nil
}

// manyKeys checks reqs and returns their compiled policies and keys.
func (s *Store) manyKeys(reqs []sluice.Request) (cs []*compiled, keys []string, err error) {
	cs = make([]*compiled, len(reqs))
	for i := range reqs {
		if cs[i], err = s.check(&reqs[i]); err != nil {
			return nil, nil, err
		}
	}
	return cs, s.keysOf(cs, reqs), nil
}

// keysOf returns the Redis keys of reqs, whose compiled policies are cs.
func (s *Store) keysOf(cs []*compiled, reqs []sluice.Request) []string {
	keys := make([]string, len(reqs))
	for i, c := range cs {
		keys[i] = c.key(s.prefix, reqs[i].Key)
	}
	return keys
}

// manyArgs returns the arguments of the AllowAll script for reqs, whose
// compiled policies are cs, at now (zero for Redis's clock); id is the
// lease id, the B of every concurrency request.
func (s *Store) manyArgs(cs []*compiled, reqs []sluice.Request, nowArg string, now time.Time, id string) ([]string, error) {
	args := make([]string, 1, 1+6*len(reqs))
	args[0] = nowArg
	for i, c := range cs {
		p, err := c.periodArg(now)
		if err != nil {
			return nil, err
		}
		b := c.b
		if c.conc() {
			b = id
		}
		args = append(args, c.code, c.l, p, b, strconv.FormatInt(reqs[i].Cost, 10), maxDelayArg(reqs[i].MaxDelay))
	}
	return args, nil
}

// parseMany turns AllowAll's reply into decisions, for reqs whose compiled
// policies are cs, and counts the expired holds the script dropped. done
// is false when the reply is malformed (err says how).
func (s *Store) parseMany(vals []int64, cs []*compiled, reqs []sluice.Request, out []sluice.Decision) (d sluice.Decision, done bool, err error) {
	if len(vals) >= replyHeader+replyWidth && vals[0] == 1 && vals[1] >= 1 && vals[1] <= int64(len(reqs)) {
		// A request costs more than its capacity: nothing was charged.
		// The delay fields of the requests before it follow its decision.
		i := vals[1] - 1
		r := &reqs[i]
		before := vals[replyHeader+replyWidth:]
		if int64(len(before)) != i {
			return sluice.Decision{}, false, s.malformed(vals)
		}
		v := slices.Clone(vals[replyHeader : replyHeader+replyWidth])
		s.concDropped(cs[i], v)
		for j, n := range before {
			if cs[j].conc() {
				s.expired.add(cs[j].fp, n)
			}
		}
		d, err := parseDecision(r.Policy, v)
		if err != nil || d.RetryAfter != sluice.Never {
			return sluice.Decision{}, false, s.malformed(vals)
		}
		return d, true, capacityError(r)
	}
	if width := replyHeader + replyWidth*len(reqs); len(vals) != width && (s.refusals == nil || len(vals) < width+1) || vals[0] != 0 {
		return sluice.Decision{}, false, s.malformed(vals)
	}
	var buf [8]sluice.Decision
	ds := buf[:0]
	if out != nil {
		ds = out[:0]
	}
	for i := range reqs {
		v := vals[replyHeader+replyWidth*i : replyHeader+replyWidth*(i+1)]
		s.concDropped(cs[i], v)
		d, err := parseDecision(reqs[i].Policy, v)
		if err != nil {
			return sluice.Decision{}, false, err
		}
		ds = append(ds, d)
	}
	return algo.Combine(ds), true, nil
}

// sawMany takes the time of a decided AllowAll reply on Redis's clock
// (see many.lua): the latest time the store has seen (refusals.latest),
// and Options.OnDecided's, with the call's order.
func (s *Store) sawMany(ctx context.Context, reqs []sluice.Request, vals []int64, order uint64) {
	at := vals[2]
	if s.refusals != nil {
		s.refusals.latest.saw(at)
	}
	if s.onDecided != nil {
		s.decided(ctx, reqs, at, order)
	}
}

// localOrder is the order Options.OnDecided is told of a local refusal:
// after every call of its time, whose replies it may have learnt from.
const localOrder = math.MaxUint32

// decided tells Options.OnDecided that each request of reqs was decided
// at at (µs) with order.
func (s *Store) decided(ctx context.Context, reqs []sluice.Request, at int64, order uint64) {
	t := time.UnixMicro(at)
	for i := range reqs {
		s.onDecided(ctx, reqs[i], t, order)
	}
}

func (s *Store) malformed(vals []int64) error {
	return fmt.Errorf("redisstore: malformed reply %v from the script", vals)
}

// check validates req and returns its compiled policy.
func (s *Store) check(req *sluice.Request) (*compiled, error) {
	if req.Cost < 0 {
		return nil, fmt.Errorf("redisstore: %w: %d, want 0 (a check) or more", sluice.ErrInvalidCost, req.Cost)
	}
	c := s.policies.get(req.Policy)
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

func capacityError(r *sluice.Request) error {
	return fmt.Errorf("redisstore: %w: cost %d, capacity %d (%s)", sluice.ErrCostExceedsCapacity, r.Cost, r.Policy.Capacity(), r.Policy)
}

// timeArg returns the scripts' now argument: empty for Redis's TIME, unless
// the store takes caller time and now is set.
func (s *Store) timeArg(now time.Time) (string, error) {
	us, err := s.micros(now)
	if err != nil || us < 0 {
		return "", err
	}
	return strconv.FormatInt(us, 10), nil
}

// micros is timeArg as a number: the caller's time in µs, or -1 for
// Redis's TIME.
func (s *Store) micros(now time.Time) (int64, error) {
	if !s.callerTime || now.IsZero() {
		return -1, nil
	}
	us := now.UnixMicro()
	if us < 0 || us >= maxTime {
		return 0, fmt.Errorf("redisstore: time %v is outside the range the Redis store accepts (1970 to 2112)", now)
	}
	return us, nil
}

// maxDelayArg returns MaxDelay in whole µs, rounded down, or -1 for none.
// Rounding down decides exactly as the memory store: a delay of d whole µs
// exceeds MaxDelay iff it exceeds floor(MaxDelay/1µs).
func maxDelayArg(d time.Duration) string {
	if d <= 0 {
		return "-1"
	}
	return strconv.FormatInt(min(int64(d/time.Microsecond), maxTime), 10)
}

// cluster reports whether the store is connected to Redis Cluster.
func (s *Store) cluster() bool {
	c := s.client.Load()
	return c != nil && (*c).Mode() == rueidis.ClientModeCluster
}

// checkSlots returns an error wrapping ErrCrossSlot unless all keys share
// one hash slot.
func checkSlots(keys []string) error {
	first := slot(keys[0])
	for i := 1; i < len(keys); i++ {
		if slot(keys[i]) != first {
			return fmt.Errorf("redisstore: %w: %q and %q", ErrCrossSlot, keys[0], keys[i])
		}
	}
	return nil
}

// eval runs script once, under the timeout and the circuit breaker. args
// are the arguments in the form the batch scripts take them (see
// batch.go); wire, when not nil, is what script itself takes instead.
func (s *Store) eval(ctx context.Context, script *rueidis.Lua, keys, args, wire []string) ([]int64, error) {
	vals, _, err := s.evalOrder(ctx, script, keys, args, wire)
	return vals, err
}

// evalOrder is eval that also returns the call's place in the batch that
// ran it (from 1), or 0 for a call that ran alone: the order of its
// decisions among those of the same TIME (Options.OnDecided).
func (s *Store) evalOrder(ctx context.Context, script *rueidis.Lua, keys, args, wire []string) ([]int64, uint64, error) {
	if s.observe == nil {
		return s.call(ctx, script, keys, args, wire)
	}
	start := time.Now()
	vals, order, err := s.call(ctx, script, keys, args, wire)
	c := Call{Slot: -1, Start: start, Duration: time.Since(start), Err: err}
	if name, ok := scriptNames.Load(script); ok {
		c.Script = name.(string)
	}
	if s.cluster() {
		c.Slot = int(slot(keys[0]))
		c.Master = s.breakers.forKey(keys[0]).addr
	}
	s.observe(ctx, c)
	return vals, order, err
}

// call is evalOrder without Options.Observe.
func (s *Store) call(ctx context.Context, script *rueidis.Lua, keys, args, wire []string) ([]int64, uint64, error) {
	br := s.breakers.forKey(keys[0])
	ok, probe := br.allow()
	if !ok {
		return nil, 0, ErrCircuitOpen
	}
	if !s.users.enter() {
		br.abandon(probe)
		return nil, 0, ErrClosed
	}
	defer s.users.exit()
	// The end of the call's timeout (ctx may end it sooner). A call that
	// waits in the batcher's queue waits on a timer and on ctx, without a
	// context of its own (see batcher.exec): a context under ctx would
	// register with ctx and unregister again, which costs more than the
	// timer on every call.
	deadline := time.Now().Add(s.timeout)
	c, err := s.connBy(ctx, deadline)
	if err == nil && len(keys) > 1 && c.Mode() == rueidis.ClientModeCluster {
		// The store may have connected only now, after AllowAll's own
		// check; a command over several slots must never reach the client.
		if err := checkSlots(keys); err != nil {
			br.abandon(probe)
			return nil, 0, err
		}
	}
	var vals []int64
	var order uint64
	switch {
	case err != nil:
	case s.batch != nil && !probe && args[0] == "" && c.Mode() != rueidis.ClientModeCluster && s.batch.takes(script):
		vals, order, err = s.batch.exec(ctx, deadline, c, script, keys, args, wire)
	default:
		cctx, cancel := context.WithDeadline(ctx, deadline)
		vals, err = script.Exec(cctx, c, keys, orArgs(wire, args)).AsIntSlice()
		cancel()
	}
	if c != nil && c.Mode() == rueidis.ClientModeCluster && (err != nil || s.breakers.slots.Load() == nil) {
		// Learn, or learn again after a failure, which master holds
		// which slots, so that each master's failures open only its own
		// breaker.
		s.breakers.readSlots(c, s.timeout, s.users)
	}
	switch {
	case err == nil:
		br.success()
		return vals, order, nil
	case ctx.Err() != nil:
		// The caller gave up: that says nothing about Redis.
		br.abandon(probe)
		return nil, 0, err
	case isDataError(err):
		// Redis answered, but a key holds something the script refuses.
		br.success()
	default:
		if !time.Now().Before(deadline) {
			err = fmt.Errorf("redis did not answer within %v: %w", s.timeout, err)
		}
		br.failure(probe)
	}
	s.report(err)
	return nil, 0, err
}

// isDataError reports whether err is the script's own refusal of a key's
// contents: a problem with one key, not with Redis.
func isDataError(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(re.Error(), "sluice: malformed state")
}

func (s *Store) report(err error) {
	if s.onError != nil && err != nil {
		s.onError(err)
	}
}

// degrade makes the failure policy's decision for a call that Redis could
// not decide.
func (s *Store) degrade(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision, op string, cause error) (sluice.Decision, error) {
	switch s.failure {
	case FailError:
		return sluice.Decision{}, fmt.Errorf("redisstore: %w", cause)
	case FailLocal:
		var d sluice.Decision
		var err error
		switch op {
		case opAllow:
			d, err = s.local.Allow(ctx, now, reqs[0])
		case opPeek:
			d, err = s.local.Peek(ctx, now, reqs[0])
		default:
			d, err = s.local.AllowAll(ctx, now, reqs, out)
			for i := range out {
				out[i].Degraded = true
			}
		}
		d.Degraded = true
		return d, err
	}
	allowed := s.failure == FailAllow
	var retry time.Duration
	if !allowed {
		br := s.breakers.all
		if c := s.policies.get(reqs[0].Policy); c.err == nil {
			br = s.breakers.forKey(c.key(s.prefix, reqs[0].Key))
		}
		retry = max(time.Millisecond, br.retryAfter().Round(time.Millisecond))
	}
	var buf [8]sluice.Decision
	ds := buf[:0]
	for i := range reqs {
		r := &reqs[i]
		if r.Cost > r.Policy.Capacity() {
			return sluice.Decision{Limit: r.Policy.Limit, RetryAfter: sluice.Never, Degraded: true}, capacityError(r)
		}
		ds = append(ds, sluice.Decision{Allowed: allowed, Limit: r.Policy.Limit, RetryAfter: retry, Degraded: true})
	}
	if out != nil {
		copy(out, ds)
	}
	return algo.Combine(ds), nil
}
