// Package sluice is an exact rate limiter.
//
// A Policy says how much traffic one key may send: an Algorithm, a Limit of
// cost units per Period, and for the token-bucket family a Burst. A Store
// keeps the per-key state and makes decisions (the in-memory store is
// github.com/sluicehq/sluice/memstore); a Limiter applies one or more
// policies to keys, all-or-nothing, and can Wait for a request to fit.
//
// Decisions are exact: time is counted in whole microseconds, rates are
// rationals, and no floating point is involved anywhere, so a decision can
// be predicted to the millisecond from the definitions in docs/algorithms.md.
//
// This package imports only the standard library and two internal
// packages of its own that do the same (internal/algo, internal/ctxsleep).
package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// Algorithm names one of Sluice's six rate-limiting algorithms. The zero
// value is TokenBucketAlgorithm.
type Algorithm uint8

// The algorithms. Their exact semantics are in docs/algorithms.md.
const (
	// TokenBucketAlgorithm: a bucket of capacity Burst, full at first,
	// refilled continuously at Limit/Period. Allows bursts up to Burst.
	TokenBucketAlgorithm Algorithm = iota
	// GCRAAlgorithm: the generic cell rate algorithm. Decides exactly as
	// the token bucket with the same parameters; stores one timestamp.
	GCRAAlgorithm
	// LeakyBucketAlgorithm: a queue drained at one unit per Period/Limit;
	// admission as the token bucket, and admitted requests get a Delay that
	// spaces them evenly.
	LeakyBucketAlgorithm
	// FixedWindowAlgorithm: at most Limit per window [k·P, (k+1)·P).
	FixedWindowAlgorithm
	// SlidingLogAlgorithm: at most Limit in any Period-long interval, by
	// remembering every admitted request.
	SlidingLogAlgorithm
	// SlidingWindowAlgorithm: the sliding window counter, which weights the
	// previous window's count by how much of it still overlaps the last
	// Period.
	SlidingWindowAlgorithm
	numRateAlgorithms

	// ConcurrencyAlgorithm is not a rate: at most Limit units held at once
	// per key, each admitted request holding its cost until its Lease is
	// released, or for Period (the lease's length) if it is neither
	// released nor renewed. See Concurrency.
	ConcurrencyAlgorithm = numRateAlgorithms
	numAlgorithms        = ConcurrencyAlgorithm + 1
)

var algorithmNames = [numAlgorithms]string{
	"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window", "concurrency",
}

// Algorithms returns the six rate algorithms, in the order of their
// constants; ConcurrencyAlgorithm, which bounds what is in flight rather
// than a rate, is not among them.
func Algorithms() []Algorithm {
	out := make([]Algorithm, numRateAlgorithms)
	for i := range out {
		out[i] = Algorithm(i)
	}
	return out
}

// String returns the algorithm's name as used in configuration files:
// token_bucket, gcra, leaky_bucket, fixed_window, sliding_log,
// sliding_window or concurrency.
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm with the given name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if n == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, concurrency)", name)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("unknown algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// HasBurst reports whether the algorithm uses Policy.Burst (the token-bucket
// family); the window algorithms' capacity is their Limit.
func (a Algorithm) HasBurst() bool {
	return a == TokenBucketAlgorithm || a == GCRAAlgorithm || a == LeakyBucketAlgorithm
}

// Limits on a Policy's numbers.
const (
	// MaxLimit is the largest Limit or Burst.
	MaxLimit = algo.MaxLimit
	// MaxPeriod is the longest Period: ten years of 365.25 days.
	MaxPeriod = 36525 * 24 * time.Hour / 10
)

