// Package sluicetest is the conformance suite that every sluice.Store must
// pass, and a differential test that replays one random trace through two
// stores and compares their decisions field by field.
//
// A store's own tests call Run with a constructor of empty stores:
//
//	func TestConformance(t *testing.T) {
//		sluicetest.Run(t, func(t *testing.T) sluice.Store {
//			return memstore.New(memstore.Options{})
//		})
//	}
//
// and a store that must decide exactly as another one (the Redis store and
// the memory store) replays random traces through both:
//
//	tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{})
//	sluicetest.CompareStores(t, memstore.New(memstore.Options{}), redisStore, tr)
//
// The expected decisions in the suite are worked out by hand from the
// definitions in docs/algorithms.md, not computed by Sluice's own code, so a
// store that shares a bug with the memory store still fails.
package sluicetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Option configures Run.
type Option func(*config)

type config struct {
	callerTime bool
	goroutines int
	leases     bool
	usage      bool
	penalties  bool
}

// StoreClock tells Run that the store decides at its own clock and ignores
// the now passed to it (as the Redis store does by default, with Redis's
// TIME). Run then skips the subtests that need exact times (timelines, the
// window boundary, a clock stepping backwards, the tightness of RetryAfter
// and ResetAfter) and runs the others with limits that do not refill
// noticeably while the test runs, passing a zero now.
func StoreClock() Option {
	return func(c *config) { c.callerTime = false }
}

// Concurrency sets how many goroutines the concurrency subtests start
// against one key; the default is 8. Values below 2 are raised to 2.
func Concurrency(goroutines int) Option {
	return func(c *config) { c.goroutines = max(2, goroutines) }
}

// Leases tells Run that the store decides concurrency policies
// (sluice.ConcurrencyAlgorithm) and keeps their leases: Run then also
// checks the lease part of the sluice.Store contract.
func Leases() Option {
	return func(c *config) { c.leases = true }
}

// Penalties tells Run that the store decides policies with a Penalty:
// Run then also checks the penalty part of the sluice.Store contract
// (blocks, their escalation and forgetting, Unblock, and what Inspect
// reports of a block when the store is a sluice.Inspector), and with
// Usage the refusal of an estimate to settle under a penalty.
func Penalties() Option {
	return func(c *config) { c.penalties = true }
}

// Run runs the conformance suite as subtests of t. newStore must return a
// new, empty store each time it is called, independent of every store it
// returned before (for a shared backend, for example a fresh key prefix);
// Run calls it once or more per subtest, with the subtest's t, so the store
// can register its cleanup with t.Cleanup.
//
// Unless StoreClock is given, the store must decide at the non-zero now it
// is passed. Every subtest passes each store non-decreasing times, except
// the one that checks that a clock stepping backwards is treated as no time
// passing. AllowAll is called with one key per call, as sluice.Limiter does
// (a clustered store may require that the keys of one call share a slot).
//
// Every decision is also checked for the invariants of sluice.Decision:
// Limit is the policy's, Remaining is never negative, RetryAfter is zero
// when allowed and a whole number of milliseconds, at least one, or Never
// when denied, ResetAfter is a whole number of milliseconds, only the leaky
// bucket has a Delay, and Degraded is never set.
func Run(t *testing.T, newStore func(t *testing.T) sluice.Store, opts ...Option) {
	t.Helper()
	cfg := config{callerTime: true, goroutines: 8}
	for _, o := range opts {
		o(&cfg)
	}
	s := &suite{config: cfg, newStore: newStore}
	t.Run("Timeline", s.timeline)
	t.Run("Boundary", s.boundary)
	t.Run("WeightedCost", s.weightedCost)
	t.Run("CostExceedsCapacity", s.costExceedsCapacity)
	t.Run("InvalidInput", s.invalidInput)
	t.Run("AllowAll", s.allowAll)
	t.Run("Peek", s.peek)
	t.Run("IndependentKeys", s.independentKeys)
	t.Run("ArbitraryKeys", s.arbitraryKeys)
	t.Run("DistinctPolicies", s.distinctPolicies)
	t.Run("Concurrency", s.concurrency)
	t.Run("ClockBackwards", s.clockBackwards)
	t.Run("RetryAndReset", s.retryAndReset)
	t.Run("Calendar", s.calendar)
	if cfg.penalties {
		t.Run("PenaltyTimeline", s.penaltyTimeline)
		t.Run("PenaltyHours", s.penaltyHours)
		t.Run("PenaltyAllowAll", s.penaltyAllowAll)
		t.Run("PenaltyOperations", s.penaltyOperations)
		t.Run("PenaltyInspect", s.penaltyInspect)
	}
	if cfg.leases {
		t.Run("LeaseTimeline", s.leaseTimeline)
		t.Run("LeaseAllOrNothing", s.leaseAllOrNothing)
		t.Run("LeaseExact", s.leaseExact)
		t.Run("LeaseInvalid", s.leaseInvalid)
	}
	if cfg.usage {
		t.Run("UsageEnvoy", s.usageEnvoy)
		t.Run("UsageEveryAlgorithm", s.usageEveryAlgorithm)
		t.Run("UsageSettle", s.usageSettle)
		t.Run("UsageExact", s.usageExact)
	}
	if cfg.penalties && cfg.usage {
		t.Run("PenaltySettle", s.penaltySettle)
	}
}

