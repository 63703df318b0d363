package simulate

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Pattern is a shape of generated traffic. Each is defined exactly in
// docs/simulate.md and in Traffic's doc comment.
type Pattern uint8

// The patterns.
const (
	// Steady sends evenly spaced requests at the rate.
	Steady Pattern = iota + 1
	// Burst sends each period's requests at the period's first millisecond.
	Burst
	// Boundary sends, for every pair of periods, the first one's requests
	// at its last millisecond and the second one's at its first: twice a
	// period's requests across one window boundary, within 1 ms.
	Boundary
	// Poisson sends requests with exponentially distributed gaps (a Poisson
	// process), drawn from a seeded PCG generator.
	Poisson
	// Ramp sends at a rate that rises linearly from 0 to twice the rate.
	Ramp
	// OnOff sends at twice the rate in the first half of each period and
	// nothing in the second half.
	OnOff
)

var patternNames = []string{Steady: "steady", Burst: "burst", Boundary: "boundary", Poisson: "poisson", Ramp: "ramp", OnOff: "onoff"}

// Patterns returns every pattern, in the order of their constants.
func Patterns() []Pattern {
	return []Pattern{Steady, Burst, Boundary, Poisson, Ramp, OnOff}
}

// String returns the pattern's name: steady, burst, boundary, poisson, ramp
// or onoff.
func (p Pattern) String() string {
	if p >= Steady && int(p) < len(patternNames) {
		return patternNames[p]
	}
	return fmt.Sprintf("Pattern(%d)", uint8(p))
}

// Periodic reports whether the pattern repeats every period (burst,
// boundary and onoff), so that its traffic needs a period.
func (p Pattern) Periodic() bool {
	return p == Burst || p == Boundary || p == OnOff
}

