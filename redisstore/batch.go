package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// DefaultMaxBatch is the default of Options.MaxBatch.
const DefaultMaxBatch = 64

// batchInflight is how many script calls a store keeps in flight at once
// while it batches: few, so that the calls arriving meanwhile gather into
// large batches (Redis's work per decision falls as a batch grows), and
// enough that Redis has the next call waiting while it runs one. When a
// whole batch (MaxBatch requests) is waiting, it goes at once, up to
// batchInflightMax calls in flight, so that a burst or a slow link is not
// held to two calls at a time. Measured in docs/BENCHMARKS.md ("Redis
// store").
const (
	batchInflight    = 2
	batchInflightMax = 8
)

// batcher gathers concurrent calls into one script call. A call goes to
// Redis at once, alone and with its own script, while fewer than
// batchInflight calls are in flight; otherwise it waits in the queue, and
// when a call in flight ends (or when a whole batch is waiting) the queued
// calls go together, in the order they came, as one call of batch.lua (or
// batch_one.lua), which decides each as its own script would. A lone
// caller, or two at a time, never waits for a batch; under load, Redis
// spends one command, one script run and one TIME on a whole batch instead
// of on each call.
//
// Only calls on Redis's clock go through the batcher (a batch has one
// time), and never on Redis Cluster, where the keys of one script call
// must share a hash slot.
type batcher struct {
	script *rueidis.Lua                      // batch.lua, for any calls
	one    [len(algorithmFiles)]*rueidis.Lua // batch.lua for single requests of one algorithm
	single [len(algorithmFiles)]*rueidis.Lua // the store's single-request scripts, to tell calls apart
	many   *rueidis.Lua                      // the store's AllowAll script
	max    int                               // most requests (keys) in one batch

	mu       sync.Mutex
	inflight int
	queue    []*waiter
	queued   int // requests (keys) in queue

	users *users // the store's users of the client

	sent atomic.Int64 // batches of two calls or more, for tests
	peak int          // the most calls in flight at once, for tests
}

// waiter is a call waiting in the queue.
type waiter struct {
	script   *rueidis.Lua
	keys     []string
	args     []string // as the batch scripts take them
	wire     []string // when not nil, what script takes alone
	deadline time.Time

	vals []int64
	pos  uint64 // the call's place in its batch, from 1, or 0 alone
	err  error
	done chan struct{}
}

// newBatcher returns a batcher of at most max requests a batch, given the
// sources of the batch scripts, the store's single-request and AllowAll
// scripts and its count of the client's users.
func newBatcher(max int, batch string, batchOne [len(algorithmFiles)]string, single [len(algorithmFiles)]*rueidis.Lua, many *rueidis.Lua, u *users) *batcher {
	b := &batcher{script: named(rueidis.NewLuaScript(batch), "batch"), single: single, many: many, max: max, users: u}
	for a, src := range batchOne {
		b.one[a] = named(rueidis.NewLuaScript(src), "batch_one")
	}
	return b
}

