package simulate

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sluicehq/sluice"
)

// MaxChartRequests is the most requests a Chart holds.
const MaxChartRequests = 1_000_000

// ChartFormat returns the format of a chart file from its name: "svg" for
// a name ending in .svg, "png" for .png (in any case), and an error for
// any other name.
func ChartFormat(name string) (string, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		return "svg", nil
	case ".png":
		return "png", nil
	}
	return "", fmt.Errorf("chart file %q: want a name ending in .svg or .png", name)
}

// Chart draws what a simulation offered and what each policy admitted over
// time: one row per policy, on a shared time axis. Each row shows, at every
// instant t, the cost offered and the cost admitted within (t − P, t], P
// being the policy's period (the trailing period), with the policy's limit
// as a horizontal line: a row that rises above the line admitted more
// than the limit within one period. Admitted requests count at the time
// they proceed, which for leaky_bucket is their time plus their delay. With
// several keys, the counts are of all keys together and the line is at
// the limit times the number of keys.
//
// A concurrency policy's row shows instead, at every instant t, the units
// held (the admitted requests that run at t: from their time until their
// end or their lease's expiry, whichever comes first) and in grey the
// units the requests would hold were every one admitted, with the limit
// (times the number of keys) as the line. A chart's policies are all
// concurrency policies or all rate policies.
//
// The time axis is cut into 1000 equal slices; a row's value in a slice is
// the exact maximum of its count over the slice, so no peak is lost.
//
// A Chart holds every request it is given (about 24 bytes per request and
// per policy, plus 24), up to MaxChartRequests.
type Chart struct {
	// Heading holds the lines written above the rows. When empty, a line
	// describes the policies.
	Heading []string
	// From and To, when To > From, are times in ms since the Unix epoch
	// that the time axis spans at least (the traffic's start and end).
	// Otherwise the axis starts at the first request.
	From, To int64
	// RowLabels, when set, has one label per policy, written before its
	// row's title (the replay's "as decided" and "candidate" rows of one
	// limit).
	RowLabels []string

	policies []sluice.Policy
	limit    int // MaxChartRequests, less in tests
	offered  []event
	admitted [][]event
	// blocks holds, per policy with a penalty, each offence: the block it
	// started, from its time (t) for its RetryAfter (d), both in µs.
	blocks [][]event
	keys   map[string]struct{}
}

// event is cost offered or admitted at t µs since the Unix epoch, held
// for d µs under a concurrency policy.
type event struct {
	t    int64
	cost int64
	d    int64
}

// NewChart returns an empty chart of policies, whose decisions Add
// receives in the same order.
func NewChart(policies []sluice.Policy) *Chart {
	return &Chart{
		policies: slices.Clone(policies),
		limit:    MaxChartRequests,
		admitted: make([][]event, len(policies)),
		blocks:   make([][]event, len(policies)),
		keys:     make(map[string]struct{}),
	}
}

// ErrChartTooLarge is returned by Add for a request beyond
// MaxChartRequests.
var ErrChartTooLarge = fmt.Errorf("a chart holds at most %d requests", MaxChartRequests)

// Add records one request and its decisions: ds[i] is the decision of the
// i-th policy. It returns ErrChartTooLarge when the chart is full.
func (c *Chart) Add(req Request, ds []sluice.Decision) error {
	if len(c.offered) >= c.limit {
		return ErrChartTooLarge
	}
	if len(ds) != len(c.policies) {
		return fmt.Errorf("chart: %d decisions for %d policies", len(ds), len(c.policies))
	}
	t, hold := req.T*1000, req.Duration*1000
	c.offered = append(c.offered, event{t: t, cost: req.Cost, d: hold})
	if _, ok := c.keys[req.Key]; !ok {
		c.keys[req.Key] = struct{}{}
	}
	for i, d := range ds {
		if d.Offence {
			c.blocks[i] = append(c.blocks[i], event{t: t, cost: req.Cost, d: int64(d.RetryAfter / time.Microsecond)})
		}
		if !d.Allowed {
			continue
		}
		if p := &c.policies[i]; p.Algorithm == sluice.ConcurrencyAlgorithm {
			c.admitted[i] = append(c.admitted[i], event{t: t, cost: req.Cost, d: min(hold, int64(p.Period/time.Microsecond))})
			continue
		}
		c.admitted[i] = append(c.admitted[i], event{t: t + int64(d.Delay/time.Microsecond), cost: req.Cost})
	}
	return nil
}

