// Package plans gives each client the rate limits of its plan: an API that
// sells a free plan of 100 requests per hour and a pro plan of 10,000
// names both, and picks one per request from who the client is.
//
// A Plan is a name and a list of policies (none: unlimited). A Set holds
// the plans and the default plan that clients get when nothing names a
// known plan for them. A Picker names the plan of a request: from a header
// set by an authenticating gateway (FromHeader), or by looking the client's
// key up in a Table (FromTable), such as a File of key,plan lines that is
// re-read when it changes, or a Redis hash (package
// github.com/sluicehq/sluice/plans/redisplans) wrapped in a Cache.
//
// Set.Policy gives the i-th policy of a request's plan. The net/http
// middleware applies a Set with httplimit.PlanLimits, which chooses each
// request's policies with it, so that the RateLimit-Policy field of a
// response names the policies actually applied:
//
//	set, _ := plans.NewSet("free",
//		plans.Plan{Name: "free", Policies: []sluice.Policy{sluice.SlidingWindow(100, time.Hour).Named("free-hourly")}},
//		plans.Plan{Name: "pro", Policies: []sluice.Policy{sluice.SlidingWindow(10000, time.Hour).Named("pro-hourly")}},
//		plans.Plan{Name: "internal"}, // unlimited
//	)
//	m, _ := httplimit.New(store, httplimit.PlanLimits(set, httplimit.Header("X-API-Key"), plans.FromTable(table, nil)), nil)
//
// The package knows requests only as *http.Request; it imports no
// middleware.
package plans

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"

	"github.com/sluicehq/sluice"
)

// Plan is a named set of policies that apply together, all or nothing, to
// every client on the plan. A plan without policies is unlimited.
type Plan struct {
	Name     string
	Policies []sluice.Policy
}

// Unlimited reports whether the plan has no policies.
func (p Plan) Unlimited() bool { return len(p.Policies) == 0 }

// Set is a fixed collection of plans with a default. It is immutable and
// safe for concurrent use.
type Set struct {
	byName map[string]Plan
	names  []string
	def    Plan
	slots  int // the most policies of any plan
}

// NewSet returns the set of plans, whose default (for clients that no
// known plan is named for) is the plan named def. Plan names must be
// distinct and non-empty; every policy must be valid and named, and the
// names of one plan's policies distinct (they label the RateLimit-Policy
// field and keep the plans' state apart).
func NewSet(def string, plans ...Plan) (*Set, error) {
	s := &Set{byName: make(map[string]Plan, len(plans))}
	for i, p := range plans {
		if p.Name == "" {
			return nil, fmt.Errorf("plans: plan %d has no name", i+1)
		}
		if _, dup := s.byName[p.Name]; dup {
			return nil, fmt.Errorf("plans: plan %q is defined twice", p.Name)
		}
		seen := make(map[string]bool, len(p.Policies))
		for j, pol := range p.Policies {
			if pol.Name == "" {
				return nil, fmt.Errorf("plans: plan %q: policy %d has no name", p.Name, j+1)
			}
			if seen[pol.Name] {
				return nil, fmt.Errorf("plans: plan %q: two policies are named %q", p.Name, pol.Name)
			}
			seen[pol.Name] = true
			if err := pol.Validate(); err != nil {
				return nil, fmt.Errorf("plans: plan %q: %w", p.Name, err)
			}
		}
		p.Policies = append([]sluice.Policy(nil), p.Policies...)
		s.byName[p.Name] = p
		s.names = append(s.names, p.Name)
		s.slots = max(s.slots, len(p.Policies))
	}
	d, ok := s.byName[def]
	if !ok {
		return nil, fmt.Errorf("plans: the default plan %q is not defined", def)
	}
	s.def = d
	return s, nil
}

// Plan returns the plan with the given name, and false when there is none.
func (s *Set) Plan(name string) (Plan, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// Default returns the default plan.
func (s *Set) Default() Plan { return s.def }

// Names returns the plan names in the order they were given.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Resolve returns the plan named name when ok is set and such a plan
// exists, and the default plan otherwise.
func (s *Set) Resolve(name string, ok bool) Plan {
	if ok {
		if p, found := s.byName[name]; found {
			return p
		}
	}
	return s.def
}

// Picker names the plan of a request whose client key is key; ok false
// means no plan is named, and the default applies.
type Picker func(r *http.Request, key string) (plan string, ok bool)

// FromHeader returns a Picker that reads the plan's name from a request
// header. Use it only behind a gateway that sets the header after
// authenticating the client and strips it from what clients send: a client
// that can write the header chooses its own plan.
// A request without the header (or with an empty value) names no plan.
func FromHeader(name string) Picker {
	canon := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request, _ string) (string, bool) {
		vs := r.Header[canon]
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
}

// FromKey returns a Picker that reads the plan's name with a key function,
// such as an httplimit.KeyFunc (httplimit.ParseKey's sources:
// "header:X-Plan", "query:plan", ...).
func FromKey(fn func(r *http.Request) (string, bool)) Picker {
	return func(r *http.Request, _ string) (string, bool) { return fn(r) }
}

// Table maps client keys to plan names: a File, a Redis hash, a database.
// Plan returns ok false for a key the table does not hold, and an error
// only when the table could not be read.
type Table interface {
	Plan(ctx context.Context, key string) (plan string, ok bool, err error)
}

// FromTable returns a Picker that looks the client's key up in t, with the
// request's context. When t fails, the request gets the default plan
// (a Cache in front of t keeps serving the plans it has seen instead), and
// onError, if not nil, receives the error.
func FromTable(t Table, onError func(error)) Picker {
	return func(r *http.Request, key string) (string, bool) {
		return Lookup(r.Context(), t, key, onError)
	}
}

// Lookup looks key up in t as FromTable's Picker does: when t fails, no
// plan is named (the default applies), unless the error is a StaleError
// (a Cache serving the plan it saw last), and onError, if not nil,
// receives the error.
func Lookup(ctx context.Context, t Table, key string, onError func(error)) (plan string, ok bool) {
	plan, ok, err := t.Plan(ctx, key)
	if err != nil {
		if onError != nil {
			onError(err)
		}
		var stale *StaleError
		if !errors.As(err, &stale) {
			return "", false
		}
	}
	return plan, ok
}

// Slots returns the number of policies of the largest plan: the limits a
// request may be charged under, whatever its plan.
func (s *Set) Slots() int { return s.slots }

// Policy returns the i-th policy (from 0) of the plan that pick names for
// the request r of the client key: the default plan when pick names none,
// or an unknown one. ok is false when that plan has fewer than i+1
// policies.
func (s *Set) Policy(i int, pick Picker, r *http.Request, key string) (p sluice.Policy, ok bool) {
	name, named := pick(r, key)
	plan := s.Resolve(name, named)
	if i < 0 || i >= len(plan.Policies) {
		return sluice.Policy{}, false
	}
	return plan.Policies[i], true
}
