package redisstore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/engine"
)

// ErrUnsupportedPolicy is wrapped by the error for a valid policy that the
// Redis store cannot decide exactly: one whose empty bucket takes longer
// than 2^52 µs (about 142 years) to refill, which would carry timestamps
// past 2^53 µs, where Lua's numbers stop being exact integers.
var ErrUnsupportedPolicy = errors.New("policy not supported by the Redis store")

// maxHorizon bounds B·P/L in µs: with times below 2^52 µs, every timestamp
// the scripts compute stays below 2^53.
const maxHorizon = 1<<52 - 2

// maxTime is the first µs since the Unix epoch that the scripts do not
// accept (2^52 µs is in the year 2112).
const maxTime = 1 << 52

// compiled is a policy worked out once: its script arguments, the
// fingerprint part of its keys, or why it cannot be used.
type compiled struct {
	policy  sluice.Policy
	err     error
	code    string // the script's algorithm code
	l, p, b string // L, P (µs) and B as script arguments
	ln, pn  int64  // L and P as numbers (the token-bucket family's, packed by packOne)
	salt    uint64 // the policy's hash, mixed into the hash of a local refusal's hot slot (see refusals.hot)
	fp      string
	// pp holds the numbers the scripts decide with (L and P divided by
	// their gcd for the token-bucket family), for local refusals.
	pp algo.Prepared
	// cal is set for calendar policies, whose P argument is worked out
	// for each call around the current time (see periodArg).
	cal    *algo.Calendar
	calArg atomic.Pointer[calendarArg]
	// penalized is set for a policy with a penalty, whose b, x, m and F
	// (µs) are pen, as penalty.lua takes them.
	penalized bool
	pen       [4]string
}

// conc reports whether c is a concurrency policy's.
func (c *compiled) conc() bool { return c.policy.Algorithm == sluice.ConcurrencyAlgorithm }

// calendarArg is a calendar policy's P argument, valid for the times in
// [from, to): the starts of the windows from two before the one holding
// those times to three after it, as numbers and as text.
type calendarArg struct {
	from, to int64
	starts   [6]int64
	arg      string
}

// periodArg returns c's P argument for a call at now (zero for the
// store's clock, read here as the application's): the period in µs, or for
// a calendar policy six consecutive window starts in µs around now, from
// which the script picks the window by its own time (see window.lua).
func (c *compiled) periodArg(now time.Time) (string, error) {
	if c.cal == nil {
		return c.p, nil
	}
	a, err := c.calendar(now)
	if err != nil {
		return "", err
	}
	return a.arg, nil
}

// calendar returns a calendar policy's P argument for a call at now (see
// periodArg).
func (c *compiled) calendar(now time.Time) (*calendarArg, error) {
	if now.IsZero() {
		now = time.Now()
	}
	t := now.UnixMicro()
	if a := c.calArg.Load(); a != nil && a.from <= t && t < a.to {
		return a, nil
	}
	b := c.cal.Bounds(t)
	first, last := c.cal.Bounds(b.Prev).Prev, c.cal.Bounds(b.End).After
	if first < 0 || last >= maxTime {
		return nil, fmt.Errorf("redisstore: %w: %s: the calendar windows around %v reach outside the times the Redis store accepts (1970 to 2112)",
			ErrUnsupportedPolicy, c.policy, now)
	}
	a := &calendarArg{from: b.Start, to: b.End, starts: [6]int64{first, b.Prev, b.Start, b.End, b.After, last}}
	buf := make([]byte, 0, 6*17)
	for i, v := range a.starts {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, v, 10)
	}
	a.arg = string(buf)
	c.calArg.Store(a)
	return a, nil
}

// windowExpire returns when a window state of c that starts at start and
// counts prev and curr is back to initial, as the scripts have it: at the
// end of its window (fixed window; a sliding window whose curr is 0, as a
// refund may leave it) or of the window after it (sliding window); 0 for
// no count.
func (c *compiled) windowExpire(start, prev, curr int64) int64 {
	sliding := c.policy.Algorithm == sluice.SlidingWindowAlgorithm
	if curr == 0 && (!sliding || prev == 0) {
		return 0
	}
	after := sliding && curr > 0
	if c.cal != nil {
		b := c.cal.Bounds(start)
		if after {
			return b.After
		}
		return b.End
	}
	P := c.pp.Period
	if after {
		return start + 2*P
	}
	return start + P
}