// exec runs script on keys and args (wire, when not nil, in place of args
// when script runs alone; see Store.eval), at once or in a batch, and
// returns its reply and its place in the batch (from 1; 0 alone: see
// Options.OnDecided). ctx and
// deadline, the end of the call's timeout, bound the wait (at deadline,
// with context.DeadlineExceeded); a call already sent when they end may
// still be decided by Redis, as any call whose answer comes too late.
func (b *batcher) exec(ctx context.Context, deadline time.Time, c rueidis.Client, script *rueidis.Lua, keys, args, wire []string) ([]int64, uint64, error) {
	b.mu.Lock()
	if b.inflight < batchInflight {
		b.inflight++
		b.peak = max(b.peak, b.inflight)
		b.mu.Unlock()
		cctx, cancel := context.WithDeadline(ctx, deadline)
		vals, err := script.Exec(cctx, c, keys, orArgs(wire, args)).AsIntSlice()
		cancel()
		b.release(c)
		return vals, 0, err
	}
	w := &waiter{script: script, keys: keys, args: args, wire: wire, deadline: deadline, done: make(chan struct{})}
	ctxDeadline, ok := ctx.Deadline()
	own := !ok || deadline.Before(ctxDeadline) // whether the timeout ends the wait before ctx does
	if !own {
		w.deadline = ctxDeadline
	}
	b.queue = append(b.queue, w)
	b.queued += len(keys)
	var full []*waiter
	if b.queued >= b.max && b.inflight < batchInflightMax {
		// A whole batch is waiting: send it now rather than after a call
		// in flight ends.
		b.inflight++
		b.peak = max(b.peak, b.inflight)
		full = b.next()
	}
	b.mu.Unlock()
	if full != nil {
		b.spawn(c, full)
	}
	var timeout <-chan time.Time
	if own {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		timeout = timer.C
	}
	var err error
	select {
	case <-w.done:
		return w.vals, w.pos, w.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = context.DeadlineExceeded
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, w); i >= 0 {
		// Not sent: nothing is charged.
		b.queue = slices.Delete(b.queue, i, i+1)
		b.queued -= len(w.keys)
	}
	b.mu.Unlock()
	return nil, 0, err
}

// release ends a call in flight: when calls are queued, a new goroutine
// takes its place and sends them, batch after batch, until none is left
// (or until others in flight can take them; see take).
func (b *batcher) release(c rueidis.Client) {
	if batch := b.take(); batch != nil {
		b.spawn(c, batch)
	}
}

// take returns the next batch, or nil (and one call fewer in flight) when
// the queue is empty, or when more than batchInflight calls are in flight
// and less than a whole batch waits (the others will take it). The caller
// holds the place in flight of a call that has just ended.
func (b *batcher) take() []*waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 || (b.inflight > batchInflight && b.queued < b.max) {
		b.inflight--
		return nil
	}
	return b.next()
}

