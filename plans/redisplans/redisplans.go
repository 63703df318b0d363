// Package redisplans is a plans.Table kept in a Redis hash, shared by
// every instance of a service: the hash maps client keys to plan names,
// and a change (HSET, HDEL) applies everywhere once the instances' caches
// expire.
//
// Each Plan is one HGET. Put a plans.Cache in front of the table so that a
// client's plan is fetched at most once per TTL:
//
//	t := redisplans.New(client, "sluice:plans", 50*time.Millisecond)
//	table := plans.NewCache(t, plans.CacheOptions{TTL: 5 * time.Second})
package redisplans

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/plans"
)

// DefaultTimeout bounds each HGET when New is given no timeout.
const DefaultTimeout = 50 * time.Millisecond

// Table is a plans.Table in one Redis hash. It is safe for concurrent use.
type Table struct {
	client  rueidis.Client
	hash    string
	timeout time.Duration
}

var _ plans.Table = (*Table)(nil)

// New returns the table in the hash at key hash, read with client (which
// the caller keeps and closes). timeout bounds each lookup; 0 means
// DefaultTimeout.
func New(client rueidis.Client, hash string, timeout time.Duration) *Table {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Table{client: client, hash: hash, timeout: timeout}
}

// Hash returns the key of the hash.
func (t *Table) Hash() string { return t.hash }

// Plan returns the plan of key: the hash's field key. A missing field is
// ok false; an error means Redis did not answer in time or answered
// something else than a string.
func (t *Table) Plan(ctx context.Context, key string) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	v, err := t.client.Do(ctx, t.client.B().Hget().Key(t.hash).Field(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("redisplans: HGET %s: %w", t.hash, err)
	}
	return v, v != "", nil
}