// chartSlices is the number of slices the time axis is cut into.
const chartSlices = 1000

// Colours of the chart (the Okabe–Ito palette, which colour-blind readers
// tell apart).
var (
	algorithmColors = map[sluice.Algorithm]color.RGBA{
		sluice.TokenBucketAlgorithm:   {0x00, 0x72, 0xB2, 0xFF},
		sluice.GCRAAlgorithm:          {0x56, 0xB4, 0xE9, 0xFF},
		sluice.LeakyBucketAlgorithm:   {0x00, 0x9E, 0x73, 0xFF},
		sluice.FixedWindowAlgorithm:   {0xD5, 0x5E, 0x00, 0xFF},
		sluice.SlidingLogAlgorithm:    {0xCC, 0x79, 0xA7, 0xFF},
		sluice.SlidingWindowAlgorithm: {0xE6, 0x9F, 0x00, 0xFF},
		sluice.ConcurrencyAlgorithm:   {0x00, 0x72, 0xB2, 0xFF},
	}
	offeredFill = color.RGBA{0xDD, 0xDD, 0xDD, 0xFF}
	offeredLine = color.RGBA{0x99, 0x99, 0x99, 0xFF}
	limitColor  = color.RGBA{0x00, 0x00, 0x00, 0xFF}
)

// Layout of the chart, in points.
const (
	chartWidth   = 720
	headingLine  = 15
	legendHeight = 22
	rowHeight    = 112
	bottomMargin = 30
	chartDPI     = 144
)

var (
	sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
)

// Write draws the chart to w in format ("svg" or "png", as ChartFormat
// returns). The same requests, decisions and fields give the same bytes.
func (c *Chart) Write(w io.Writer, format string) (err error) {
	if format != "svg" && format != "png" {
		return fmt.Errorf("chart: unknown format %q (want svg or png)", format)
	}
	defer func() {
		// gonum/plot reports some failures by panicking; none should
		// happen, but a chart is not worth a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("chart: drawing failed: %v", r)
		}
	}()
	if len(c.policies) == 0 {
		return errors.New("chart: no policy")
	}
	for _, p := range c.policies {
		if (p.Algorithm == sluice.ConcurrencyAlgorithm) != c.concurrency() {
			return errors.New("chart: cannot draw concurrency and rate policies together")
		}
	}
	heading := c.heading()
	height := vg.Length(len(heading)*headingLine + legendHeight + len(c.policies)*rowHeight + bottomMargin + 8)

	var canvas vg.CanvasWriterTo
	if format == "svg" {
		canvas = vgsvg.NewWith(vgsvg.UseWH(chartWidth, height), vgsvg.EmbedFonts(true))
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(chartDPI),
			vgimg.UseBackgroundColor(color.White))}
	}
	dc := draw.New(canvas)
	c.draw(dc, heading)
	_, err = canvas.WriteTo(w)
	return err
}

// concurrency reports whether the chart is of concurrency policies.
func (c *Chart) concurrency() bool {
	return c.policies[0].Algorithm == sluice.ConcurrencyAlgorithm
}

func (c *Chart) heading() []string {
	if len(c.Heading) > 0 {
		return c.Heading
	}
	return []string{DescribePolicies(c.policies)}
}

// DescribePolicies describes policies in one line: "fixed_window, limit
// 100 per 1m0s" for one, "limit 100 per 1m0s, burst 20 for token_bucket,
// gcra, leaky_bucket" for several that share a limit and a period, and
// else each policy, separated by semicolons.
func DescribePolicies(policies []sluice.Policy) string {
	if len(policies) == 1 {
		return describe(policies[0])
	}
	if s, ok := sharedLimit(policies); ok {
		return s
	}
	parts := make([]string, len(policies))
	for i, p := range policies {
		parts[i] = describe(p)
	}
	return strings.Join(parts, "; ")
}

// axisUnit is the unit of the time axis.
type axisUnit struct {
	long string
	us   int64
}