// next takes the next batch, up to max requests, from the non-empty queue.
// b.mu is held.
func (b *batcher) next() []*waiter {
	n, keys := 1, len(b.queue[0].keys)
	for n < len(b.queue) && keys+len(b.queue[n].keys) <= b.max {
		keys += len(b.queue[n].keys)
		n++
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.queued -= keys
	return batch
}

// spawn starts a goroutine that sends batch, and then the batches after
// it, holding a place in flight. Once the store is closing nothing more is
// sent: batch and every queued call fail with ErrClosed at once, and the
// place in flight is given up.
func (b *batcher) spawn(c rueidis.Client, batch []*waiter) {
	if !b.users.enter() {
		b.mu.Lock()
		queued := b.queue
		b.queue, b.queued = nil, 0
		b.inflight--
		b.mu.Unlock()
		for _, w := range slices.Concat(batch, queued) {
			w.err = ErrClosed
			close(w.done)
		}
		return
	}
	go func() {
		defer b.users.exit()
		b.drain(c, batch)
	}()
}

func (b *batcher) drain(c rueidis.Client, batch []*waiter) {
	for ; batch != nil; batch = b.take() {
		b.send(c, batch)
	}
}

// send runs one batch and hands each waiter its answer. Its deadline is the
// latest of the waiters': each waiter stops waiting at its own.
func (b *batcher) send(c rueidis.Client, batch []*waiter) {
	var deadline time.Time
	for _, w := range batch {
		if w.deadline.After(deadline) {
			deadline = w.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if len(batch) == 1 {
		w := batch[0]
		w.vals, w.err = w.script.Exec(ctx, c, w.keys, orArgs(w.wire, w.args)).AsIntSlice()
		close(w.done)
		return
	}
	b.sent.Add(1)
	keys, args := make([]string, 0, len(batch)), make([]string, 0, 2+6*len(batch))
	// The time: "" (Redis's) in every call the store batches; tests batch
	// calls of one caller time.
	args = append(args, batch[0].args[0])
	script := b.script
	if a := b.algorithm(batch[0].script); a >= 0 && sluice.Algorithm(a) != sluice.ConcurrencyAlgorithm && b.sameScript(batch) {
		// Single requests of one algorithm go to that algorithm's batch
		// script, which takes fewer arguments (batch_one.lua). A
		// concurrency request's B is its lease id, one per call, which
		// batch_one.lua does not take: those go to batch.lua.
		script = b.one[a]
		args = appendOneArgs(args, batch, sluice.Algorithm(a))
		for _, w := range batch {
			keys = append(keys, w.keys...)
		}
	} else {
		for _, w := range batch {
			keys = append(keys, w.keys...)
			if b.algorithm(w.script) < 0 {
				// The AllowAll script; args: now, then six fields per request.
				args = append(args, opMany, strconv.Itoa(len(w.keys)))
				args = append(args, w.args[1:]...)
			} else {
				// The single-request script; args: now, the operation, then
				// the request's fields but its algorithm, which batch.lua
				// takes before them.
				args = append(args, w.args[1], "1", algoCodes[b.algorithm(w.script)])
				args = append(args, w.args[2:]...)
			}
		}
	}
	msgs, err := script.Exec(ctx, c, keys, args).ToArray()
	if err == nil && len(msgs) != len(batch) {
		err = errMalformedBatch(len(msgs), len(batch))
	}
	for i, w := range batch {
		if err != nil {
			w.err = err
		} else {
			w.vals, w.err = msgs[i].AsIntSlice()
			w.pos = uint64(i + 1)
		}
		close(w.done)
	}
}

// sameScript reports whether every call of batch runs the same script.
func (b *batcher) sameScript(batch []*waiter) bool {
	for _, w := range batch[1:] {
		if w.script != batch[0].script {
			return false
		}
	}
	return true
}

// appendOneArgs appends batch_one.lua's arguments after the time for batch,
// whose calls are single requests of algorithm a, each with the
// single-request script's arguments: now, the operation, L, P, B, cost and
// maxdelay. Each distinct operation and policy (op, L, P, B) is sent once.
func appendOneArgs(args []string, batch []*waiter, a sluice.Algorithm) []string {
	// ref[i] is the index in batch of the first call with call i's
	// operation and policy.
	ref := make([]int, len(batch))
	n := 0
	for i, w := range batch {
		ref[i] = i
		for j := range i {
			if ref[j] == j && slices.Equal(batch[j].args[1:5], w.args[1:5]) {
				ref[i] = j
				break
			}
		}
		if ref[i] == i {
			n++
		}
	}
	args = append(args, strconv.Itoa(n))
	id := make([]string, len(batch))
	n = 0
	for i, w := range batch {
		if ref[i] == i {
			id[i] = strconv.Itoa(n) // no allocation below 100
			args = append(args, id[i], w.args[2], w.args[3], w.args[4], w.args[1])
			n++
		}
	}
	for i, w := range batch {
		args = append(args, id[ref[i]], w.args[5])
		if a == sluice.LeakyBucketAlgorithm {
			args = append(args, w.args[6])
		}
	}
	return args
}

// takes reports whether calls of script can be batched: the batch scripts
// decide the store's single-request and AllowAll calls only (not, say,
// Inspect's).
func (b *batcher) takes(script *rueidis.Lua) bool {
	return script == b.many || b.algorithm(script) >= 0
}

// algorithm returns the algorithm whose single-request script is script,
// or -1.
func (b *batcher) algorithm(script *rueidis.Lua) int {
	for a, s := range b.single {
		if s == script {
			return a
		}
	}
	return -1
}

// orArgs returns wire, or args when wire is nil.
func orArgs(wire, args []string) []string {
	if wire != nil {
		return wire
	}
	return args
}

func errMalformedBatch(got, want int) error {
	return fmt.Errorf("redisstore: malformed reply from the batch script: %d replies for %d calls", got, want)
}
