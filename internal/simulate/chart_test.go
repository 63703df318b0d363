package simulate

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestChartFormat(t *testing.T) {
	tests := []struct{ name, want, err string }{
		{"boundary.svg", "svg", ""},
		{"docs/images/boundary.png", "png", ""},
		{"UPPER.PNG", "png", ""},
		{"chart.jpg", "", `chart file "chart.jpg": want a name ending in .svg or .png`},
		{"chart", "", `chart file "chart": want a name ending in .svg or .png`},
		{"svg", "", "want a name ending in .svg or .png"},
		{"a.svg.txt", "", "want a name ending in .svg or .png"},
	}
	for _, tt := range tests {
		got, err := ChartFormat(tt.name)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ChartFormat(%q) = %q, %v, want %q, %q", tt.name, got, err, tt.want, tt.err)
		}
	}
}

// boundaryChart returns a chart of the boundary pattern, 100 per minute
// for 4 minutes, under policies with a limit of 100 per minute.
func boundaryChart(t *testing.T, policies []sluice.Policy) *Chart {
	t.Helper()
	tr := Traffic{Pattern: Boundary, Rate: Rate{100, time.Minute}, Duration: 4 * time.Minute, Period: time.Minute, Keys: 1}
	g, err := NewGenerator(tr)
	if err != nil {
		t.Fatal(err)
	}
	c := NewChart(policies)
	c.From, c.To = g.Start(), g.Start()+tr.Duration.Milliseconds()
	c.Heading = []string{"heading line one", "Traffic: " + tr.String()}
	err = Run(context.Background(), g, policies, func(req Request, ds []sluice.Decision) error { return c.Add(req, ds) })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChartSVG(t *testing.T) {
	c := boundaryChart(t, allPolicies(100, time.Minute, 100))
	var buf bytes.Buffer
	if err := c.Write(&buf, "svg"); err != nil {
		t.Fatalf("Write(svg): %v", err)
	}
	// Well-formed XML whose root is an svg element.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	svg := buf.String()
	for _, want := range []string{
		"heading line one",
		"Traffic: boundary, 100/1m per key, 4m, 1 key",
		"token_bucket: admitted 200 of 400 requests, at most 100 in any 1m",
		"gcra: admitted 200 of 400",
		"leaky_bucket: admitted 200 of 400 requests, at most 100 started in any 1m",
		"fixed_window: admitted 400 of 400 requests, at most 200 in any 1m",
		"sliding_log: admitted 200 of 400",
		"sliding_window: admitted 200 of 400",
		"limit: 100 per 1m",
		"time since 2026-01-01T00:00:00Z, in minutes",
		"@font-face", // the font is embedded, so the text reads the same everywhere
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	var again bytes.Buffer
	if err := c.Write(&again, "svg"); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("a second Write gave different bytes (error %v)", err)
	}
}

func TestChartPNG(t *testing.T) {
	// Two rows: drawing pixels is slow under the race detector.
	c := boundaryChart(t, []sluice.Policy{sluice.FixedWindow(100, time.Minute), sluice.SlidingLog(100, time.Minute)})
	var buf bytes.Buffer
	if err := c.Write(&buf, "png"); err != nil {
		t.Fatalf("Write(png): %v", err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG signature: % x", buf.Bytes()[:min(8, buf.Len())])
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("png.Decode: %v", err)
	}
	// 720 points wide at 144 dots per inch; rows of 112 points.
	b := img.Bounds()
	if b.Dx() != 1440 || b.Dy() < 2*112*2 {
		t.Errorf("image is %dx%d, want 1440 wide and at least %d high", b.Dx(), b.Dy(), 2*112*2)
	}
	// Not blank: the rows' colours are drawn.
	rgba, ok := img.(*image.RGBA)
	if !ok {
		t.Fatalf("decoded a %T, want *image.RGBA", img)
	}
	for name, clr := range map[string][3]byte{"fixed_window": {0xD5, 0x5E, 0x00}, "sliding_log": {0xCC, 0x79, 0xA7}} {
		found := false
		for i := 0; i+3 < len(rgba.Pix) && !found; i += 4 {
			found = rgba.Pix[i] == clr[0] && rgba.Pix[i+1] == clr[1] && rgba.Pix[i+2] == clr[2]
		}
		if !found {
			t.Errorf("the PNG has no pixel of %s's colour", name)
		}
	}
	var again bytes.Buffer
	if err := c.Write(&again, "png"); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("a second Write gave different bytes (error %v)", err)
	}
}

func TestChartEdgeCases(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		c := NewChart(allPolicies(5, time.Second, 5)[:1])
		for _, format := range []string{"svg", "png"} {
			if err := c.Write(io.Discard, format); err != nil {
				t.Errorf("Write(%s) of an empty chart: %v", format, err)
			}
		}
	})
	t.Run("unknown format", func(t *testing.T) {
		c := NewChart(allPolicies(5, time.Second, 5)[:1])
		if err := c.Write(io.Discard, "gif"); err == nil || !strings.Contains(err.Error(), `unknown format "gif"`) {
			t.Errorf("Write(gif) = %v, want an unknown format error", err)
		}
	})
	t.Run("no policy", func(t *testing.T) {
		if err := NewChart(nil).Write(io.Discard, "svg"); err == nil {
			t.Error("Write with no policy = nil, want an error")
		}
	})
	t.Run("wrong number of decisions", func(t *testing.T) {
		c := NewChart(allPolicies(5, time.Second, 5))
		if err := c.Add(Request{T: 1, Key: "a", Cost: 1}, make([]sluice.Decision, 2)); err == nil {
			t.Error("Add with 2 decisions for 6 policies = nil, want an error")
		}
	})
	t.Run("several keys and one request", func(t *testing.T) {
		c := NewChart(allPolicies(5, time.Second, 5)[:1])
		for _, k := range []string{"a", "b", "c"} {
			if err := c.Add(Request{T: 7, Key: k, Cost: 2}, []sluice.Decision{{Allowed: true}}); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if err := c.Write(&buf, "svg"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "limit: 5 per 1s × 3 keys") {
			t.Error("the SVG lacks the limit times the number of keys")
		}
	})
	t.Run("full", func(t *testing.T) {
		c := NewChart(allPolicies(5, time.Second, 5)[:1])
		if c.limit != MaxChartRequests {
			t.Fatalf("limit %d, want MaxChartRequests", c.limit)
		}
		c.limit = 1000
		ds := []sluice.Decision{{}}
		for i := range c.limit {
			if err := c.Add(Request{T: int64(i), Key: "a", Cost: 1}, ds); err != nil {
				t.Fatalf("Add %d: %v", i, err)
			}
		}
		if err := c.Add(Request{T: 1000, Key: "a", Cost: 1}, ds); !errors.Is(err, ErrChartTooLarge) {
			t.Errorf("Add beyond MaxChartRequests = %v, want ErrChartTooLarge", err)
		}
	})
}