// Policy is a rate limit: Limit cost units per Period under Algorithm.
//
// Burst is the capacity of the token-bucket family (token_bucket, gcra,
// leaky_bucket): how many units a key that has been idle may spend at once.
// Zero means Limit. The window algorithms have no burst of their own; for
// them Burst must be zero or equal to Limit.
//
// Period must be a whole number of microseconds, the resolution at which
// Sluice (and Redis's TIME) counts time. For ConcurrencyAlgorithm it is
// the length of a lease.
//
// Calendar, when set, makes a window policy's windows calendar days,
// weeks, months or years in a time zone (see Calendar); Period must then
// be zero. Build such a policy with FixedCalendarWindow or
// SlidingCalendarWindow.
//
// Name is optional: it labels the policy in headers, metrics and errors, and
// keeps the state of two policies with equal numbers apart. The zero Policy
// is not valid; build one with the constructors (TokenBucket, GCRA, ...) or
// a literal, and check it with Validate.
type Policy struct {
	Name      string
	Algorithm Algorithm
	Limit     int64
	Period    time.Duration
	Burst     int64
	Calendar  Calendar
	// Penalty, when set, blocks a key that the policy refused, longer
	// for each repeat offence (see Penalty). The zero value is none.
	Penalty Penalty
}

// TokenBucket returns a token-bucket policy: limit units per period, bursts
// up to burst (0 means limit).
func TokenBucket(limit int64, period time.Duration, burst int64) Policy {
	return Policy{Algorithm: TokenBucketAlgorithm, Limit: limit, Period: period, Burst: burst}
}

// GCRA returns a GCRA policy, which decides as TokenBucket does.
func GCRA(limit int64, period time.Duration, burst int64) Policy {
	return Policy{Algorithm: GCRAAlgorithm, Limit: limit, Period: period, Burst: burst}
}

// LeakyBucket returns a leaky-bucket policy: a queue of up to burst units
// (0 means limit) drained at limit units per period.
func LeakyBucket(limit int64, period time.Duration, burst int64) Policy {
	return Policy{Algorithm: LeakyBucketAlgorithm, Limit: limit, Period: period, Burst: burst}
}

// FixedWindow returns a fixed-window policy: limit units per window of
// length period, windows aligned to multiples of period since the Unix
// epoch.
func FixedWindow(limit int64, period time.Duration) Policy {
	return Policy{Algorithm: FixedWindowAlgorithm, Limit: limit, Period: period}
}

// SlidingLog returns a sliding-log policy: at most limit units in any
// interval of length period.
func SlidingLog(limit int64, period time.Duration) Policy {
	return Policy{Algorithm: SlidingLogAlgorithm, Limit: limit, Period: period}
}

// SlidingWindow returns a sliding-window-counter policy.
func SlidingWindow(limit int64, period time.Duration) Policy {
	return Policy{Algorithm: SlidingWindowAlgorithm, Limit: limit, Period: period}
}

// Concurrency returns a concurrency policy: at most limit units held at
// once per key. A request admitted under it holds its cost until the
// Lease of its Decision is released (Store.Release), and for lease at
// most if it is neither released nor renewed (Store.Renew), so that a
// holder that crashed frees its units when the lease runs out. The lease
// is the policy's Period.
func Concurrency(limit int64, lease time.Duration) Policy {
	return Policy{Algorithm: ConcurrencyAlgorithm, Limit: limit, Period: lease}
}

// Named returns a copy of p with the given name.
func (p Policy) Named(name string) Policy {
	p.Name = name
	return p
}

// Capacity returns the largest cost a single request can ever have under p:
// Burst for the token-bucket family, Limit for the window algorithms.
func (p Policy) Capacity() int64 {
	if p.Algorithm.HasBurst() && p.Burst != 0 {
		return p.Burst
	}
	return p.Limit
}

// ErrInvalidPolicy is wrapped by every error from Policy.Validate.
var ErrInvalidPolicy = errors.New("invalid policy")

// Validate reports whether p can be used, with an error that wraps
// ErrInvalidPolicy and names the field that is wrong.
func (p Policy) Validate() error {
	if p.valid() {
		return nil
	}
	return p.problem()
}

