package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// errNoUsage is the error of the costs known afterwards, which this store
// does not keep yet.
var errNoUsage = fmt.Errorf("redisstore: %w: debits, refunds and settlements", sluice.ErrNotSupported)

// Debit implements sluice.Store; the Redis store does not debit yet.
func (s *Store) Debit(context.Context, time.Time, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errNoUsage
}

// Refund implements sluice.Store; the Redis store does not refund yet.
func (s *Store) Refund(context.Context, time.Time, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errNoUsage
}

// Reset implements sluice.Store; the Redis store does not reset yet.
func (s *Store) Reset(context.Context, sluice.Request) error {
	return errNoUsage
}
