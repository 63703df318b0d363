package sluice

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Never is the RetryAfter of a request that can never be admitted, because
// its cost exceeds the policy's capacity.
const Never time.Duration = algo.Never

// Decision is the outcome of one request.
//
// For a request under several policies (a Limiter with several, or the
// combined decision of Store.AllowAll), the fields mix the policies on
// purpose, each answering its question for the request as a whole:
// Allowed is true only if every policy admitted it; Limit and Remaining are
// the deciding policy's (the one that denied with the longest wait, or, when
// all admitted, the one with the fewest units remaining); RetryAfter,
// ResetAfter and Delay are the largest over the policies (when every one
// would admit the request again, when every one is back to initial, how
// long the slowest queue holds it); Degraded is true if any policy's
// decision was. So Limit may come from a per-second policy and ResetAfter
// from a per-hour one. Store.AllowAll's out slice has each policy's own
// decision.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Degraded reports that the Store could not reach its backend and the
	// decision was made by its failure policy (allow, deny or local).
	Degraded bool
	// Blocked reports a refusal by a block of the policy's Penalty: one in
	// force, or one that this request's offence started (then Offence is
	// set too). For several policies, any of them.
	Blocked bool
	// Offence reports that this refusal was an offence under the policy's
	// Penalty: it started a block. For several policies, any of them.
	Offence bool
	// Limit is the policy's Limit (for several policies, that of the policy
	// that decided: the one that denied, or the one with least remaining).
	Limit int64
	// Remaining is how many cost units could be admitted right now, after
	// this decision, floored; never negative.
	Remaining int64
	// RetryAfter is, for a denied request, the smallest whole number of
	// milliseconds, at least 1, after which the same request would be
	// admitted if no other request came. It is 0 when Allowed, and Never
	// when the cost exceeds the capacity.
	RetryAfter time.Duration
	// ResetAfter is the time, rounded up to whole milliseconds, until the
	// key's state is back to initial if no other request came; 0 when it
	// already is.
	ResetAfter time.Duration
	// Delay is how long an admitted request must wait before it proceeds:
	// non-zero only for the leaky bucket, which smooths its output. On a
	// denied decision a non-zero Delay means the request fitted the bucket
	// but would have waited longer than Request.MaxDelay.
	Delay time.Duration
	// Lease, on a decision that admitted a request under one or more
	// concurrency policies, names what the request holds: give it back to
	// the store's Release when the request ends, or to Renew to hold on
	// longer. One lease covers every unit the decision took (for AllowAll,
	// the combined decision carries it; out's decisions do not). It is
	// empty on every other decision.
	//
	// A lease is opaque: the store makes it, and only a store of the same
	// kind and backend (for Redis: any store on the same Redis) can
	// release or renew it. It is printable ASCII, safe to hand to a client
	// as it is: it names the keys held and a random identifier that
	// cannot be guessed, and releases nothing that another lease holds.
	Lease string
}

// Request asks a Store to charge Cost units to Key under *Policy.
//
// Policy must not be nil. Stores only read *Policy, and keep nothing it
// points to after a call returns; a pointer keeps the Request small, so
// that a decision passes no copy of the policy.
type Request struct {
	Policy *Policy
	Key    string
	Cost   int64
	// MaxDelay, when positive, bounds the leaky bucket's Delay: a request
	// that would have to wait longer is denied (and not queued); its
	// Decision has the Delay it would have had and a RetryAfter that says
	// when the queue will be short enough. Other algorithms ignore it.
	MaxDelay time.Duration
	// SettleWithin, when positive, makes Cost an estimate, to be settled
	// with the request's actual cost once it is known: an admitted
	// decision returns a Lease, and Release with the actual cost charges
	// the difference or gives it back, if it comes within SettleWithin of
	// the decision. Unsettled by then, the estimate stays charged.
	// Concurrency policies ignore it.
	SettleWithin time.Duration
}