// unitFor returns the largest unit of which a span of span µs holds at
// least two.
func unitFor(span int64) axisUnit {
	switch {
	case span >= 2*86400_000_000:
		return axisUnit{"days", 86400_000_000}
	case span >= 2*3600_000_000:
		return axisUnit{"hours", 3600_000_000}
	case span >= 2*60_000_000:
		return axisUnit{"minutes", 60_000_000}
	case span >= 2_000_000:
		return axisUnit{"seconds", 1_000_000}
	}
	return axisUnit{"milliseconds", 1000}
}

// span returns the times the time axis covers, in µs since the Unix
// epoch. With From and To set, it is [From, To), extended to the last
// event (a delayed start). Otherwise it runs from the start of the window
// (of the first policy's period) that holds the first request, to one
// period after the last event, so that the counts return to zero, and on
// to the end of a window; but it adds no more at either end than the
// requests' own span.
func (c *Chart) span() (from, to int64) {
	last := int64(math.MinInt64)
	if n := len(c.offered); n > 0 {
		last = c.offered[n-1].t
	}
	for _, evs := range c.admitted {
		for _, e := range evs {
			last = max(last, e.t)
		}
	}
	if c.concurrency() {
		for _, e := range c.offered {
			last = max(last, e.t+e.d) // the requests' ends
		}
	}
	switch {
	case c.To > c.From:
		return c.From * 1000, max(c.To*1000, last+1)
	case len(c.offered) == 0:
		return 0, 1000
	}
	first := c.offered[0].t
	if c.concurrency() {
		// From the first request to a little after the last end.
		own := max(last-first, 1000)
		return first, last + 1 + own/20
	}
	own := max(last-first, 1000)
	period := int64(c.policies[0].Period / time.Microsecond)
	from = first
	if start := first - first%period; first-start <= own {
		from = start
	}
	to = last + 1 + min(period, own)
	if end := (to - from + period - 1) / period * period; from%period == 0 && end-(to-from) <= own {
		to = from + end // a whole number of windows
	}
	return from, to
}

// row is what one row of the chart shows.
type row struct {
	policy            sluice.Policy
	offered, admitted []int64 // the slices' maxima
	peakAdmitted      int64
	admittedReqs      int
	offeredReqs       int
	// blocks are the blocks of a policy with a penalty, drawn as bands
	// over the time they shut a key out.
	blocks []event
}

func (c *Chart) draw(dc draw.Canvas, heading []string) {
	from, to := c.span()
	width := max(1, (to-from+chartSlices-1)/chartSlices) // µs per slice
	f := frame{from: from, width: width, unit: unitFor(width * chartSlices), keys: int64(max(1, len(c.keys)))}
	rows := c.rows(&f)
	top := c.drawLegend(dc, heading, f.keys)
	f.ticks = plot.DefaultTicks{}
	if p := int64(c.policies[0].Period / time.Microsecond); !c.concurrency() && from%p == 0 && (to-from)/p >= 2 && (to-from)/p <= 16 {
		f.ticks = stepTicks{step: float64(p) / float64(f.unit.us)}
	}
	plots := make([][]*plot.Plot, len(rows))
	titles := make([]string, len(rows))
	for i, r := range rows {
		titles[i] = c.rowTitle(r, f.keys)
		if i < len(c.RowLabels) && c.RowLabels[i] != "" {
			// The label names the row instead of its algorithm.
			titles[i] = c.RowLabels[i] + strings.TrimPrefix(titles[i], r.policy.Algorithm.String())
		}
		plots[i] = []*plot.Plot{f.plot(r, i == len(rows)-1)}
	}
	body := draw.Crop(dc, 0, 0, 0, top-dc.Max.Y)
	tiles := draw.Tiles{
		Rows: len(rows), Cols: 1,
		PadTop: 0, PadBottom: 6, PadLeft: 8, PadRight: 16, PadY: 8,
	}
	canvases := plot.Align(plots, tiles, body)
	for i, ps := range plots {
		tile := canvases[i][0]
		ps[0].Draw(tile)
		data := ps[0].DataCanvas(tile)
		sty := ps[0].Title.TextStyle
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
		tile.FillText(sty, vg.Point{X: data.Min.X, Y: tile.Max.Y}, titles[i])
	}
}

// frame is what every row of a chart shares: its time axis, and the
// height of its value axis.
type frame struct {
	from, width int64 // the first instant and the µs per slice
	unit        axisUnit
	keys        int64
	yMax        int64
	ticks       plot.Ticker
}