// TestTrailingMaxima compares trailingMaxima with a direct count at every
// µs of small random timelines.
func TestTrailingMaxima(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for trial := range 300 {
		n := rng.IntN(20)
		evs := make([]event, n)
		for i := range evs {
			evs[i] = event{t: rng.Int64N(400), cost: 1 + rng.Int64N(3)}
		}
		slices.SortFunc(evs, func(a, b event) int { return cmpInt(a.t, b.t) })
		period := 1 + rng.Int64N(120)
		w := 1 + rng.Int64N(40)
		slicesN := 1 + rng.IntN(int(600/w)+1)
		got, peak := trailingMaxima(evs, period, 0, w, slicesN)
		checkMaxima(t, fmt.Sprintf("trial %d, period %d", trial, period), evs, w, got, peak, func(event) int64 { return period })
	}
}

// checkMaxima checks got and peak, the slice maxima of width w and the
// overall maximum of the cost the events hold over [0, 600) µs, against
// a count at every µs; an event e holds from e.t for hold(e).
func checkMaxima(t *testing.T, what string, evs []event, w int64, got []int64, peak int64, hold func(event) int64) {
	t.Helper()
	f := func(t int64) int64 {
		var s int64
		for _, e := range evs {
			if e.t <= t && t < e.t+hold(e) {
				s += e.cost
			}
		}
		return s
	}
	var wantPeak int64
	for t0 := int64(0); t0 < 600; t0++ {
		wantPeak = max(wantPeak, f(t0))
	}
	for i := range got {
		var want int64
		for t0 := int64(i) * w; t0 < int64(i+1)*w; t0++ {
			want = max(want, f(t0))
		}
		if got[i] != want {
			t.Fatalf("%s: slice %d = %d, want %d (events %v, width %d)", what, i, got[i], want, evs, w)
		}
	}
	if peak != wantPeak {
		t.Fatalf("%s: peak %d, want %d (events %v)", what, peak, wantPeak, evs)
	}
}

