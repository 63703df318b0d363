package redisstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// FailurePolicy says what the store decides when Redis cannot: when a call
// fails, times out, or is not even tried because the circuit breaker is
// open. Every decision it makes has Decision.Degraded set.
type FailurePolicy uint8

// The failure policies.
const (
	// FailAllow admits every request (fails open): Redis being down never
	// blocks traffic, and nothing is limited until it returns.
	FailAllow FailurePolicy = iota
	// FailDeny denies every request (fails closed), with a RetryAfter of
	// the time until the store tries Redis again.
	FailDeny
	// FailLocal decides with Options.Local, an in-process store, so each
	// instance enforces the limits on its own (N instances admit up to N
	// times the limit) until Redis answers again. Its state starts empty
	// and is not copied back to Redis.
	FailLocal
	// FailError makes no decision: the call returns the error, wrapped.
	FailError
	numFailurePolicies
)

var failureNames = [numFailurePolicies]string{"allow", "deny", "local", "error"}

// String returns the policy's name: allow, deny, local or error.
func (f FailurePolicy) String() string {
	if f < numFailurePolicies {
		return failureNames[f]
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(f))
}

// ParseFailurePolicy returns the failure policy with the given name.
func ParseFailurePolicy(name string) (FailurePolicy, error) {
	for i, n := range failureNames {
		if n == name {
			return FailurePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown failure policy %q (want allow, deny, local or error)", name)
}

// MarshalText implements encoding.TextMarshaler.
func (f FailurePolicy) MarshalText() ([]byte, error) {
	if f >= numFailurePolicies {
		return nil, fmt.Errorf("unknown failure policy %d", uint8(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (f *FailurePolicy) UnmarshalText(b []byte) error {
	v, err := ParseFailurePolicy(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// BreakerState is the state of the store's circuit breaker.
type BreakerState int32

// The breaker's states.
const (
	// BreakerClosed: calls go to Redis.
	BreakerClosed BreakerState = iota
	// BreakerOpen: Redis failed Options.BreakerThreshold calls in a row;
	// calls do not go to Redis, and the failure policy decides at once,
	// until Options.BreakerCooldown has passed.
	BreakerOpen
	// BreakerHalfOpen: one call, the probe, is trying Redis; the others are
	// decided by the failure policy. The probe's success closes the
	// breaker, its failure opens it for another cooldown.
	BreakerHalfOpen
)

// String returns closed, open or half-open.
func (b BreakerState) String() string {
	switch b {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(b))
}

// Recovery is Redis answering again after calls failed, as
// Options.OnRecover reports it.
type Recovery struct {
	// Failures is how many calls to Redis failed since it last answered,
	// the probes of an open breaker included (not the calls the open
	// breaker kept from Redis).
	Failures int64
	// Down is the time from the first of those failures to the answer.
	Down time.Duration
	// Addr is the Redis Cluster master that answered again; empty when the
	// store's one breaker covers the call (a single Redis, Sentinel's
	// master, or a cluster whose slot map is not read yet).
	Addr string
}

// breaker is a consecutive-failure circuit breaker. Its hot path (closed,
// no failures) is three atomic loads.
type breaker struct {
	threshold int64
	cooldown  time.Duration
	onChange  func(from, to BreakerState)
	// onRecover, if set, is told of each answer after failures; addr is
	// the master the breaker serves, for it.
	onRecover func(Recovery)
	addr      string

	base  time.Time // origin of the monotonic times below
	state atomic.Int32
	fails atomic.Int64
	until atomic.Int64 // when an open breaker lets a probe through, since base

	mu sync.Mutex // serialises transitions, so onChange sees them in order

	// The failures since Redis last answered, probes included, and when
	// the first of them was (since base); written under runMu, read
	// without it on the hot path.
	runMu    sync.Mutex
	run      atomic.Int64
	runSince int64
}

func newBreaker(threshold int, cooldown time.Duration, onChange func(from, to BreakerState)) *breaker {
	return &breaker{threshold: int64(threshold), cooldown: cooldown, onChange: onChange, base: time.Now()}
}

func (b *breaker) now() int64 { return int64(time.Since(b.base)) }

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe.
func (b *breaker) allow() (ok, probe bool) {
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if b.now() >= b.until.Load() && b.transition(BreakerOpen, BreakerHalfOpen) {
			return true, true
		}
	}
	return false, false
}

// success records that Redis answered: the breaker closes, and
// onRecover hears of it when calls had failed.
func (b *breaker) success() {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	var r Recovery
	if b.run.Load() != 0 {
		b.runMu.Lock()
		r.Failures, r.Down = b.run.Swap(0), time.Duration(b.now()-b.runSince)
		b.runMu.Unlock()
	}
	if st := BreakerState(b.state.Load()); st != BreakerClosed {
		b.transition(st, BreakerClosed)
	}
	if r.Failures != 0 && b.onRecover != nil {
		r.Addr = b.addr
		b.onRecover(r)
	}
}

// failure records that a call to Redis failed.
func (b *breaker) failure(probe bool) {
	b.runMu.Lock()
	if b.run.Add(1) == 1 {
		b.runSince = b.now()
	}
	b.runMu.Unlock()
	if probe {
		b.until.Store(b.now() + int64(b.cooldown))
		b.transition(BreakerHalfOpen, BreakerOpen)
		return
	}
	if b.fails.Add(1) >= b.threshold && BreakerState(b.state.Load()) == BreakerClosed {
		b.until.Store(b.now() + int64(b.cooldown))
		b.transition(BreakerClosed, BreakerOpen)
	}
}

// abandon records that a call ended without telling whether Redis works
// (its caller gave up): a probe hands its turn to the next call.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.until.Store(b.now())
		b.transition(BreakerHalfOpen, BreakerOpen)
	}
}

// transition moves the breaker from one state to another if it is still in
// the first, and reports whether it did.
func (b *breaker) transition(from, to BreakerState) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.CompareAndSwap(int32(from), int32(to)) {
		return false
	}
	if to == BreakerClosed {
		b.fails.Store(0)
	}
	if b.onChange != nil {
		b.onChange(from, to)
	}
	return true
}

// retryAfter returns how long until the store tries Redis again: the rest
// of the cooldown when the breaker is open, otherwise the whole cooldown.
func (b *breaker) retryAfter() time.Duration {
	if BreakerState(b.state.Load()) == BreakerOpen {
		if d := time.Duration(b.until.Load() - b.now()); d > 0 {
			return d
		}
	}
	return b.cooldown
}
