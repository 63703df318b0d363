package sluice

import (
	"context"
	"strconv"
	"time"
)

// Inspector is implemented by stores that can report the state they keep
// for one (policy, key) pair, so that an operator can see why a key is
// limited. The memory store implements it.
//
// Inspect returns the state of req.Key under req.Policy at now (a zero now
// means the store's clock, as for Allow) and, in State.Decision, the
// decision Peek would return for req at that same instant. It charges
// nothing and creates no state for a key the store does not track. It
// validates req as Peek does.
type Inspector interface {
	Inspect(ctx context.Context, now time.Time, req Request) (State, error)
}

// State is what a Store knows of one (policy, key) pair at one instant, as
// an Inspector reports it. Which of the algorithm-specific fields are set
// depends on the policy's algorithm; the others are zero. Every number is
// exact: the fractional ones are Amounts, never floating point.
type State struct {
	// At is the instant the state describes, on the store's clock, to the
	// microsecond. It is never before an instant the key has already been
	// decided at (a clock that steps backwards reads as no time passing).
	At time.Time
	// Tracked reports whether the store holds state for the pair. An
	// untracked pair is at its initial state: a full bucket, empty
	// windows, an empty log.
	Tracked bool
	// Decision is the decision Peek would return for the request at At:
	// what a request of its Cost would get, without charging it.
	Decision Decision

	// Tokens, for the token-bucket family (token_bucket, gcra and
	// leaky_bucket), is how many cost units the bucket holds: its Burst
	// minus Queued.
	Tokens Amount
	// Queued, for the token-bucket family, is the Burst minus Tokens: the
	// units spent and not yet refilled, which for the leaky bucket are the
	// units still waiting in its queue.
	Queued Amount
	// Backlog, for the token-bucket family, is the time until the bucket
	// is full again (the leaky bucket's queue is empty), rounded up to the
	// microsecond: the Delay the leaky bucket gives the next request it
	// admits.
	Backlog time.Duration

	// WindowStart and WindowEnd, for the window algorithms (fixed_window
	// and sliding_window), are the start and end of the window that holds
	// At: [k·Period, (k+1)·Period) since the Unix epoch, in UTC, or the
	// calendar window in the policy's zone.
	WindowStart, WindowEnd time.Time
	// Current, for the window algorithms, is the cost admitted in the
	// window that holds At.
	Current int64
	// Previous, for sliding_window, is the cost admitted in the window
	// before it.
	Previous int64
	// Estimate, for the window algorithms, is the count a request is
	// checked against: for sliding_window Previous·(Period − (At −
	// WindowStart))/Period + Current, exactly (over calendar windows
	// Previous·(WindowEnd − At)/(WindowEnd − WindowStart) + Current); for
	// fixed_window Current.
	Estimate Amount

	// Entries, for sliding_log, is the number of log entries that still
	// count at At (requests admitted in the same microsecond share one).
	Entries int
	// Counted, for sliding_log, is the summed cost of those entries.
	Counted int64
	// Oldest and Newest, for sliding_log, are the times of the oldest and
	// newest entries that count; zero when none does.
	Oldest, Newest time.Time

	// Held, for concurrency, is the units held at At, by Leases leases;
	// Expires is when the last of them runs out unless renewed (zero when
	// none is held).
	Held, Leases int64
	Expires      time.Time

	// BlockedUntil, under a policy with a Penalty, is the end of the key's
	// block when it is blocked at At; zero otherwise.
	BlockedUntil time.Time
	// Offences, under a policy with a Penalty, is the count of the key's
	// offences remembered at At, and Forgotten the instant they are
	// forgotten if no other comes; 0 and zero when none is remembered.
	Offences  int64
	Forgotten time.Time
}

// Amount is an exact non-negative number of cost units: Whole + Num/Den,
// with 0 ≤ Num < Den. The zero Amount is 0. Stores return Amounts whose Den
// divides the policy's Period in microseconds (for calendar windows, the
// window's length), not necessarily in lowest terms.
type Amount struct {
	Whole, Num, Den int64
}

// IsInt reports whether a is a whole number.
func (a Amount) IsInt() bool { return a.Num == 0 }

// Floor returns a rounded down to a whole number.
func (a Amount) Floor() int64 { return a.Whole }

// reduced returns a's fraction in lowest terms.
func (a Amount) reduced() (num, den int64) {
	if a.Num == 0 || a.Den <= 0 {
		return 0, 1
	}
	x, y := a.Num, a.Den
	for y != 0 {
		x, y = y, x%y
	}
	return a.Num / x, a.Den / x
}

// maxDecimals is the most fraction digits String writes as a decimal.
const maxDecimals = 9

// String returns a exactly: "7" for a whole number, a decimal such as
// "7.25" when the decimal expansion ends within nine digits, and otherwise
// a mixed fraction such as "41 2/3".
func (a Amount) String() string {
	num, den := a.reduced()
	whole := strconv.FormatInt(a.Whole, 10)
	if num == 0 {
		return whole
	}
	// The expansion ends iff den = 2^i·5^j; it then has max(i, j) digits.
	d, twos, fives := den, 0, 0
	for d%2 == 0 {
		d, twos = d/2, twos+1
	}
	for d%5 == 0 {
		d, fives = d/5, fives+1
	}
	if digits := max(twos, fives); d == 1 && digits <= maxDecimals {
		scale := int64(1)
		for range digits {
			scale *= 10
		}
		frac := strconv.FormatInt(num*(scale/den), 10) // num·scale/den < 10^9: no overflow
		for len(frac) < digits {
			frac = "0" + frac
		}
		return whole + "." + frac
	}
	return whole + " " + strconv.FormatInt(num, 10) + "/" + strconv.FormatInt(den, 10)
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (a Amount) MarshalText() ([]byte, error) {
	return []byte(a.String()), nil
}