type suite struct {
	config
	newStore func(t *testing.T) sluice.Store
}

// t0 is the start of every timeline: a whole hour, so that windows of a
// second, a minute or an hour start there.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// slow is the period of the limits used by the subtests that also run on a
// store's own clock: long enough that nothing refills while a test runs.
// Windows of this length start at multiples of 365 days since the Unix
// epoch, which are months away from any test run in the 2020s.
const slow = 365 * 24 * time.Hour

// at returns the time d after t0, or the zero time (the store's clock) when
// the store ignores caller time.
func (s *suite) at(d time.Duration) time.Time {
	if !s.callerTime {
		return time.Time{}
	}
	return t0.Add(d)
}

func (s *suite) needCallerTime(t *testing.T) {
	t.Helper()
	if !s.callerTime {
		t.Skip("the store decides at its own clock (StoreClock); this subtest needs exact caller times")
	}
}

// forEachAlgorithm runs f as one subtest per algorithm.
func forEachAlgorithm(t *testing.T, f func(t *testing.T, a sluice.Algorithm)) {
	t.Helper()
	for _, a := range sluice.Algorithms() {
		t.Run(a.String(), func(t *testing.T) { f(t, a) })
	}
}

// policyOf returns a policy of algorithm a with the given limit and period;
// the token-bucket family gets burst = limit.
func policyOf(a sluice.Algorithm, limit int64, period time.Duration) sluice.Policy {
	return sluice.Policy{Algorithm: a, Limit: limit, Period: period}
}

// allow calls st.Allow, turning a panic into a test failure, and checks
// the decision's invariants.
func allow(t *testing.T, st sluice.Store, now time.Time, req sluice.Request) (sluice.Decision, error) {
	t.Helper()
	return decideOne(t, "Allow", req, func() (sluice.Decision, error) { return st.Allow(t.Context(), now, req) })
}

// peek is allow for st.Peek.
func peek(t *testing.T, st sluice.Store, now time.Time, req sluice.Request) (sluice.Decision, error) {
	t.Helper()
	return decideOne(t, "Peek", req, func() (sluice.Decision, error) { return st.Peek(t.Context(), now, req) })
}

// decideOne runs call, the store's op on req, turning a panic into a test
// failure, and checks the decision's invariants.
func decideOne(t *testing.T, op string, req sluice.Request, call func() (sluice.Decision, error)) (sluice.Decision, error) {
	t.Helper()
	var d sluice.Decision
	err := noPanic(t, op, req, func() (err error) {
		d, err = call()
		return err
	})
	checkInvariants(t, op, req, d, err)
	return d, err
}