var algoCodes = [...]string{
	sluice.TokenBucketAlgorithm:   "tb",
	sluice.GCRAAlgorithm:          "gcra",
	sluice.LeakyBucketAlgorithm:   "lb",
	sluice.FixedWindowAlgorithm:   "fw",
	sluice.SlidingLogAlgorithm:    "sl",
	sluice.SlidingWindowAlgorithm: "sw",
	sluice.ConcurrencyAlgorithm:   "cc",
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// saltSeed seeds compiled.salt: a hash of the policy, the same for every
// compiled copy of it, so that a policy compiled again (its slot of the
// policy cache taken by another policy in between) finds its local
// refusals' hot slots where the previous copy put them.
var saltSeed = maphash.MakeSeed()

// compile checks p and works out its arguments.
func compile(p sluice.Policy) *compiled {
	c := &compiled{policy: p, salt: maphash.Comparable(saltSeed, p)}
	if err := p.Validate(); err != nil {
		c.err = fmt.Errorf("redisstore: %w", err)
		return c
	}
	if pen, ok := engine.PenaltyParams(&p); ok {
		c.penalized = true
		c.pen = [4]string{strconv.FormatInt(pen.BlockFor, 10), strconv.FormatInt(pen.Factor, 10),
			strconv.FormatInt(pen.MaxBlock, 10), strconv.FormatInt(pen.ForgetAfter, 10)}
	}
	if p.Algorithm == sluice.ConcurrencyAlgorithm {
		// L and P as they are: units held add up to at most L, and every
		// expiry is a time plus P, below 2^53 µs.
		c.code = algoCodes[p.Algorithm]
		c.fp = fingerprint(c.code, p.Limit, p.Period.String(), 0, p.Name)
		c.ln, c.pn = p.Limit, int64(p.Period/time.Microsecond)
		c.l, c.p, c.b = strconv.FormatInt(c.ln, 10), strconv.FormatInt(c.pn, 10), "0"
		return c
	}
	period := int64(p.Period / time.Microsecond)
	burst := p.Capacity()
	hi, lo := bits.Mul64(uint64(burst), uint64(period))
	if q, _ := bits.Div64(hi, lo, uint64(p.Limit)); q > maxHorizon {
		c.err = fmt.Errorf("redisstore: %w: %s: burst×period/limit = %v exceeds 2^52 µs (about 142 years)",
			ErrUnsupportedPolicy, p, time.Duration(min(q, 1<<62))*time.Microsecond)
		return c
	}
	c.code = algoCodes[p.Algorithm]
	l, per := p.Limit, period
	if p.Algorithm.HasBurst() {
		// Only the rate P/L matters: dividing both by their gcd changes
		// no decision and keeps the remainders the script carries small.
		g := gcd(l, per)
		l, per = l/g, per/g
	}
	periodText := p.Period.String()
	params := algo.Params{Limit: l, Burst: burst, Period: per}
	if p.Calendar.Unit != sluice.NoCalendar {
		params = engine.Params(&p)
		c.cal = params.Cal
		periodText = calendarText(p.Calendar)
	}
	c.fp = fingerprint(c.code, p.Limit, periodText, p.Burst, p.Name)
	c.l, c.p, c.b = strconv.FormatInt(l, 10), strconv.FormatInt(per, 10), strconv.FormatInt(burst, 10)
	c.ln, c.pn = l, per
	c.pp = algo.Prepare(params)
	return c
}

// calendarText is a calendar's part of a state key, such as
// "calendar_month@Europe/Berlin" or "calendar_week-sunday@UTC".
func calendarText(c sluice.Calendar) string {
	s := c.Unit.String()
	if c.WeekStartsSunday {
		s += "-sunday"
	}
	return string(appendText([]byte(s+"@"), c.Location().String()))
}

// policyCache is a small direct-mapped cache of compiled policies. Entries
// are immutable, so readers take no lock.
type policyCache struct {
	seed  maphash.Seed
	slots [256]atomic.Pointer[compiled]
}

func (pc *policyCache) get(p *sluice.Policy) *compiled {
	h := uint64(p.Limit)*0x9e3779b97f4a7c15 ^ uint64(p.Period)*0xc2b2ae3d27d4eb4f ^ uint64(p.Burst)*0x165667b19e3779f9 ^ uint64(p.Algorithm)
	if p.Name != "" {
		h ^= maphash.String(pc.seed, p.Name)
	}
	slot := &pc.slots[h>>56]
	if p.Calendar.Zone != nil {
		h ^= maphash.String(pc.seed, p.Calendar.Zone.String())
	}
	if c := slot.Load(); c != nil && c.policy == *p {
		return c
	}
	c := compile(*p)
	slot.Store(c)
	return c
}
