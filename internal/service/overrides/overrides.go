// Package overrides keeps the runtime overrides of the Sluice service: a
// different policy for one key of one limit (a customer whose limit
// support raised today), set and removed through the admin API while the
// service runs, optionally until an expiry time.
//
// Two stores implement Store. Memory keeps the overrides of one process:
// each instance of the service has its own. Redis keeps them in one Redis
// hash shared by every instance, each of which holds a copy that it
// refreshes when a version counter changes (polled every 500 ms by
// default), so a change applies everywhere within a second.
//
// Lookup, on the path of every decision, reads the local copy only: it
// never waits for Redis.
package overrides

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// MaxOverrides is the most overrides a store holds; a Put of a new one
// beyond it fails with ErrFull.
const MaxOverrides = 100_000

// ErrFull is returned by Put when the store holds MaxOverrides overrides.
var ErrFull = fmt.Errorf("overrides: the store holds %d overrides, the most it may; remove some first", MaxOverrides)

// Override replaces the policy of one limit for one key.
type Override struct {
	// Limit names the limit of the configuration that is overridden.
	Limit string
	// Key is the key whose policy is replaced.
	Key string
	// Policy is the policy that applies to Key instead of the limit's;
	// its Name is Limit.
	Policy sluice.Policy
	// ExpiresAt is when the override stops applying; zero means never.
	ExpiresAt time.Time
	// SetBy says who set it (the admin API's caller) and SetAt when.
	SetBy string
	SetAt time.Time
}

// Expired reports whether the override no longer applies at now.
func (o Override) Expired(now time.Time) bool {
	return !o.ExpiresAt.IsZero() && !now.Before(o.ExpiresAt)
}

// Store keeps overrides. Implementations are safe for concurrent use.
type Store interface {
	// Any reports whether the store may hold an override: when false,
	// Lookup finds none, and callers may skip it (and reading the clock).
	Any() bool
	// Lookup returns the policy that overrides limit for key at now, and
	// false when none does. It is called for every decision and must be
	// fast: it never does I/O.
	Lookup(limit, key string, now time.Time) (sluice.Policy, bool)
	// Get returns the override of limit for key, if one is in force at
	// now.
	Get(ctx context.Context, limit, key string, now time.Time) (Override, bool, error)
	// List returns the overrides in force at now, of one limit or, when
	// limit is empty, of all, sorted by limit and key.
	List(ctx context.Context, limit string, now time.Time) ([]Override, error)
	// Put sets an override, replacing the one of the same limit and key,
	// which it returns (nil when there was none in force).
	Put(ctx context.Context, o Override, now time.Time) (before *Override, err error)
	// Delete removes the override of limit for key and returns it, or nil
	// when there was none in force.
	Delete(ctx context.Context, limit, key string, now time.Time) (before *Override, err error)
	// Shared reports whether the overrides are shared by every instance
	// of the service (Redis) rather than kept by this one (Memory).
	Shared() bool
}

// table is an immutable set of overrides by limit and key.
type table map[string]map[string]Override

func (t table) lookup(limit, key string, now time.Time) (sluice.Policy, bool) {
	o, ok := t[limit][key]
	if !ok || o.Expired(now) {
		return sluice.Policy{}, false
	}
	return o.Policy, true
}

func (t table) list(limit string, now time.Time) []Override {
	var out []Override
	for l, byKey := range t {
		if limit != "" && l != limit {
			continue
		}
		for _, o := range byKey {
			if !o.Expired(now) {
				out = append(out, o)
			}
		}
	}
	sortOverrides(out)
	return out
}

func sortOverrides(os []Override) {
	slices.SortFunc(os, func(a, b Override) int {
		return cmp.Or(cmp.Compare(a.Limit, b.Limit), cmp.Compare(a.Key, b.Key))
	})
}

// check validates an override before it is stored.
func check(o Override) error {
	switch {
	case o.Limit == "":
		return errors.New("overrides: the limit name is empty")
	case o.Key == "":
		return errors.New("overrides: the key is empty")
	case o.Policy.Name != o.Limit:
		return fmt.Errorf("overrides: the policy is named %q, not %q", o.Policy.Name, o.Limit)
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	return nil
}

// Memory is a Store in this process only. The zero Memory is not ready:
// use NewMemory.
type Memory struct {
	mu sync.RWMutex
	t  table
	n  int
	// any is the number of overrides held, expired or not, so that Lookup
	// costs one atomic load while there are none.
	any atomic.Int64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store.
func NewMemory() *Memory {
	return &Memory{t: make(table)}
}

// Shared reports false: a memory store belongs to one instance.
func (m *Memory) Shared() bool { return false }

// Any implements Store.
func (m *Memory) Any() bool { return m.any.Load() != 0 }

// Lookup implements Store.
func (m *Memory) Lookup(limit, key string, now time.Time) (sluice.Policy, bool) {
	if m.any.Load() == 0 {
		return sluice.Policy{}, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.t.lookup(limit, key, now)
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, limit, key string, now time.Time) (Override, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	o, ok := m.t[limit][key]
	if !ok || o.Expired(now) {
		return Override{}, false, nil
	}
	return o, true, nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, limit string, now time.Time) ([]Override, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.t.list(limit, now), nil
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, o Override, now time.Time) (*Override, error) {
	if err := check(o); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.t[o.Limit][o.Key]
	if !had && m.n >= MaxOverrides {
		m.sweep(now)
		if m.n >= MaxOverrides {
			return nil, ErrFull
		}
	}
	byKey := m.t[o.Limit]
	if byKey == nil {
		byKey = make(map[string]Override)
		m.t[o.Limit] = byKey
	}
	byKey[o.Key] = o
	if !had {
		m.n++
		m.any.Store(int64(m.n))
	}
	if !had || old.Expired(now) {
		return nil, nil
	}
	return &old, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, limit, key string, now time.Time) (*Override, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.t[limit][key]
	if !had {
		return nil, nil
	}
	m.remove(limit, key)
	if old.Expired(now) {
		return nil, nil
	}
	return &old, nil
}

// remove deletes one override; it requires m.mu.
func (m *Memory) remove(limit, key string) {
	delete(m.t[limit], key)
	if len(m.t[limit]) == 0 {
		delete(m.t, limit)
	}
	m.n--
	m.any.Store(int64(m.n))
}

// sweep drops the expired overrides; it requires m.mu.
func (m *Memory) sweep(now time.Time) {
	for l, byKey := range m.t {
		for k, o := range byKey {
			if o.Expired(now) {
				m.remove(l, k)
			}
		}
	}
}