// allowAll calls st.AllowAll with an out slice, turning a panic into a test
// failure, and checks every decision's invariants.
func allowAll(t *testing.T, st sluice.Store, now time.Time, reqs []sluice.Request) (sluice.Decision, []sluice.Decision, error) {
	t.Helper()
	var d sluice.Decision
	out := make([]sluice.Decision, len(reqs))
	err := noPanic(t, "AllowAll", reqs, func() (err error) {
		d, err = st.AllowAll(t.Context(), now, reqs, out)
		return err
	})
	if err == nil {
		for i := range reqs {
			checkInvariants(t, "AllowAll", reqs[i], out[i], nil)
		}
		if d.Degraded {
			t.Errorf("AllowAll(%v) = %s, a Degraded decision", reqs, fmtDecision(d))
		}
	}
	return d, out, err
}

var errPanicked = errors.New("panicked")

func noPanic(t *testing.T, op string, arg any, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s(%v) panicked: %v", op, arg, r)
			err = errPanicked
		}
	}()
	return f()
}

// checkInvariants checks what every decision must satisfy, whatever the
// algorithm and the time.
func checkInvariants(t *testing.T, op string, req sluice.Request, d sluice.Decision, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		return
	}
	bad := func(what string) {
		t.Helper()
		t.Errorf("%s(%s) = %s: %s", op, fmtRequest(req), fmtDecision(d), what)
	}
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		if d.Allowed || d.RetryAfter != sluice.Never {
			bad("a cost above the capacity must be denied with RetryAfter Never")
		}
		return
	}
	if d.Limit != req.Policy.Limit {
		bad(fmt.Sprintf("Limit is not the policy's %d", req.Policy.Limit))
	}
	if d.Remaining < 0 || d.Remaining > req.Policy.Capacity() {
		bad(fmt.Sprintf("Remaining is outside [0, %d]", req.Policy.Capacity()))
	}
	if d.Allowed && d.RetryAfter != 0 {
		bad("RetryAfter must be 0 when allowed")
	}
	if !d.Allowed && (d.RetryAfter < time.Millisecond || d.RetryAfter%time.Millisecond != 0) {
		bad("RetryAfter of a denied request must be a whole number of milliseconds, at least 1")
	}
	if d.ResetAfter < 0 || d.ResetAfter%time.Millisecond != 0 {
		bad("ResetAfter must be a non-negative whole number of milliseconds")
	}
	if d.Delay < 0 || (d.Delay != 0 && req.Policy.Algorithm != sluice.LeakyBucketAlgorithm) {
		bad("only the leaky bucket has a Delay, never negative")
	}
	if d.Degraded {
		bad("Degraded is set, but the store did not fail")
	}
	leased := req.Policy.Algorithm == sluice.ConcurrencyAlgorithm || req.SettleWithin > 0
	if got, want := d.Lease != "", d.Allowed && leased && op != "Peek" && op != "AllowAll"; got != want {
		bad(fmt.Sprintf("has a lease %v, want %v: exactly the admitted Allow of a concurrency policy or of an estimate to settle has one", got, want))
	}
}

// fmtDecision formats d compactly for failure messages.
func fmtDecision(d sluice.Decision) string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	retry := d.RetryAfter.String()
	if d.RetryAfter == sluice.Never {
		retry = "never"
	}
	s := fmt.Sprintf("{%s limit=%d remaining=%d retry=%s reset=%v delay=%v", verdict, d.Limit, d.Remaining, retry, d.ResetAfter, d.Delay)
	if d.Degraded {
		s += " degraded"
	}
	if d.Blocked {
		s += " blocked"
	}
	if d.Offence {
		s += " offence"
	}
	return s + "}"
}

// fmtRequest formats r compactly, shortening long keys.
func fmtRequest(r sluice.Request) string {
	key := r.Key
	if len(key) > 40 {
		key = fmt.Sprintf("%.20s…(%d bytes)", key, len(key))
	}
	s := fmt.Sprintf("%q cost %d, %v", key, r.Cost, r.Policy)
	if r.MaxDelay != 0 {
		s += fmt.Sprintf(", max delay %v", r.MaxDelay)
	}
	return s
}

// fmtAt formats a time as an offset from t0, or "now" for the zero time.
func fmtAt(now time.Time) string {
	if now.IsZero() {
		return "now"
	}
	return "t0+" + now.Sub(t0).String()
}