// valid is Validate's fast path for the decision hot path: it accepts every
// valid policy whose Capacity·Period is below 2^60 µs (all but extreme ones)
// with a few comparisons and one multiplication.
func (p Policy) valid() bool {
	if p.Algorithm >= numAlgorithms || p.Calendar != (Calendar{}) || p.Penalty != (Penalty{}) || p.Limit < 1 || p.Limit > MaxLimit ||
		p.Period <= 0 || p.Period > MaxPeriod || p.Period%time.Microsecond != 0 ||
		p.Burst < 0 || p.Burst > MaxLimit {
		return false
	}
	if !p.Algorithm.HasBurst() && p.Burst != 0 && p.Burst != p.Limit {
		return false
	}
	// Capacity and period are below 2^30 and 2^49, so the product fits.
	return uint64(p.Capacity())*uint64(p.Period/time.Microsecond) < 1<<60
}

// problem returns the error that describes why p is invalid, or nil.
func (p Policy) problem() error {
	bad := func(format string, args ...any) error {
		where := "policy"
		if p.Name != "" {
			where = fmt.Sprintf("policy %q", p.Name)
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalidPolicy, where, fmt.Sprintf(format, args...))
	}
	if !p.Penalty.IsZero() {
		if p.Algorithm == ConcurrencyAlgorithm {
			return bad("a concurrency policy takes no penalty: it refuses what is in flight, not a rate")
		}
		if s := p.Penalty.problem(); s != "" {
			return bad("%s", s)
		}
	}
	switch {
	case p.Algorithm >= numAlgorithms:
		return bad("unknown algorithm %d", uint8(p.Algorithm))
	case p.Limit < 1:
		return bad("limit must be at least 1, got %d", p.Limit)
	case p.Limit > MaxLimit:
		return bad("limit must be at most %d, got %d", MaxLimit, p.Limit)
	case p.calendarProblem() != "":
		return bad("%s", p.calendarProblem())
	case p.Calendar.Unit != NoCalendar:
		if p.Burst != 0 && p.Burst != p.Limit {
			return bad("%s has no burst; remove burst (got %d)", p.Algorithm, p.Burst)
		}
		return nil // windows of at most 367 days: every product fits
	case p.Period <= 0:
		return bad("period must be positive, got %v", p.Period)
	case p.Period%time.Microsecond != 0:
		return bad("period must be a whole number of microseconds, got %v", p.Period)
	case p.Period > MaxPeriod:
		return bad("period must be at most %v (10 years), got %v", MaxPeriod, p.Period)
	case p.Burst < 0:
		return bad("burst must not be negative (0 means the limit), got %d", p.Burst)
	case p.Burst > MaxLimit:
		return bad("burst must be at most %d, got %d", MaxLimit, p.Burst)
	case !p.Algorithm.HasBurst() && p.Burst != 0 && p.Burst != p.Limit:
		return bad("%s has no burst; remove burst (got %d) or use token_bucket", p.Algorithm, p.Burst)
	}
	// The rest is what the algorithms accept, said once in internal/algo:
	// the time an empty bucket takes to refill, Burst·Period/Limit, within
	// 2^60 µs (about 36,000 years) so that every timestamp fits.
	ap := algo.Params{Limit: p.Limit, Burst: p.Capacity(), Period: int64(p.Period / time.Microsecond)}
	if err := ap.Check(); err != nil {
		return bad("%v", err)
	}
	return nil
}

// String returns p in a readable form, such as
// "api: token_bucket 100/1m0s burst 20".
func (p Policy) String() string {
	s := fmt.Sprintf("%s %d/%v", p.Algorithm, p.Limit, p.Period)
	if p.Algorithm == ConcurrencyAlgorithm {
		s = fmt.Sprintf("%s %d lease %v", p.Algorithm, p.Limit, p.Period)
	}
	if p.Calendar.Unit != NoCalendar {
		s = fmt.Sprintf("%s %d/%v", p.Algorithm, p.Limit, p.Calendar)
	}
	if p.Algorithm.HasBurst() {
		s += fmt.Sprintf(" burst %d", p.Capacity())
	}
	if !p.Penalty.IsZero() {
		s += ", " + p.Penalty.String()
	}
	if p.Name != "" {
		s = p.Name + ": " + s
	}
	return s
}