// Store keeps the state of every (policy, key) pair and makes decisions.
//
// Contract, for every implementation:
//   - A request over its limit is a decision (Allowed false), not an error.
//     An error means the backend failed or the input is invalid; the
//     Decision returned with a backend error is the zero Decision unless the
//     store's failure policy made one (then Degraded is set and err is nil).
//   - A request whose Cost exceeds the policy's capacity (in AllowAll,
//     also requests for one policy and key whose summed cost does) can
//     never be admitted: it is refused with RetryAfter Never, nothing is
//     charged, and the error wraps ErrCostExceedsCapacity. It stays an
//     error of this contract, like ErrInvalidCost, because it is a fault
//     of the input that no state can change, and a caller of Allow or
//     Limiter must not wait for it. Sluice's front doors never see it:
//     their decision engine finds such requests before the store and
//     answers them as plain refusals (RetryAfter Never, no error).
//   - A zero now means the store's own clock (the memory store's clock, or
//     Redis's TIME). A non-zero now is used by stores that accept caller
//     time, such as the memory store; time that steps backwards is treated
//     as no time passing.
//   - AllowAll is all-or-nothing: when one request is denied, none is
//     charged. Its Decision is Allowed only if every request is, and
//     combines the results: the largest RetryAfter, ResetAfter and Delay,
//     and the Limit and Remaining of the deciding policy. out, if not nil,
//     must have len(reqs) and receives each request's own decision (for a
//     denied whole, the requests that would have passed report their state
//     without the charge: Allowed, with no RetryAfter and no Delay).
//     Requests for the same policy and key in one call decide as one
//     request of their summed cost (which MaxDelay bounds), each reporting
//     the state after the requests up to it. No requests, or an out of
//     another length, is an error.
//   - Peek decides as Allow would and charges nothing.
//   - A request of Cost 0 is a check, for a budget whose cost is known
//     only afterwards: it is admitted iff a unit is left (the key is not
//     in debt and a request of cost 1 would be admitted), and charges
//     nothing. Remaining and ResetAfter describe the key as it is; a
//     refused check has the RetryAfter of a request of cost 1. A negative
//     Cost is an error wrapping ErrInvalidCost.
//   - Implementations are safe for concurrent use, and keep neither reqs
//     nor out after a call returns (callers reuse them).
//
// Leases, for the concurrency policies (ConcurrencyAlgorithm):
//   - An admitted Allow or AllowAll under one or more concurrency policies
//     takes cost units of each (policy, key) and returns them in one
//     Decision.Lease. It is all or nothing with the rate policies of the
//     same call: when any request is refused, no unit is held and no rate
//     is charged. A refused decision holds nothing and has no Lease.
//   - A unit is held from the decision until its lease is released, or
//     until the lease's expiry (the decision's time plus the policy's
//     Period, on the store's clock: Redis's TIME for Redis) if it is
//     neither released nor renewed. At no instant are more than Limit
//     units of a (policy, key) held.
//   - Release frees what the lease still holds and reports whether it
//     freed or settled anything. Releasing a lease again, or one that
//     expired, frees nothing and is not an error; a lease's release never
//     frees units that another decision holds.
//   - Renew extends every hold of the lease that has not expired by its
//     policy's Period from now, and returns how long until the first of
//     them expires. A lease that holds nothing any more (expired or
//     released) is an error wrapping ErrLeaseExpired.
//   - A Lease that this kind of store did not make, or that is malformed,
//     is an error wrapping ErrInvalidLease, for Release and Renew alike.
//   - For a concurrency policy, Remaining is Limit minus the units held
//     after the decision, RetryAfter (refused) the time until enough
//     holds expire for the request to fit if none is released or renewed
//     (a release makes room sooner), and ResetAfter the time until every
//     hold has expired. docs/algorithms.md has the exact definitions.
//
// Costs known afterwards, for the rate policies (every algorithm but
// concurrency, which answers ErrNotSupported to Debit and Refund):
//   - Debit charges Cost (at least 1) units whether or not they fit: the
//     key may go into debt, and is refused until the algorithm has repaid
//     it. Its Decision is Allowed iff the units fitted (Allow would have
//     admitted them); Remaining (0 in debt), ResetAfter and, when they
//     did not fit, RetryAfter (when a request of cost 1 will be admitted)
//     describe the key after the debit. Debt is bounded, and a debit past
//     the bound charges up to it (docs/algorithms.md).
//   - Refund gives Cost (at least 1) units back to the key's latest
//     charges, never leaving it better than its initial state; for the
//     window algorithms only to the current window (and the sliding log:
//     its newest entries first). Its Decision is Allowed and describes the
//     key after the refund.
//   - An admitted request with SettleWithin takes a lease (its Decision's
//     Lease; one lease covers the holds and the estimates of one
//     decision). Release(ctx, now, lease, usage) settles it exactly once:
//     request i of the call that took it (0 for Allow), if it had
//     SettleWithin, i < len(usage) and usage[i] ≥ 0, actually cost
//     usage[i]; more than its estimate debits the difference at now,
//     less refunds the difference to the charge the estimate made (for
//     the window algorithms only while its window still counts; for the
//     sliding log from the entries at or before it, newest first). Any
//     other request keeps its estimate. A second Release, or one after
//     SettleWithin has passed, settles nothing.
//   - Reset puts Key back to its initial state under Policy, debt and
//     all, its block and offences too (Penalty); under a concurrency
//     policy it frees every hold (their leases then release nothing).
//     Cost is ignored.
//
// Penalties (Policy.Penalty), for the rate policies:
//   - Allow and AllowAll refuse a blocked key whatever its policy's state,
//     and charge nothing; AllowAll then charges none of its requests, and
//     its refusal is no offence of any of them. A refusal by a penalized
//     policy itself (Allowed false, RetryAfter not Never; in AllowAll the
//     policy's own decision) while no key of the call is blocked is an
//     offence, which blocks the key from now; requests on one (policy,
//     key) in one call offend once. Peek reports a block and starts none.
//     Debit and Refund ignore blocks. The decisions of a blocked key are
//     defined in Penalty's documentation and docs/algorithms.md.
//   - An estimate to settle (SettleWithin, under a rate policy) and a
//     policy with a penalty in one Allow or AllowAll, in one request or
//     two, is an error wrapping ErrNotSupported, returned before anything
//     is decided or charged. Peek ignores SettleWithin.
//   - Unblock lifts Key's block under Policy and forgets its offences,
//     leaving the policy's own state as it is; it reports whether the key
//     was blocked at now (a zero now means the store's clock). Cost is
//     ignored; a policy without a penalty has nothing to lift.
//   - Blocks live with the key's state: one lock in memory, one slot and
//     one script in Redis, so that every instance on one backend sees the
//     same block.
type Store interface {
	Allow(ctx context.Context, now time.Time, req Request) (Decision, error)
	AllowAll(ctx context.Context, now time.Time, reqs []Request, out []Decision) (Decision, error)
	Peek(ctx context.Context, now time.Time, req Request) (Decision, error)
	Release(ctx context.Context, now time.Time, lease string, usage []int64) (released bool, err error)
	Renew(ctx context.Context, now time.Time, lease string) (expiresIn time.Duration, err error)
	Debit(ctx context.Context, now time.Time, req Request) (Decision, error)
	Refund(ctx context.Context, now time.Time, req Request) (Decision, error)
	Reset(ctx context.Context, req Request) error
	Unblock(ctx context.Context, now time.Time, req Request) (lifted bool, err error)
}

