package engine

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Overrides are per-key policies set while the service runs (the admin
// API's /v1/overrides); internal/service/overrides.Store is one.
type Overrides interface {
	// Any reports whether an override may be in force, so that a
	// service without any skips the lookup.
	Any() bool
	// Lookup returns the policy of the override of (limit, key) in force
	// at now, and false when there is none.
	Lookup(limit, key string, now time.Time) (sluice.Policy, bool)
}

// Resolver answers, for every front door of sluice serve, which policy
// applies to a key under a limit. The order is the same at every door:
//
//  1. an override in force for (the limit's name, the key), set through
//     the admin API;
//  2. else, when the request is decided under the client's plan, the
//     policy of the plan's limit: a plan names limits of the
//     configuration, and the door (package plans) has chosen the plan's
//     limits before asking, so that an override of a plan's limit is
//     found under that limit's name;
//  3. else the limit's configured policy.
//
// A nil *Resolver gives every limit its own policy. A Resolver is safe for
// concurrent use.
type Resolver struct {
	overrides Overrides
	now       func() time.Time
}

// NewResolver returns a Resolver over the overrides ov (nil: none), which
// decides whether an override is in force by now (nil: time.Now).
func NewResolver(ov Overrides, now func() time.Time) *Resolver {
	if now == nil {
		now = time.Now
	}
	return &Resolver{overrides: ov, now: now}
}

// Active reports whether an override may be in force, so that a door can
// skip building the keys of its lookups when none is. A nil Resolver is
// never active.
func (r *Resolver) Active() bool {
	return r != nil && r.overrides != nil && r.overrides.Any()
}

// Policy returns the policy that applies to key under limit, the policy
// the configuration (or the request's plan) gives the limit, and whether
// an override replaced it. An override's policy has the limit's name, and
// the limit's penalty when it has none of its own.
func (r *Resolver) Policy(limit sluice.Policy, key string) (p sluice.Policy, overridden bool) {
	if !r.Active() {
		return limit, false
	}
	if p, ok := r.overrides.Lookup(limit.Name, key, r.now()); ok {
		if p.Penalty.IsZero() && p.Algorithm != sluice.ConcurrencyAlgorithm {
			// An override changes the rate, not the protection.
			p.Penalty = limit.Penalty
		}
		return p, true
	}
	return limit, false
}
