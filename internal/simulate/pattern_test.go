package simulate

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// generate returns every request of t.
func generate(t *testing.T, tr Traffic) []Request {
	t.Helper()
	g, err := NewGenerator(tr)
	if err != nil {
		t.Fatalf("NewGenerator(%+v): %v", tr, err)
	}
	var out []Request
	for {
		r, err := g.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, r)
	}
}

// digest returns the SHA-256 of reqs written as a trace.
func digest(reqs []Request) string {
	h := sha256.New()
	var b []byte
	for _, r := range reqs {
		b = append(r.AppendCSV(b[:0]), '\n')
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func mustRate(t *testing.T, s string) Rate {
	t.Helper()
	r, err := ParseRate(s)
	if err != nil {
		t.Fatalf("ParseRate(%q): %v", s, err)
	}
	return r
}

func TestParseRate(t *testing.T) {
	valid := []struct {
		in   string
		want Rate
		str  string
	}{
		{"10", Rate{10, time.Second}, "10/s"},
		{"2.5", Rate{25, 10 * time.Second}, "2.5/s"},
		{"2.50", Rate{250, 100 * time.Second}, "2.5/s"},
		{"0.001", Rate{1, 1000 * time.Second}, "0.001/s"},
		{"0.000001", Rate{1, 1_000_000 * time.Second}, "0.000001/s"},
		{"007", Rate{7, time.Second}, "7/s"},
		{"1000000", Rate{1_000_000, time.Second}, "1000000/s"},
		{"100/1m", Rate{100, time.Minute}, "100/1m"},
		{"1/250ms", Rate{1, 250 * time.Millisecond}, "1/250ms"},
		{"5/1s", Rate{5, time.Second}, "5/s"},
		{"7/1h30m", Rate{7, 90 * time.Minute}, "7/1h30m"},
		{"1000/1ms", Rate{1000, time.Millisecond}, "1000/1ms"},
	}
	for _, tt := range valid {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRate(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseRate(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
			}
			if s := got.String(); s != tt.str {
				t.Errorf("ParseRate(%q).String() = %q, want %q", tt.in, s, tt.str)
			}
			if back, err := ParseRate(strings.TrimSuffix(got.String(), "/s")); err != nil || back.reduced() != got.reduced() {
				t.Errorf("ParseRate(String()) = %+v, %v, want %+v", back, err, got)
			}
		})
	}
	invalid := []struct{ in, want string }{
		{"", "want requests per second"},
		{"0", "the rate must be positive"},
		{"0.0", "the rate must be positive"},
		{"-1", "want requests per second"},
		{"+1", "want requests per second"},
		{"1e3", "want requests per second"},
		{"1.", "want requests per second"},
		{".5", "want requests per second"},
		{"1.0000001", "at most 6 digits after the point"},
		{"1000001", "at most 1000000 per second"},
		{"99999999999", "more than 1000000 per second"},
		{"1001/1ms", "at most 1000000 per second"},
		{"0/1s", "positive integer count"},
		{"x/1s", "positive integer count"},
		{"5/", "positive Go duration"},
		{"5/0s", "positive Go duration"},
		{"5/-1s", "positive Go duration"},
		{"5/1500us", "whole number of milliseconds"},
		{"5/minute", "positive Go duration"},
	}
	for _, tt := range invalid {
		t.Run("invalid "+tt.in, func(t *testing.T) {
			got, err := ParseRate(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseRate(%q) = %+v, %v, want an error containing %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParsePattern(t *testing.T) {
	for _, p := range Patterns() {
		got, err := ParsePattern(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePattern(%q) = %v, %v, want %v", p.String(), got, err, p)
		}
	}
	_, err := ParsePattern("bursty")
	if want := `unknown pattern "bursty" (want one of steady, burst, boundary, poisson, ramp, onoff)`; err == nil || err.Error() != want {
		t.Errorf("ParsePattern(bursty) = %v, want %q", err, want)
	}
}

// TestPatternGolden pins each pattern's requests: their number, the first
// offsets from the start, and a digest of them all, for 100 requests per
// minute over 4 minutes, two keys.
func TestPatternGolden(t *testing.T) {
	tests := []struct {
		pattern Pattern
		n       int
		first   []int64 // offsets of client-1's first requests, ms
		digest  string
	}{
		{Steady, 800, []int64{0, 600, 1200, 1800, 2400}, "4c326239c486011abd5bcced75606083ee18c23a17c48b3b7d563a20af748427"},
		{Burst, 800, []int64{0, 0, 0, 0, 0}, "be84ddb6f8b821b304b5021521b87d63131ef72a4e06417388eba7898e3f4df5"},
		{Boundary, 800, []int64{59999, 59999, 59999, 59999, 59999}, "c85e6e13f3103bb17c685935fc8e00a921eae5502da8e019c4ea6ffc0030abd8"},
		{Poisson, 762, []int64{308, 1758, 1959, 4205, 4418}, "a8ae17481b3a804daa26fd54060c4843a8f108b647f66c216c280ff613434883"},
		{Ramp, 800, []int64{0, 12000, 16970, 20784, 24000}, "f505cbcfa6fe424dff01a45357c0592231fd0358a330354355561abbc4ee2193"},
		{OnOff, 800, []int64{0, 300, 600, 900, 1200}, "a7325bf57388d4f6e8027156d5ce5833c73802a54314b02310b33f143617a903"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern.String(), func(t *testing.T) {
			tr := Traffic{Pattern: tt.pattern, Rate: mustRate(t, "100/1m"), Duration: 4 * time.Minute, Period: time.Minute, Keys: 2, Seed: 1}
			reqs := generate(t, tr)
			if len(reqs) != tt.n {
				t.Errorf("%d requests, want %d", len(reqs), tt.n)
			}
			var first []int64
			for _, r := range reqs {
				if r.Key == "client-1" && len(first) < len(tt.first) {
					first = append(first, r.T-PatternEpoch)
				}
			}
			if !slices.Equal(first, tt.first) {
				t.Errorf("first offsets %v, want %v", first, tt.first)
			}
			if got := digest(reqs); got != tt.digest {
				t.Errorf("digest %s, want %s", got, tt.digest)
			}
			if again := digest(generate(t, tr)); again != tt.digest {
				t.Errorf("a second generator gave digest %s, want %s", again, tt.digest)
			}
		})
	}
}

// lambda returns Λ(t) of a deterministic pattern, the exact number of
// requests a key should have sent t ms after the start, from the
// definitions in Traffic's doc comment.
func lambda(tr Traffic, t int64) *big.Rat {
	r := big.NewRat(tr.Rate.N, int64(tr.Rate.Per/time.Millisecond))
	p := int64(tr.Period / time.Millisecond)
	d := int64(tr.Duration / time.Millisecond)
	var g *big.Rat // Λ(t)/R
	switch tr.Pattern {
	case Steady:
		g = big.NewRat(t, 1)
	case Burst:
		g = big.NewRat((t+p-1)/p*p, 1) // P·⌈t/P⌉
	case Boundary:
		// Each period's P·R: an even period's when its last ms has
		// passed, an odd period's when its first ms has.
		var n int64
		for k := int64(0); k*p < t; k++ {
			at := k * p // the ms at which period k's requests go
			if k%2 == 0 {
				at = (k+1)*p - 1
			}
			if at < t {
				n += p
			}
		}
		g = big.NewRat(n, 1)
	case OnOff:
		k := t / p
		g = big.NewRat(k*p+min(2*(t-k*p), p), 1)
	case Ramp:
		g = new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(t), big.NewInt(t)), big.NewInt(d))
	}
	return g.Mul(g, r)
}

func ceilRat(x *big.Rat) int64 {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// TestPatternDefinitions checks every deterministic pattern against its
// definition, millisecond by millisecond: in ms m, a key sends
// ⌈Λ(m+1)⌉ − ⌈Λ(m)⌉ requests, ⌈R·D⌉ in all.
func TestPatternDefinitions(t *testing.T) {
	rates := []string{"100/1m", "7/3s", "2.5", "1/250ms", "1000", "3/7ms"}
	shapes := []struct {
		period, duration time.Duration
	}{
		{time.Second, 2 * time.Second},
		{7 * time.Millisecond, 210 * time.Millisecond},
		{2 * time.Millisecond, 50 * time.Millisecond},
		{1500 * time.Millisecond, 3 * time.Second},
	}
	for _, p := range Patterns() {
		if p == Poisson {
			continue
		}
		for _, rs := range rates {
			for _, sh := range shapes {
				tr := Traffic{Pattern: p, Rate: mustRate(t, rs), Duration: sh.duration, Period: sh.period, Keys: 1}
				t.Run(fmt.Sprintf("%v %s per %v for %v", p, rs, sh.period, sh.duration), func(t *testing.T) {
					reqs := generate(t, tr)
					d := int64(sh.duration / time.Millisecond)
					got := make([]int64, d)
					for _, r := range reqs {
						off := r.T - tr.Start()
						if off < 0 || off >= d {
							t.Fatalf("request at offset %d, outside [0, %d)", off, d)
						}
						got[off]++
					}
					prev := int64(0) // ⌈Λ(0)⌉
					for m := range d {
						next := ceilRat(lambda(tr, m+1))
						if got[m] != next-prev {
							t.Fatalf("ms %d: %d requests, want ⌈Λ(%d)⌉ − ⌈Λ(%d)⌉ = %d", m, got[m], m+1, m, next-prev)
						}
						prev = next
					}
					// ⌈R·D⌉ in all.
					rd := new(big.Rat).Mul(big.NewRat(tr.Rate.N, int64(tr.Rate.Per/time.Millisecond)), big.NewRat(d, 1))
					if want := ceilRat(rd); int64(len(reqs)) != want {
						t.Errorf("%d requests, want ⌈R·D⌉ = %d", len(reqs), want)
					}
				})
			}
		}
	}
}

// TestPatternMeanRate checks the number of requests of long traffic: exact
// for the deterministic patterns, and within 5 standard deviations of
// R·D for poisson (the seeds are fixed, so the test cannot flake).
func TestPatternMeanRate(t *testing.T) {
	for _, p := range Patterns() {
		for _, rs := range []string{"100", "7/3s", "0.5"} {
			t.Run(fmt.Sprintf("%v %s", p, rs), func(t *testing.T) {
				tr := Traffic{Pattern: p, Rate: mustRate(t, rs), Duration: 20 * time.Minute, Period: 10 * time.Second, Keys: 3, Seed: 42}
				g, err := NewGenerator(tr)
				if err != nil {
					t.Fatal(err)
				}
				perKey := make(map[string]int64)
				for {
					r, err := g.Next()
					if err == io.EOF {
						break
					}
					perKey[r.Key]++
				}
				a, b := tr.Rate.N, int64(tr.Rate.Per/time.Millisecond)
				d := int64(tr.Duration / time.Millisecond)
				mean := float64(a*d) / float64(b)
				for k := 1; k <= tr.Keys; k++ {
					got := perKey[fmt.Sprintf("client-%d", k)]
					if p != Poisson {
						if want := (a*d + b - 1) / b; got != want {
							t.Errorf("client-%d: %d requests, want ⌈R·D⌉ = %d", k, got, want)
						}
						continue
					}
					if dev := math.Abs(float64(got)-mean) / math.Sqrt(mean); dev > 5 {
						t.Errorf("client-%d: %d requests, %.1f standard deviations from %g", k, got, dev, mean)
					}
				}
			})
		}
	}
}

func TestPoissonSeeds(t *testing.T) {
	tr := Traffic{Pattern: Poisson, Rate: mustRate(t, "50"), Duration: 10 * time.Second, Keys: 2, Seed: 1}
	one := generate(t, tr)
	if again := generate(t, tr); !slices.Equal(one, again) {
		t.Error("the same seed gave different requests")
	}
	tr.Seed = 2
	if two := generate(t, tr); slices.Equal(one, two) {
		t.Error("seeds 1 and 2 gave the same requests")
	}
	var times [2][]int64
	for _, r := range one {
		k := 0
		if r.Key == "client-2" {
			k = 1
		}
		times[k] = append(times[k], r.T)
	}
	if slices.Equal(times[0], times[1]) {
		t.Error("client-1 and client-2 have the same times; each key should have its own stream")
	}
}

func TestGeneratorOrder(t *testing.T) {
	for _, p := range Patterns() {
		t.Run(p.String(), func(t *testing.T) {
			tr := Traffic{Pattern: p, Rate: mustRate(t, "20"), Duration: 2 * time.Second, Period: 500 * time.Millisecond, Keys: 4, Seed: 7}
			reqs := generate(t, tr)
			perKey := make(map[string][]int64)
			for i, r := range reqs {
				if r.Cost != 1 {
					t.Fatalf("request %d costs %d, want 1", i, r.Cost)
				}
				if r.T < tr.Start() || r.T >= tr.Start()+2000 {
					t.Fatalf("request %d at %d, outside the traffic's 2s from %d", i, r.T, tr.Start())
				}
				if i > 0 {
					prev := reqs[i-1]
					if r.T < prev.T || (r.T == prev.T && keyNumber(r.Key) < keyNumber(prev.Key)) {
						t.Fatalf("request %d (%d, %s) comes after (%d, %s)", i, r.T, r.Key, prev.T, prev.Key)
					}
				}
				perKey[r.Key] = append(perKey[r.Key], r.T)
			}
			if len(perKey) != 4 {
				t.Fatalf("%d keys, want 4", len(perKey))
			}
			if p != Poisson {
				for k, ts := range perKey {
					if !slices.Equal(ts, perKey["client-1"]) {
						t.Errorf("%s's times differ from client-1's", k)
					}
				}
			}
		})
	}
}

func keyNumber(key string) int {
	var n int
	fmt.Sscanf(key, "client-%d", &n)
	return n
}

func TestTrafficValidate(t *testing.T) {
	ok := Traffic{Pattern: Boundary, Rate: Rate{100, time.Minute}, Duration: 4 * time.Minute, Period: time.Minute, Keys: 1}
	tests := []struct {
		name   string
		modify func(*Traffic)
		want   string
	}{
		{"valid", func(*Traffic) {}, ""},
		{"no pattern", func(tr *Traffic) { tr.Pattern = 0 }, "unknown pattern"},
		{"no keys", func(tr *Traffic) { tr.Keys = 0 }, "keys must be from 1 to 1000000, got 0"},
		{"too many keys", func(tr *Traffic) { tr.Keys = MaxKeys + 1 }, "keys must be from 1 to 1000000"},
		{"zero duration", func(tr *Traffic) { tr.Duration = 0 }, "duration must be a positive whole number of milliseconds"},
		{"sub-ms duration", func(tr *Traffic) { tr.Duration = 1500 * time.Microsecond }, "whole number of milliseconds"},
		{"long duration", func(tr *Traffic) { tr.Pattern, tr.Duration = Steady, 31*24*time.Hour }, "duration must be at most 720h0m0s"},
		{"no rate", func(tr *Traffic) { tr.Rate = Rate{} }, "the rate must be positive"},
		{"fast rate", func(tr *Traffic) { tr.Rate = Rate{2_000_001, 2 * time.Second} }, "at most 1000000 per second"},
		{"partial period", func(tr *Traffic) { tr.Duration = 90 * time.Second }, "the boundary pattern needs a duration that is a whole number of periods (1m0s), got 1m30s"},
		{"1ms boundary", func(tr *Traffic) { tr.Period, tr.Duration = time.Millisecond, time.Second }, "at least 2ms"},
		{"1ms onoff", func(tr *Traffic) { tr.Pattern, tr.Period, tr.Duration = OnOff, time.Millisecond, time.Second }, "at least 2ms"},
		{"1ms burst", func(tr *Traffic) { tr.Pattern, tr.Period, tr.Duration = Burst, time.Millisecond, time.Second }, ""},
		{"sub-ms period", func(tr *Traffic) { tr.Period = 2500 * time.Microsecond; tr.Duration = 5 * time.Millisecond }, "whole number of milliseconds"},
		{"steady ignores the period", func(tr *Traffic) { tr.Pattern, tr.Period, tr.Duration = Steady, 0, 90*time.Second }, ""},
		{"ten-year period", func(tr *Traffic) { tr.Period, tr.Duration = 3650*24*time.Hour, 0 }, "duration must be a positive"},
		{"hold", func(tr *Traffic) { tr.Hold = 2 * time.Second }, ""},
		{"negative hold", func(tr *Traffic) { tr.Hold = -time.Millisecond }, "hold must be a whole number of milliseconds from 0, got -1ms"},
		{"sub-ms hold", func(tr *Traffic) { tr.Hold = 1500 * time.Microsecond }, "hold must be a whole number of milliseconds"},
		{"long hold", func(tr *Traffic) { tr.Hold = 31 * 24 * time.Hour }, "hold must be at most 720h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := ok
			tt.modify(&tr)
			err := tr.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if _, gerr := NewGenerator(tr); gerr == nil {
				t.Error("NewGenerator accepted what Validate refused")
			}
		})
	}
}

// TestGeneratorHold checks that every generated request carries the
// traffic's Hold as its Duration, and that String says so.
func TestGeneratorHold(t *testing.T) {
	tr := Traffic{Pattern: Steady, Rate: Rate{10, time.Second}, Duration: time.Second, Keys: 2, Hold: 250 * time.Millisecond}
	g, err := NewGenerator(tr)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := g.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if r.Duration != 250 {
			t.Fatalf("request %d %+v: Duration %d, want 250", n, r, r.Duration)
		}
	}
	if n != 20 {
		t.Errorf("%d requests, want 20", n)
	}
	if got, want := tr.String(), "steady, 10/s per key, 1s, 2 keys, each request held 250ms"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestTrafficStart(t *testing.T) {
	tests := []struct {
		pattern Pattern
		period  time.Duration
		want    int64
	}{
		{Steady, 7 * time.Minute, PatternEpoch},
		{Burst, time.Minute, PatternEpoch},
		{Burst, 24 * time.Hour, PatternEpoch},
		{Boundary, 7 * time.Minute, (PatternEpoch + 419_999) / 420_000 * 420_000},
	}
	for _, tt := range tests {
		tr := Traffic{Pattern: tt.pattern, Period: tt.period}
		if got := tr.Start(); got != tt.want {
			t.Errorf("Traffic{%v, period %v}.Start() = %d, want %d", tt.pattern, tt.period, got, tt.want)
		}
		if tt.pattern.Periodic() && tr.Start()%int64(tt.period/time.Millisecond) != 0 {
			t.Errorf("%v: start %d is not a multiple of the period", tt.pattern, tr.Start())
		}
	}
	if time.UnixMilli(PatternEpoch).UTC() != time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) {
		t.Errorf("PatternEpoch = %v, want 2026-01-01T00:00:00Z", time.UnixMilli(PatternEpoch).UTC())
	}
}

func TestCeilSqrt(t *testing.T) {
	for n := uint64(0); n < 100_000; n++ {
		r := ceilSqrt(n)
		if r*r < n || (r > 0 && (r-1)*(r-1) >= n) {
			t.Fatalf("ceilSqrt(%d) = %d", n, r)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		n := rng.Uint64() >> rng.IntN(64)
		want := new(big.Int).Sqrt(new(big.Int).SetUint64(n))
		if want.Mul(want, want).Cmp(new(big.Int).SetUint64(n)) != 0 {
			want.Sqrt(new(big.Int).SetUint64(n)).Add(want, big.NewInt(1))
		} else {
			want.Sqrt(new(big.Int).SetUint64(n))
		}
		if got := ceilSqrt(n); got != want.Uint64() {
			t.Fatalf("ceilSqrt(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestLog2Q32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200_000 {
		u := rng.Uint64()>>11 + 1
		if i < 64 {
			u = 1 << (i % 54)
		}
		got := float64(log2Q32(u)) / (1 << 32)
		want := math.Log2(float64(u))
		// Rounded down: within 2^-32 and the squarings' truncation.
		if d := want - got; d < -1e-12 || d > 4e-9 {
			t.Fatalf("log2Q32(%d) = %.12f, want %.12f (off by %g)", u, got, want, d)
		}
	}
}

// TestExpGapMean checks the mean and the spread of the exponential gaps:
// mean b/a ms, and as many gaps as a true exponential distribution longer
// than the mean (a fraction 1/e).
func TestExpGapMean(t *testing.T) {
	rng := rand.NewPCG(5, 6)
	const n = 200_000
	a, b := uint64(3), uint64(70) // a mean gap of 70/3 ms
	var sum float64
	longer := 0
	for range n {
		gap, ok := expGap(rng, a, b)
		if !ok {
			t.Fatal("expGap overflowed")
		}
		ms := float64(gap) / (1 << 32)
		sum += ms
		if ms > 70.0/3 {
			longer++
		}
	}
	mean := 70.0 / 3
	if got := sum / n; math.Abs(got-mean) > 5*mean/math.Sqrt(n) {
		t.Errorf("mean gap %g ms, want %g within 5 standard errors", got, mean)
	}
	if frac := float64(longer) / n; math.Abs(frac-1/math.E) > 5*math.Sqrt(0.25/n) {
		t.Errorf("%.4f of gaps exceed the mean, want 1/e = %.4f", frac, 1/math.E)
	}
}

func TestMulDiv(t *testing.T) {
	q, r, ok := mulDiv(1<<63, 6, 4)
	if !ok || q != 3<<62 || r != 0 {
		t.Errorf("mulDiv(2^63, 6, 4) = %d, %d, %v", q, r, ok)
	}
	if _, _, ok := mulDiv(1<<63, 4, 2); ok {
		t.Error("mulDiv(2^63, 4, 2) fits, want an overflow")
	}
}