func TestChartSpan(t *testing.T) {
	delayed := []sluice.Decision{{Allowed: true, Delay: 59 * time.Second}}
	leaky := []sluice.Policy{sluice.LeakyBucket(100, time.Minute, 100)}
	tests := []struct {
		name     string
		from, to int64 // Chart.From, Chart.To
		reqs     []int64
		ds       []sluice.Decision
		wantFrom int64
		wantTo   int64
	}{
		// The boundary trace (its last admitted request starts at 12:01:59):
		// from the start of 12:00's window to a period after the last
		// start, rounded up to a whole window, 12:03.
		{"trace", 0, 0, []int64{43259000, 43260000}, delayed, 43200000_000, 43380000_000},
		// A short trace far from a window boundary: from its first request
		// to as long again after its last.
		{"short trace", 0, 0, []int64{43230000, 43230500}, []sluice.Decision{{Allowed: true}}, 43230000_000, 43231000_001},
		// Given bounds, extended to the last delayed start.
		{"given", 43200000, 43201000, []int64{43200000}, delayed, 43200000_000, 43259000_001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewChart(leaky)
			c.From, c.To = tt.from, tt.to
			for _, ms := range tt.reqs {
				if err := c.Add(Request{T: ms, Key: "a", Cost: 1}, tt.ds); err != nil {
					t.Fatal(err)
				}
			}
			from, to := c.span()
			if from != tt.wantFrom || to != tt.wantTo {
				t.Errorf("span() = %d, %d, want %d, %d", from, to, tt.wantFrom, tt.wantTo)
			}
		})
	}
}

// TestHeldMaxima checks heldMaxima against a brute-force count of the
// units held at every instant.
func TestHeldMaxima(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for trial := range 300 {
		evs := make([]event, rng.IntN(20))
		for i := range evs {
			evs[i] = event{t: rng.Int64N(400), cost: 1 + rng.Int64N(3), d: rng.Int64N(3) * rng.Int64N(100)}
		}
		w := 1 + rng.Int64N(40)
		slicesN := 1 + rng.IntN(int(600/w)+1)
		got, peak := heldMaxima(evs, 0, w, slicesN)
		checkMaxima(t, fmt.Sprintf("trial %d", trial), evs, w, got, peak, func(e event) int64 { return e.d })
	}
}

// TestChartConcurrency draws a concurrency policy: units held over time,
// capped by the lease, next to the units wanted.
func TestChartConcurrency(t *testing.T) {
	p := sluice.Concurrency(2, 2*time.Second)
	reqs := []Request{
		{T: 1000, Key: "a", Cost: 1, Duration: 3000}, // held until its lease expires at 3 s
		{T: 1500, Key: "a", Cost: 1, Duration: 1000},
		{T: 2000, Key: "a", Cost: 1, Duration: 1000}, // refused
		{T: 2500, Key: "b", Cost: 2, Duration: 500},
		{T: 3000, Key: "a", Cost: 1},
	}
	c := NewChart([]sluice.Policy{p})
	err := Run(context.Background(), &sliceSource{reqs: reqs}, []sluice.Policy{p}, func(req Request, ds []sluice.Decision) error {
		return c.Add(req, ds)
	})
	if err != nil {
		t.Fatal(err)
	}
	f := frame{}
	from, to := c.span()
	if from != 1_000_000 || to <= 4_000_000 {
		t.Errorf("span = [%d, %d) µs, want from 1s to past the last end, 4s", from, to)
	}
	f.from, f.width = from, max(1, (to-from+chartSlices-1)/chartSlices)
	rows := c.rows(&f)
	// Held: a's first over [1 s, 3 s) (its lease), a's second over
	// [1.5 s, 2.5 s), b's 2 units over [2.5 s, 3 s): at most 3 at once.
	if got := rows[0].peakAdmitted; got != 3 {
		t.Errorf("peak held = %d, want 3", got)
	}
	// Wanted were all admitted: a's first, second and third at 2 s: 3;
	// at 2.5 s a's first and third, b's 2: 4.
	if got := slices.Max(rows[0].offered); got != 4 {
		t.Errorf("peak wanted = %d, want 4", got)
	}
	if f.yMax != 4 {
		t.Errorf("yMax = %d, want 4", f.yMax)
	}
	var buf bytes.Buffer
	if err := c.Write(&buf, "svg"); err != nil {
		t.Fatalf("Write(svg): %v", err)
	}
	for _, want := range []string{
		"concurrency: admitted 4 of 5 requests, at most 3 units held at once, all 2 keys together",
		"limit: 2 held at once × 2 keys",
		"units held (colour of the row)",
		"units wanted at once (all admitted)",
		"concurrency, limit 2 held at once, lease 2s",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	var png bytes.Buffer
	if err := c.Write(&png, "png"); err != nil {
		t.Errorf("Write(png): %v", err)
	}

	mixed := NewChart([]sluice.Policy{p, sluice.TokenBucket(2, time.Second, 0)})
	if err := mixed.Write(io.Discard, "svg"); err == nil || !strings.Contains(err.Error(), "cannot draw concurrency and rate policies together") {
		t.Errorf("Write of a mixed chart = %v, want an error", err)
	}
}