// ParsePattern returns the pattern with the given name.
func ParsePattern(name string) (Pattern, error) {
	for _, p := range Patterns() {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown pattern %q (want one of %s)", name, patternList())
}

func patternList() string {
	names := make([]string, 0, len(patternNames))
	for _, p := range Patterns() {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// Limits on generated traffic.
const (
	// MaxRatePerSecond is the highest rate of generated traffic, per key.
	MaxRatePerSecond = 1_000_000
	// MaxDuration is the longest generated traffic: 30 days.
	MaxDuration = 30 * 24 * time.Hour
	// MaxKeys is the most keys generated traffic may have.
	MaxKeys = 1_000_000
	// PatternEpoch is where generated traffic starts (for the periodic
	// patterns: the first multiple of the period from there on), in ms
	// since the Unix epoch: 2026-01-01T00:00:00Z, a whole number of days,
	// so that windows of any period that divides a day start there.
	PatternEpoch = 1767225600000
)

// Rate is an exact request rate: N requests per Per. Per is a whole
// number of milliseconds.
type Rate struct {
	N   int64
	Per time.Duration
}

// ParseRate parses a rate written as requests per second, an integer or a
// decimal fraction with at most 6 digits after the point ("10", "2.5",
// "0.001"), or as N/DUR, N requests per Go duration DUR ("100/1m",
// "1/250ms"). The rate must be positive and at most MaxRatePerSecond per
// second; DUR must be a whole number of milliseconds.
func ParseRate(s string) (Rate, error) {
	var r Rate
	if num, per, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 1 {
			return Rate{}, fmt.Errorf("rate %q: want a positive integer count before the /", s)
		}
		d, err := time.ParseDuration(per)
		if err != nil || d <= 0 {
			return Rate{}, fmt.Errorf("rate %q: want a positive Go duration after the / (1s, 1m, 250ms)", s)
		}
		if d%time.Millisecond != 0 {
			return Rate{}, fmt.Errorf("rate %q: the duration must be a whole number of milliseconds", s)
		}
		r = Rate{N: n, Per: d}
	} else {
		whole, frac, _ := strings.Cut(s, ".")
		if whole == "" || !isDigits(whole) || (frac != "" && !isDigits(frac)) || strings.HasSuffix(s, ".") {
			return Rate{}, fmt.Errorf("rate %q: want requests per second (10, 2.5) or N/DUR (100/1m)", s)
		}
		if len(frac) > 6 {
			return Rate{}, fmt.Errorf("rate %q: at most 6 digits after the point", s)
		}
		if len(strings.TrimLeft(whole, "0")) > 7 {
			return Rate{}, fmt.Errorf("rate %q is more than %d per second", s, MaxRatePerSecond)
		}
		n, _ := strconv.ParseInt(strings.TrimLeft(whole, "0")+frac, 10, 64) // at most 13 digits
		per := time.Second
		for range len(frac) {
			per *= 10
		}
		r = Rate{N: n, Per: per}
	}
	if err := r.Validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Validate reports whether r is a rate that traffic can be generated at.
func (r Rate) Validate() error {
	switch {
	case r.N <= 0 || r.Per <= 0:
		return errors.New("the rate must be positive")
	case r.Per%time.Millisecond != 0:
		return fmt.Errorf("the rate's duration must be a whole number of milliseconds, got %v", r.Per)
	}
	// N/Per ≤ MaxRatePerSecond/s  ⟺  N·1000 ≤ MaxRatePerSecond·(Per in ms).
	hi, lo := bits.Mul64(uint64(r.N), 1000)
	limit := uint64(MaxRatePerSecond) * uint64(r.Per/time.Millisecond)
	if hi > 0 || lo > limit {
		return fmt.Errorf("the rate must be at most %d per second", MaxRatePerSecond)
	}
	return nil
}

// reduced returns r with N and Per in lowest terms (Per in ms).
func (r Rate) reduced() Rate {
	a, b := r.N, int64(r.Per/time.Millisecond)
	g := gcd(a, b)
	return Rate{N: a / g, Per: time.Duration(b/g) * time.Millisecond}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// String returns the rate as ParseRate reads it: per second ("10/s",
// "2.5/s") when Per is 1s, 10s, … or 1000000s, else "N/DUR" ("100/1m").
func (r Rate) String() string {
	digits := 0
	for p := time.Second; p <= 1_000_000*time.Second; p *= 10 {
		if r.Per == p {
			s := strconv.FormatInt(r.N, 10)
			if digits > 0 {
				if len(s) <= digits {
					s = strings.Repeat("0", digits-len(s)+1) + s
				}
				s = strings.TrimRight(s[:len(s)-digits]+"."+s[len(s)-digits:], "0")
				s = strings.TrimSuffix(s, ".")
			}
			return s + "/s"
		}
		digits++
	}
	return fmt.Sprintf("%d/%s", r.N, shortDuration(r.Per))
}

// Traffic describes generated traffic: Keys keys ("client-1" to
// "client-N"), each sending requests of cost 1 in the Pattern at Rate on
// average, for Duration from Start, each request running for Hold. Every
// key sends the same requests, except with Poisson, where each key has its
// own random stream. The requests of all keys come in time order; those at
// the same millisecond come by key number, then in each key's order.
//
// Every pattern but Poisson is defined by Λ(t), the number of requests a
// key should have sent t ms after the start (a real number, Λ(0) = 0): in
// millisecond m it sends ⌈Λ(m+1)⌉ − ⌈Λ(m)⌉ requests, so ⌈Λ(t)⌉ by time t,
// and ⌈R·D⌉ in all, R being the rate per ms and D the duration. With P
// the period and k = ⌊t/P⌋:
//
//	steady    Λ(t) = R·t
//	burst     Λ(t) = R·P·⌈t/P⌉: a period's R·P requests at its first ms
//	boundary  Λ rises by R·P at the last ms of each even-numbered period
//	          (the first is period 0) and by R·P at the first ms of each
//	          odd-numbered one: two periods' requests within 1 ms, half
//	          before and half after a window boundary
//	ramp      Λ(t) = R·t²/D: the rate rises linearly from 0 to 2R
//	onoff     Λ(t) = R·(k·P + min(2·(t − k·P), P)): rate 2R in the first
//	          half of each period, nothing in the second
//
// Poisson: each key's gaps are independent and exponentially distributed
// with mean 1/R, in exact integer arithmetic from a PCG generator (of
// math/rand/v2) seeded with (Seed, key number − 1): a gap is
// −ln(U)/R with U = (⌊x/2^11⌋ + 1)/2^53 for the generator's next x, the
// logarithm computed in fixed point with 32 fractional bits (in ms), and a
// request goes at the whole ms its arrival time falls in; the first
// arrival comes one gap after the start. The output depends only on the
// fields, on every platform.
type Traffic struct {
	Pattern Pattern
	// Rate is each key's mean rate.
	Rate Rate
	// Duration is how long the traffic lasts, a whole number of ms from
	// 1ms to MaxDuration. Requests fall in [Start, Start + Duration).
	Duration time.Duration
	// Period is the period of Burst, Boundary and OnOff (the policy's
	// period, so that windows align with it): a whole number of ms, at
	// least 2ms for Boundary and OnOff; Duration must be a whole number of
	// periods. The other patterns ignore it.
	Period time.Duration
	// Keys is the number of keys, from 1 to MaxKeys.
	Keys int
	// Seed seeds Poisson; the other patterns ignore it.
	Seed uint64
	// Hold is how long each request runs (its Duration), a whole number
	// of ms from 0 (the default: released at once) to MaxDuration. Only
	// a concurrency policy uses it.
	Hold time.Duration
}

// Validate reports what is wrong with t, if anything.
func (t Traffic) Validate() error {
	switch {
	case t.Pattern < Steady || t.Pattern > OnOff:
		return fmt.Errorf("unknown pattern %v", t.Pattern)
	case t.Keys < 1 || t.Keys > MaxKeys:
		return fmt.Errorf("keys must be from 1 to %d, got %d", MaxKeys, t.Keys)
	case t.Duration <= 0 || t.Duration%time.Millisecond != 0:
		return fmt.Errorf("duration must be a positive whole number of milliseconds, got %v", t.Duration)
	case t.Duration > MaxDuration:
		return fmt.Errorf("duration must be at most %v (30 days), got %v", MaxDuration, t.Duration)
	case t.Hold < 0 || t.Hold%time.Millisecond != 0:
		return fmt.Errorf("hold must be a whole number of milliseconds from 0, got %v", t.Hold)
	case t.Hold > MaxDuration:
		return fmt.Errorf("hold must be at most %v (30 days), got %v", MaxDuration, t.Hold)
	}
	if err := t.Rate.Validate(); err != nil {
		return err
	}
	if t.Pattern.Periodic() {
		min := time.Millisecond
		if t.Pattern != Burst {
			min = 2 * time.Millisecond
		}
		switch {
		case t.Period < min || t.Period%time.Millisecond != 0:
			return fmt.Errorf("the %v pattern needs a period that is a whole number of milliseconds, at least %v, got %v", t.Pattern, min, t.Period)
		case t.Duration%t.Period != 0:
			return fmt.Errorf("the %v pattern needs a duration that is a whole number of periods (%v), got %v", t.Pattern, t.Period, t.Duration)
		}
	}
	if end := t.Start() + int64(t.Duration/time.Millisecond) - 1 + int64(t.Hold/time.Millisecond); end > MaxTime || end < 0 {
		return fmt.Errorf("the traffic would end after the latest time a trace may hold (%d ms)", int64(MaxTime))
	}
	return nil
}

// Start returns the time of the traffic's start, in ms since the Unix
// epoch: PatternEpoch, or for a periodic pattern the first multiple of the
// period from PatternEpoch on.
func (t Traffic) Start() int64 {
	if !t.Pattern.Periodic() || t.Period < time.Millisecond {
		return PatternEpoch
	}
	p := int64(t.Period / time.Millisecond)
	k := (PatternEpoch + p - 1) / p
	if k > MaxTime/p+1 {
		return MaxTime + 1
	}
	return k * p
}

// String describes t, such as "boundary, 100/1m per key, 4m, 1 key".
func (t Traffic) String() string {
	keys := "keys"
	if t.Keys == 1 {
		keys = "key"
	}
	s := fmt.Sprintf("%v, %v per key, %s, %d %s", t.Pattern, t.Rate, shortDuration(t.Duration), t.Keys, keys)
	if t.Pattern == Poisson {
		s += fmt.Sprintf(", seed %d", t.Seed)
	}
	if t.Hold > 0 {
		s += ", each request held " + shortDuration(t.Hold)
	}
	return s
}

// Generator yields the requests of generated traffic; it is a Source. Its
// memory is a few words per key.
type Generator struct {
	traffic Traffic
	start   int64  // ms since the Unix epoch
	a, b    uint64 // the rate, a requests per b ms, in lowest terms
	d, p    uint64 // duration and period in ms
	names   []string
	pending streamHeap
}

var _ Source = (*Generator)(nil)

// NewGenerator returns a Generator of t's requests.
func NewGenerator(t Traffic) (*Generator, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("traffic: %w", err)
	}
	r := t.Rate.reduced()
	g := &Generator{
		traffic: t,
		start:   t.Start(),
		a:       uint64(r.N),
		b:       uint64(r.Per / time.Millisecond),
		d:       uint64(t.Duration / time.Millisecond),
		p:       uint64(t.Period / time.Millisecond),
		names:   make([]string, t.Keys),
		pending: make(streamHeap, 0, t.Keys),
	}
	for k := range t.Keys {
		g.names[k] = "client-" + strconv.Itoa(k+1)
		s := &stream{key: k}
		if t.Pattern == Poisson {
			s.rng = rand.NewPCG(t.Seed, uint64(k))
		}
		if g.advance(s) {
			g.pending = append(g.pending, s)
		}
	}
	heap.Init(&g.pending)
	return g, nil
}

// Traffic returns the traffic g generates.
func (g *Generator) Traffic() Traffic { return g.traffic }

// Start returns the time of the traffic's start, in ms since the Unix
// epoch.
func (g *Generator) Start() int64 { return g.start }

// Next returns the next request, or io.EOF after the last one.
func (g *Generator) Next() (Request, error) {
	if len(g.pending) == 0 {
		return Request{}, io.EOF
	}
	s := g.pending[0]
	req := Request{T: g.start + int64(s.t), Key: g.names[s.key], Cost: 1, Duration: int64(g.traffic.Hold / time.Millisecond)}
	if g.advance(s) {
		heap.Fix(&g.pending, 0)
	} else {
		heap.Pop(&g.pending)
	}
	return req, nil
}

// stream is one key's requests: the offset from the start, in ms, of its
// next request.
type stream struct {
	key int
	t   uint64 // offset of the pending request
	i   uint64 // number of the next request (the Λ patterns)
	rng *rand.PCG
	acc uint64 // arrival time of the last request, ms in 32.32 fixed point (Poisson)
}

// advance computes s's next request into s.t and reports whether it falls
// within the duration.
func (g *Generator) advance(s *stream) bool {
	var m uint64
	if g.traffic.Pattern == Poisson {
		gap, ok := expGap(s.rng, g.a, g.b)
		if !ok || gap >= g.d<<32-s.acc {
			return false
		}
		s.acc += gap
		m = s.acc >> 32
	} else {
		// Request i goes at the smallest m with Λ(m+1) > i. For the
		// patterns with Λ(t) = R·G(t), G integer-valued: G(m+1) > i·b/a
		// ⟺ G(m+1) ≥ x + 1, with x = ⌊i·b/a⌋.
		x, rem, ok := mulDiv(s.i, g.b, g.a)
		if !ok || x >= g.d {
			return false
		}
		switch g.traffic.Pattern {
		case Steady:
			m = x
		case Burst:
			m = x / g.p * g.p
		case Boundary:
			if k := x / g.p; k%2 == 0 {
				m = (k+1)*g.p - 1
			} else {
				m = k * g.p
			}
		case OnOff:
			// G(k·P + j) = k·P + min(2j, P) ≥ x + 1 at j = ⌈(x + 1 − k·P)/2⌉.
			k := x / g.p
			j := (x + 1 - k*g.p + 1) / 2
			m = k*g.p + j - 1
		case Ramp:
			// a·(m+1)² > i·b·D ⟺ (m+1)² ≥ X + 1, X = ⌊i·b·D/a⌋ = x·D + ⌊rem·D/a⌋.
			frac, _, _ := mulDiv(rem, g.d, g.a) // < D: rem < a
			X := x*g.d + frac                   // x < D < 2^32, so no overflow
			m = ceilSqrt(X+1) - 1
		}
		s.i++
	}
	if m >= g.d {
		return false
	}
	s.t = m
	return true
}

// streamHeap orders streams by their pending request's time, then by key.
type streamHeap []*stream

func (h streamHeap) Len() int { return len(h) }
func (h streamHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].key < h[j].key
}
func (h streamHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *streamHeap) Push(x any)   { *h = append(*h, x.(*stream)) }
func (h *streamHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

// mulDiv returns ⌊x·y/z⌋ and the remainder, computed without overflow,
// and false when the quotient does not fit in 64 bits. z must not be 0.
func mulDiv(x, y, z uint64) (q, r uint64, ok bool) {
	hi, lo := bits.Mul64(x, y)
	if hi >= z {
		return 0, 0, false
	}
	q, r = bits.Div64(hi, lo, z)
	return q, r, true
}

// ceilSqrt returns ⌈√n⌉.
func ceilSqrt(n uint64) uint64 {
	// Integer square root, digit by digit (base 4).
	var root uint64
	rem := n
	bit := uint64(1) << 62
	for bit > n {
		bit >>= 2
	}
	for bit != 0 {
		if rem >= root+bit {
			rem -= root + bit
			root = root>>1 + bit
		} else {
			root >>= 1
		}
		bit >>= 2
	}
	if root*root < n {
		root++
	}
	return root
}

// ln2Q64 is ln 2 in 0.64 fixed point: ⌊ln 2 · 2^64⌋.
const ln2Q64 = 0xB17217F7D1CF79AB

// expGap returns the next gap of a Poisson process of rate a/b per ms, in
// ms in 32.32 fixed point: −ln(U)·b/a with U = (⌊x/2^11⌋ + 1)/2^53 for
// the generator's next x. It returns false when the gap does not fit (it
// is then beyond any duration).
func expGap(rng *rand.PCG, a, b uint64) (uint64, bool) {
	u := rng.Uint64()>>11 + 1        // 1 to 2^53
	e := uint64(53)<<32 - log2Q32(u) // −log2(U), 32.32 fixed point, ≤ 53·2^32
	l, _ := bits.Mul64(e, ln2Q64)    // −ln(U) = −log2(U)·ln 2, 32.32
	gap, _, ok := mulDiv(l, b, a)
	return gap, ok
}

// log2Q32 returns log2(u) in 32.32 fixed point, rounded down (to within
// 2^-32 plus the truncations of 32 squarings). u must not be 0.
func log2Q32(u uint64) uint64 {
	n := uint64(bits.Len64(u) - 1)
	out := n << 32
	// x = u/2^n in [1, 2), in 2.62 fixed point.
	var x uint64
	if n <= 62 {
		x = u << (62 - n)
	} else {
		x = u >> (n - 62)
	}
	for i := 31; i >= 0; i-- {
		hi, lo := bits.Mul64(x, x) // x² in 4.124
		x = hi<<2 | lo>>62         // x² in 2.62, in [1, 4)
		if x >= 1<<63 {
			out |= 1 << i
			x >>= 1
		}
	}
	return out
}