// x is instant t on the time axis.
func (f *frame) x(t int64) float64 { return float64(t-f.from) / float64(f.unit.us) }

// rows returns the rows of the chart, one per policy, and sets f.yMax to
// the highest value any of them draws.
func (c *Chart) rows(f *frame) []row {
	rows := make([]row, len(c.policies))
	for i, p := range c.policies {
		period := int64(p.Period / time.Microsecond)
		admitted := slices.Clone(c.admitted[i])
		slices.SortFunc(admitted, func(a, b event) int { return cmpInt(a.t, b.t) })
		r := row{policy: p, admittedReqs: len(admitted), offeredReqs: len(c.offered), blocks: c.blocks[i]}
		if p.Algorithm == sluice.ConcurrencyAlgorithm {
			r.offered, _ = heldMaxima(c.offered, f.from, f.width, chartSlices)
			r.admitted, r.peakAdmitted = heldMaxima(admitted, f.from, f.width, chartSlices)
		} else {
			r.offered, _ = trailingMaxima(c.offered, period, f.from, f.width, chartSlices)
			r.admitted, r.peakAdmitted = trailingMaxima(admitted, period, f.from, f.width, chartSlices)
		}
		rows[i] = r
		f.yMax = max(f.yMax, slices.Max(r.offered), r.peakAdmitted, p.Limit*f.keys)
	}
	return rows
}

// drawLegend draws the heading, then a legend that holds for every row,
// and returns the height below them.
func (c *Chart) drawLegend(dc draw.Canvas, heading []string, keys int64) vg.Length {
	top := dc.Max.Y - 8
	for i, line := range heading {
		sty := textStyle(10)
		if i == 0 {
			sty = textStyle(11.5)
		}
		dc.FillText(sty, vg.Point{X: dc.Min.X + 12, Y: top}, line)
		top -= headingLine
	}
	period := shortDuration(c.policies[0].Period)
	offeredText, admittedText := "requests offered in the last "+period, "admitted in the last "+period+" (colour of the row)"
	limitText := fmt.Sprintf("limit: %d per %s", c.policies[0].Limit, period)
	if c.concurrency() {
		offeredText, admittedText = "units wanted at once (all admitted)", "units held (colour of the row)"
		limitText = fmt.Sprintf("limit: %d held at once", c.policies[0].Limit)
	}
	if keys > 1 {
		limitText += fmt.Sprintf(" × %d keys", keys)
	}
	legend := textStyle(9)
	x0 := dc.Min.X + 12
	y := top - 9
	swatch := func(draw func(x vg.Length), label string) {
		draw(x0)
		x0 += 22
		dc.FillText(legend, vg.Point{X: x0, Y: y + 7}, label)
		x0 += legend.Width(label) + 18
	}
	swatch(func(x vg.Length) {
		dc.FillPolygon(offeredFill, []vg.Point{{X: x, Y: y - 1}, {X: x + 16, Y: y - 1}, {X: x + 16, Y: y + 7}, {X: x, Y: y + 7}})
		dc.StrokeLine2(draw.LineStyle{Color: offeredLine, Width: 0.6}, x, y+7, x+16, y+7)
	}, offeredText)
	swatch(func(x vg.Length) {
		dc.StrokeLine2(draw.LineStyle{Color: color.RGBA{0x33, 0x33, 0x33, 0xFF}, Width: 1.8}, x, y+3, x+16, y+3)
	}, admittedText)
	swatch(func(x vg.Length) {
		dc.StrokeLine2(limitStyle, x, y+3, x+16, y+3)
	}, limitText)
	return y - 8
}

// rowTitle is the title of row r, drawn left-aligned over its data.
func (c *Chart) rowTitle(r row, keys int64) string {
	period := shortDuration(r.policy.Period)
	title := fmt.Sprintf("%v: admitted %d of %d requests, at most %d in any %s",
		r.policy.Algorithm, r.admittedReqs, r.offeredReqs, r.peakAdmitted, period)
	switch r.policy.Algorithm {
	case sluice.ConcurrencyAlgorithm:
		title = fmt.Sprintf("%v: admitted %d of %d requests, at most %d units held at once",
			r.policy.Algorithm, r.admittedReqs, r.offeredReqs, r.peakAdmitted)
	case sluice.LeakyBucketAlgorithm:
		title = fmt.Sprintf("%v: admitted %d of %d requests, at most %d started in any %s (counted at time + delay)",
			r.policy.Algorithm, r.admittedReqs, r.offeredReqs, r.peakAdmitted, period)
	}
	if keys > 1 {
		// The comparison table's maximum is per key.
		title += fmt.Sprintf(", all %d keys together", keys)
	}
	if n := len(r.blocks); n > 0 {
		var longest int64
		for _, b := range r.blocks {
			longest = max(longest, b.d)
		}
		title += fmt.Sprintf("; %s (shaded), the longest %v", plural(n, "block", "blocks"), time.Duration(longest)*time.Microsecond)
	}
	return title
}