// Errors.
var (
	// ErrCostExceedsCapacity is returned for a request whose cost is larger
	// than its policy's capacity (Burst, or Limit for the window
	// algorithms): it could never be admitted, however long it waited.
	ErrCostExceedsCapacity = errors.New("cost exceeds the policy's capacity")
	// ErrInvalidCost is returned for a negative cost, and for a Debit or
	// Refund of less than 1 unit.
	ErrInvalidCost = errors.New("invalid cost")
	// ErrNoPolicy is returned by a Limiter that has no policies.
	ErrNoPolicy = errors.New("no policy")
	// ErrNotAtomic is wrapped by the error of an AllowAll whose requests
	// the store cannot decide together, all or nothing, because of where
	// their keys live: on Redis Cluster, keys in different hash slots
	// (redisstore.ErrCrossSlot). Nothing is charged, and the same requests
	// fail the same way every time: retrying cannot help, the keys must
	// change (every limit of one key can be decided together) or the
	// requests be decided apart.
	ErrNotAtomic = errors.New("the store cannot decide these requests all or nothing: their keys live apart")
	// ErrInvalidLease is wrapped by the error of a Release or Renew whose
	// lease is malformed or was not made by this kind of store.
	ErrInvalidLease = errors.New("invalid lease")
	// ErrLeaseExpired is wrapped by the error of a Renew whose lease
	// holds nothing any more: it expired, or was released.
	ErrLeaseExpired = errors.New("lease expired or released")
	// ErrNotSupported is wrapped by the error of a store asked to decide
	// under a policy it cannot decide (a concurrency policy on a store
	// without leases), or to take an estimate to settle under a penalty
	// (see Store).
	ErrNotSupported = errors.New("not supported by this store")
)
