package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// The store operations, values of the operation label.
const (
	opAllow    = "allow"
	opAllowAll = "allow_all"
	opPeek     = "peek"
)

// Store is a sluice.Store that times every call of the store it wraps
// (sluice_store_duration_seconds) and counts the calls that fail
// (sluice_store_errors_total). Refusals of bad input (an invalid cost) are
// not failures. It is safe for concurrent use as far as the wrapped store
// is.
type Store struct {
	next sluice.Store
	// Observers resolved once, so that a call costs no label lookup.
	allowDur, allowAllDur, peekDur prometheus.Observer
	allowErr, allowAllErr, peekErr prometheus.Counter
}

var _ sluice.Store = (*Store)(nil)

// Store returns next with its calls measured by m. Build it once and give
// the same Store to every front door, so that the series count them all.
func (m *Metrics) Store(next sluice.Store) *Store {
	return &Store{
		next:        next,
		allowDur:    m.storeDuration.WithLabelValues(opAllow),
		allowAllDur: m.storeDuration.WithLabelValues(opAllowAll),
		peekDur:     m.storeDuration.WithLabelValues(opPeek),
		allowErr:    m.storeErrors.WithLabelValues(opAllow),
		allowAllErr: m.storeErrors.WithLabelValues(opAllowAll),
		peekErr:     m.storeErrors.WithLabelValues(opPeek),
	}
}

// Unwrap returns the measured store, for what it offers beyond
// sluice.Store (sluice.Inspector, Ping, Len).
func (s *Store) Unwrap() sluice.Store { return s.next }

// epoch is the base of the store calls' timings: time.Since(epoch) reads
// the monotonic clock alone, where time.Now reads the wall clock as well.
var epoch = time.Now()

func observe(start time.Duration, dur prometheus.Observer, errs prometheus.Counter, err error) {
	dur.Observe((time.Since(epoch) - start).Seconds())
	if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) && !errors.Is(err, sluice.ErrInvalidCost) {
		errs.Inc()
	}
}

// Allow implements sluice.Store.
func (s *Store) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	start := time.Since(epoch)
	d, err := s.next.Allow(ctx, now, req)
	observe(start, s.allowDur, s.allowErr, err)
	return d, err
}

// AllowAll implements sluice.Store.
func (s *Store) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	start := time.Since(epoch)
	d, err := s.next.AllowAll(ctx, now, reqs, out)
	observe(start, s.allowAllDur, s.allowAllErr, err)
	return d, err
}

// Peek implements sluice.Store.
func (s *Store) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	start := time.Since(epoch)
	d, err := s.next.Peek(ctx, now, req)
	observe(start, s.peekDur, s.peekErr, err)
	return d, err
}

// Underlying returns the store that s wraps, through any number of
// decorators that have an Unwrap method, or s itself.
func Underlying(s sluice.Store) sluice.Store {
	for {
		u, ok := s.(interface{ Unwrap() sluice.Store })
		if !ok {
			return s
		}
		s = u.Unwrap()
	}
}

// Release implements sluice.Store.
func (s *Store) Release(ctx context.Context, now time.Time, lease string, usage []int64) (bool, error) {
	return s.next.Release(ctx, now, lease, usage)
}

// Debit implements sluice.Store.
func (s *Store) Debit(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.next.Debit(ctx, now, req)
}

// Refund implements sluice.Store.
func (s *Store) Refund(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.next.Refund(ctx, now, req)
}

// Reset implements sluice.Store.
func (s *Store) Reset(ctx context.Context, req sluice.Request) error {
	return s.next.Reset(ctx, req)
}

// Unblock implements sluice.Store.
func (s *Store) Unblock(ctx context.Context, now time.Time, req sluice.Request) (bool, error) {
	return s.next.Unblock(ctx, now, req)
}

// Renew implements sluice.Store.
func (s *Store) Renew(ctx context.Context, now time.Time, lease string) (time.Duration, error) {
	return s.next.Renew(ctx, now, lease)
}