// plural writes n and a noun.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// plot returns the plot of row r; the last row labels the time axis.
func (f *frame) plot(r row, last bool) *plot.Plot {
	p := plot.New()
	p.BackgroundColor = nil
	// The title is drawn left-aligned over the data (rowTitle); the plot's
	// own (centred) title only reserves its height.
	p.Title.Text = " "
	setFont(&p.Title.TextStyle, 9.5)
	p.Title.Padding = 3
	p.X.Min, p.X.Max = 0, f.x(f.from+f.width*chartSlices)
	p.Y.Min, p.Y.Max = 0, float64(f.yMax)*1.1+1
	p.Y.Label.Text = "in last " + shortDuration(r.policy.Period)
	if r.policy.Algorithm == sluice.ConcurrencyAlgorithm {
		p.Y.Label.Text = "held"
	}
	setFont(&p.Y.Label.TextStyle, 9)
	setFont(&p.Y.Tick.Label, 8)
	p.Y.Tick.Marker = intTicks{}
	p.Y.Padding, p.X.Padding = 2, 2
	setFont(&p.X.Tick.Label, 8.5)
	p.X.Tick.Marker = f.ticks
	if last {
		p.X.Label.Text = fmt.Sprintf("time since %s, in %s", formatTime(f.from/1000), f.unit.long)
		setFont(&p.X.Label.TextStyle, 9)
	} else {
		p.X.Tick.Marker = unlabelled{f.ticks}
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.RGBA{0xE4, 0xE4, 0xE4, 0xFF}
	grid.Horizontal.Color = grid.Vertical.Color
	p.Add(grid)

	x0, w := f.x(f.from), f.x(f.from+f.width)-f.x(f.from)
	offered := stepLine(r.offered, x0, w)
	offered.FillColor = offeredFill
	offered.LineStyle = draw.LineStyle{Color: offeredLine, Width: 0.6}
	admitted := stepLine(r.admitted, x0, w)
	admitted.LineStyle = draw.LineStyle{Color: algorithmColors[r.policy.Algorithm], Width: 1.8}
	limitY := float64(r.policy.Limit * f.keys)
	limit := &plotter.Line{
		XYs:       plotter.XYs{{X: p.X.Min, Y: limitY}, {X: p.X.Max, Y: limitY}},
		LineStyle: limitStyle,
	}
	for _, b := range r.blocks {
		// A block: the time it shuts its key out, as a band.
		x1, x2 := f.x(b.t), min(f.x(b.t+b.d), p.X.Max)
		band, err := plotter.NewPolygon(plotter.XYs{{X: x1, Y: p.Y.Min}, {X: x2, Y: p.Y.Min}, {X: x2, Y: p.Y.Max}, {X: x1, Y: p.Y.Max}})
		if err == nil {
			band.Color = blockFill
			band.LineStyle.Width = 0
			p.Add(band)
		}
	}
	p.Add(offered, limit, admitted)
	return p
}

// blockFill shades the time a penalty's block shuts a key out.
var blockFill = color.NRGBA{0xE0, 0x40, 0x40, 0x38}

var limitStyle = draw.LineStyle{Color: limitColor, Width: 1.1, Dashes: []vg.Length{5, 3}}

// stepLine returns a line that holds each of vs over its slice, slice i
// spanning [x0 + i·w, x0 + (i+1)·w), with a point only where the value
// changes. vs must not be empty.
func stepLine(vs []int64, x0, w float64) *plotter.Line {
	var xys plotter.XYs
	for i, v := range vs {
		if i == 0 || v != vs[i-1] {
			xys = append(xys, plotter.XY{X: x0 + float64(i)*w, Y: float64(v)})
		}
	}
	xys = append(xys, plotter.XY{X: x0 + float64(len(vs))*w, Y: float64(vs[len(vs)-1])})
	return &plotter.Line{XYs: xys, StepStyle: plotter.PostStep}
}

// trailingMaxima returns, for each of n slices [from + i·w, from + (i+1)·w),
// the maximum over the slice of f(t), the cost of the events within
// (t − period, t], and the maximum of f over all time. evs must be sorted
// by time and lie at or after from.
func trailingMaxima(evs []event, period, from, w int64, n int) ([]int64, int64) {
	out := make([]int64, n)
	var f, peak int64
	add, drop := 0, 0 // next event to count, next event to drop (at t + period)
	next := func() int64 {
		t := int64(math.MaxInt64)
		if add < len(evs) {
			t = evs[add].t
		}
		if drop < add && evs[drop].t+period < t {
			t = evs[drop].t + period
		}
		return t
	}
	apply := func(t int64) {
		for add < len(evs) && evs[add].t == t {
			f += evs[add].cost
			add++
		}
		for drop < add && evs[drop].t+period == t {
			f -= evs[drop].cost
			drop++
		}
		peak = max(peak, f)
	}
	for i := range out {
		lo := from + int64(i)*w
		for t := next(); t <= lo; t = next() {
			apply(t)
		}
		m := f
		for t := next(); t < lo+w; t = next() {
			apply(t)
			m = max(m, f)
		}
		out[i] = m
	}
	for t := next(); t != math.MaxInt64; t = next() {
		apply(t)
	}
	return out, peak
}

// heldMaxima returns, for each of n slices [from + i·w, from + (i+1)·w),
// the maximum over the slice of f(t), the cost of the events that hold at
// t (e.t ≤ t < e.t + e.d), and the maximum of f over all time. An event
// of d = 0 holds at no instant. evs must lie at or after from.
func heldMaxima(evs []event, from, w int64, n int) ([]int64, int64) {
	type change struct{ t, delta int64 }
	changes := make([]change, 0, 2*len(evs))
	for _, e := range evs {
		if e.d > 0 {
			changes = append(changes, change{e.t, e.cost}, change{e.t + e.d, -e.cost})
		}
	}
	// At one instant, the holds that end go before those that start.
	slices.SortFunc(changes, func(a, b change) int {
		if c := cmpInt(a.t, b.t); c != 0 {
			return c
		}
		return cmpInt(a.delta, b.delta)
	})
	out := make([]int64, n)
	var f, peak int64
	next := 0
	apply := func(t int64) { // applies every change at t
		for next < len(changes) && changes[next].t == t {
			f += changes[next].delta
			next++
		}
		peak = max(peak, f)
	}
	for i := range out {
		lo := from + int64(i)*w
		for next < len(changes) && changes[next].t <= lo {
			apply(changes[next].t)
		}
		m := f
		for next < len(changes) && changes[next].t < lo+w {
			apply(changes[next].t)
			m = max(m, f)
		}
		out[i] = m
	}
	for next < len(changes) {
		apply(changes[next].t)
	}
	return out, peak
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// shortDuration formats d without zero units: 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// textStyle returns the chart's text style, left-aligned.
func textStyle(size vg.Length) text.Style {
	sty := text.Style{Color: color.Black, XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	setFont(&sty, size)
	return sty
}

// setFont sets the chart's font, at size, in sty.
func setFont(sty *text.Style, size vg.Length) {
	sty.Font = font.From(sansFont, size)
}

// intTicks marks whole numbers only, without minor ticks.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label == "" || t.Value != math.Trunc(t.Value) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// stepTicks marks every multiple of step, with three minor ticks between
// two of them.
type stepTicks struct{ step float64 }

func (s stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for i := math.Ceil(lo / s.step * 4); i*s.step/4 <= hi; i++ {
		v := i * s.step / 4
		t := plot.Tick{Value: v}
		if int64(i)%4 == 0 {
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		out = append(out, t)
	}
	return out
}

// unlabelled marks the ticks of another ticker without their labels, for
// the rows above the bottom one.
type unlabelled struct{ plot.Ticker }

func (u unlabelled) Ticks(lo, hi float64) []plot.Tick {
	ticks := u.Ticker.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = " " // a major tick, without text
		}
	}
	return ticks
}
