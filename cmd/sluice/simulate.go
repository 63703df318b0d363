package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/simulate"
)

const simulateUsage = `Usage: sluice simulate --algorithm ALG|all --limit N --period DUR [--burst B]
                       [--time-zone ZONE] [--week-starts DAY]
                       [--trace FILE|- | --pattern NAME --rate R --duration DUR
                       [--keys N] [--seed S] [--hold DUR]] [--format table|jsonl]
                       [--chart FILE]
       sluice simulate --algorithm concurrency --limit N [--lease DUR] ...
       sluice simulate --replay LOG --config CANDIDATE.yaml [--chart FILE]

Replays a trace of requests through a rate-limiting algorithm at the trace's
own times and prints every decision (jsonl) or a summary per key (table).
With --algorithm all it compares the six rate algorithms on the same trace.
Instead of a trace, --pattern generates traffic; --chart draws the result.
--algorithm concurrency replays the trace through a concurrency limit, each
request holding its units for its duration (see Trace, below).

Flags:
  --algorithm ALG|all  token_bucket, gcra, leaky_bucket, fixed_window,
                       sliding_log, sliding_window, concurrency, or all
                       (required; all is the six rate algorithms)
  --limit N            cost units admitted per period; for concurrency,
                       cost units held at once per key (required)
  --lease DUR          concurrency only: the lease, in Go duration syntax
                       (default 30s). A request that runs this long or
                       longer loses its units when its lease expires: the
                       simulation does not renew leases. concurrency takes
                       no --period, --burst or calendar flags
  --period DUR         the period, in Go duration syntax: 250ms, 1s, 1m, 24h
                       (required; a whole number of microseconds); or for
                       fixed_window and sliding_window a calendar period:
                       calendar_day, calendar_week, calendar_month or
                       calendar_year (--algorithm all then compares those
                       two; --chart and the burst, boundary and onoff
                       patterns need a duration)
  --time-zone ZONE     a calendar period's IANA time zone, such as
                       America/New_York (default UTC)
  --week-starts DAY    calendar_week's first day: monday (default) or sunday
  --burst B            capacity of token_bucket, gcra and leaky_bucket
                       (default: the limit); the window algorithms have no
                       burst of their own and refuse one other than the limit.
                       With --algorithm all it applies to the bucket family only.
  --block-for DUR      a penalty: a refusal blocks the key this long; each
  --factor N           further offence multiplies the block by N (default 1)
  --max-block DUR      up to this (default 10 years), and offences are
  --forget-after DUR   forgotten this long after a block ends (default 0);
                       the table counts blocks and the requests they refused
                       (docs/algorithms.md, "Penalties")
  --trace FILE|-       the trace to read; - or no --trace reads standard input
                       (from a terminal, end it with Ctrl-D)
  --allow-empty        accept a trace without requests (by default an error:
                       a trace whose only line is taken as a header, such as
                       1e3,a, has none)
  --format table|jsonl
                       table (default): a summary per key, or with
                       --algorithm all a comparison; jsonl: one decision per
                       line (one algorithm only)
  --chart FILE         also draw the requests offered and admitted over time
                       to FILE, an .svg or .png image (see Chart, below)
  --decision-log FILE  also write the decisions to FILE as a decision log,
                       for --replay (one rate algorithm; door "simulate")
  --name NAME          the limit's name in --decision-log (default api)

Generated traffic (instead of --trace; see docs/simulate.md):
  --pattern NAME       steady, burst, boundary, poisson, ramp or onoff
  --rate R             each key's mean rate: requests per second (10, 2.5,
                       0.001) or N/DUR, N requests per Go duration (100/1m);
                       positive, at most 1000000 per second (required)
  --duration DUR       how long the traffic lasts, a whole number of ms, at
                       most 720h (required)
  --keys N             number of keys, client-1 to client-N (default 1); each
                       sends the same traffic (poisson: its own stream)
  --seed S             seed of the poisson pattern, an unsigned integer
                       (default 1); the other patterns do not use it
  --hold DUR           how long each request runs, a whole number of ms
                       (default 0: released at once); only concurrency
                       uses it, and it takes only steady, poisson and ramp
  The traffic starts at 2026-01-01T00:00:00Z (Unix ms 1767225600000); burst,
  boundary and onoff start at the first multiple of --period from there and
  need a --duration that is a whole number of periods. Every request costs 1.
  With R the rate and P the period, each key sends:
    steady    evenly spaced requests, one every 1/R
    burst     each period's R*P requests at the period's first ms
    boundary  in each pair of periods, the first one's R*P requests at its
              last ms and the second one's at its first: 2*R*P requests
              within 1 ms, half before and half after a window boundary
    poisson   independent exponential gaps of mean 1/R (a Poisson process),
              from a PCG generator seeded with --seed, in exact integer
              arithmetic: the same flags give the same requests everywhere
    ramp      a rate that rises linearly from 0 at the start to 2*R at the end
    onoff     rate 2*R in the first half of each period, nothing in the second
  Every pattern but poisson sends exactly ceil(R*duration) requests per key:
  in millisecond m, ceil(A(m+1)) - ceil(A(m)), A(t) being the count the
  pattern's rate adds up to by time t.

Trace: CSV, one request per line, t_ms,key[,cost[,duration_ms]]:
  - t_ms: integer milliseconds since the Unix epoch (0 to 253402300799999);
    windows align to multiples of the period from 0. Timestamps never
    decrease from one line to the next (equal is fine); a trace where one
    does is refused before any decision is printed.
  - key: non-empty, without commas, double quotes or control characters
    (quoted CSV fields are not supported).
  - cost: an integer from 1 to 1000000000; 1 when the field is left out.
  - duration_ms: how long the request runs, an integer from 0, the request
    ending by 253402300799999; 0 when the field is left out (a line with a
    duration has its cost too). Only concurrency uses it: an admitted
    request holds its cost from t_ms until t_ms + duration_ms, when its
    lease is released (before any request at that time); with 0, right
    after its decision. The rate algorithms ignore it.
  - Spaces around fields are ignored. Blank lines and lines starting with #
    are skipped. The first line that is neither is a header, and skipped,
    when its first field is not an integer.
  Any malformed line stops the simulation with an error naming the line.

JSON Lines output: one object per request, in input order, with exactly the
fields t, key, cost, allowed, remaining, retry_after_ms, delay_ms and
reset_after_ms:
  remaining       cost units that could be admitted right after this request
  retry_after_ms  for a denied request, whole ms until it would be admitted if
                  nothing else came; -1 when its cost exceeds the capacity
                  (never); 0 when allowed
  delay_ms        leaky_bucket's wait before an admitted request proceeds,
                  rounded up to whole ms; 0 for the other algorithms
  reset_after_ms  whole ms (rounded up) until the key's state is back to
                  initial if nothing else came; for sliding_window up to
                  twice the period, as a window's count weighs until the
                  end of the next window
For concurrency, remaining is the units not held after the decision, and
retry_after_ms and reset_after_ms count until holds would expire (their
leases' ends), not until requests end: a release comes sooner.
A jsonl run reads the trace twice, so that a bad line stops it before any
output; standard input that cannot seek (a pipe) is copied to a temporary file.

Comparison (--algorithm all): per algorithm, the requests admitted and
denied, the cost admitted, the most cost admitted for one key within any
period-long interval, and the p99 delay: the nearest-rank 99th percentile
of the delays of the admitted requests (the ceil(0.99*n)-th smallest of n).

Chart (--chart): one row per algorithm on a shared time axis. Each row shows,
at every instant t, the requests offered (grey) and admitted (colour) within
the trailing period (t - P, t], and the limit as a dashed line: a row above
the line admitted more than the limit within one period (fixed_window at a
window boundary). leaky_bucket's requests count when they start, at their
time plus their delay. With several keys, counts are of all keys and the
line is at the limit times the number of keys. For concurrency the row shows
instead the units held (colour) and the units the requests would hold were
all admitted (grey), at each instant. The time axis is cut into
1000 slices; each shows the exact maximum within it. The same flags give
the same file, byte for byte. The chart holds every request in memory (at
most 1000000).

Memory: a table or jsonl run keeps state per key, not per request; a
comparison also keeps, per key and algorithm, the admitted requests of the
last period.

Exit status: 0 on success, 1 when the trace is invalid or cannot be read or
the chart cannot be written, 2 for invalid flags (including an invalid
pattern or a chart name that is not .svg or .png) or an invalid policy.

Examples:
  sluice simulate --algorithm all --limit 100 --period 1m --trace examples/traces/boundary.csv
  sluice simulate --algorithm all --limit 100 --period 1m \
                  --pattern boundary --rate 100/1m --duration 4m --chart boundary.png
  sluice simulate --algorithm concurrency --limit 10 --lease 30s \
                  --pattern poisson --rate 5 --hold 2s --duration 1m --keys 3
` + replayUsage

// simulateFlags are the parsed flags of `sluice simulate`.
type simulateFlags struct {
	algorithm string
	limit     int64
	period    periodFlag
	timeZone  string
	weekStart string
	burst     int64
	trace     string
	format    string
	chart     string
	pattern   string
	rate      string
	duration  time.Duration
	keys      int64
	seed      uint64
	lease     time.Duration
	hold      time.Duration
	// The penalty: --block-for and the rest.
	blockFor, maxBlock, forgetAfter time.Duration
	factor                          int64
	// allowEmpty accepts a trace without requests.
	allowEmpty bool
	// decisionLog, when set, is a file to write the decisions to as a
	// decision log, their limit named name.
	decisionLog, name string
}

// newSimulateFlags returns the flag set of `sluice simulate`, which
// reports to stderr, and the values it fills.
func newSimulateFlags(stderr io.Writer) (*flag.FlagSet, *simulateFlags) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	f := &simulateFlags{keys: 1, seed: 1, lease: 30 * time.Second}
	fs.StringVar(&f.algorithm, "algorithm", "", "the algorithm, or all")
	fs.Var(numFlag[int64]{&f.limit}, "limit", "cost units per period")
	fs.Var(&f.period, "period", "the period")
	fs.Var((*durationFlag)(&f.lease), "lease", "the concurrency limit's lease")
	fs.StringVar(&f.timeZone, "time-zone", "", "a calendar period's time zone")
	fs.StringVar(&f.weekStart, "week-starts", "", "a calendar week's first day: monday or sunday")
	fs.Var(numFlag[int64]{&f.burst}, "burst", "the token-bucket family's capacity")
	fs.Var((*durationFlag)(&f.blockFor), "block-for", "a penalty's first block")
	fs.Var(numFlag[int64]{&f.factor}, "factor", "a penalty's factor")
	fs.Var((*durationFlag)(&f.maxBlock), "max-block", "a penalty's longest block")
	fs.Var((*durationFlag)(&f.forgetAfter), "forget-after", "how long after a block its offences are forgotten")
	fs.StringVar(&f.trace, "trace", "-", "the trace file, or - for standard input")
	fs.StringVar(&f.format, "format", "table", "table or jsonl")
	fs.StringVar(&f.chart, "chart", "", "draw a chart to this .svg or .png file")
	fs.StringVar(&f.decisionLog, "decision-log", "", "write the decisions as a decision log")
	fs.StringVar(&f.name, "name", "api", "the limit's name in --decision-log")
	fs.StringVar(&f.pattern, "pattern", "", "generate traffic in this pattern")
	fs.StringVar(&f.rate, "rate", "", "the generated traffic's rate per key")
	fs.Var((*durationFlag)(&f.duration), "duration", "how long the generated traffic lasts")
	fs.Var(numFlag[int64]{&f.keys}, "keys", "number of keys of the generated traffic")
	fs.Var(numFlag[uint64]{&f.seed}, "seed", "seed of the poisson pattern")
	fs.Var((*durationFlag)(&f.hold), "hold", "how long each generated request runs")
	fs.BoolVar(&f.allowEmpty, "allow-empty", false, "accept a trace without requests")
	return fs, f
}

func runSimulate(ctx context.Context, s streams, args []string) error {
	if wantsReplay(args) {
		return runReplay(ctx, s, args)
	}
	r, err := parseSimulate(s, args)
	if err != nil {
		return err
	}
	defer r.close()
	if r.chartFormat != "" {
		if err := r.openChart(); err != nil {
			return err
		}
	}
	if err := r.openSource(s); err != nil {
		return err
	}
	out := bufio.NewWriterSize(s.stdout, 64<<10)
	observe, finish := r.report(out)
	if r.f.decisionLog != "" {
		if len(r.policies) > 1 || r.policies[0].Algorithm == sluice.ConcurrencyAlgorithm {
			return usageErrorf("simulate", "simulate: --decision-log needs one rate algorithm, not %s", r.f.algorithm)
		}
		dl, err := newSimDecisionLog(r.f.decisionLog, r.f.name)
		if err != nil {
			return err
		}
		defer dl.close()
		report := observe
		observe = func(req simulate.Request, ds []sluice.Decision) error {
			if err := dl.write(req, ds[0]); err != nil {
				return err
			}
			return report(req, ds)
		}
		finishReport := finish
		finish = func() error {
			if err := dl.close(); err != nil {
				return fmt.Errorf("simulate: --decision-log: %w", err)
			}
			return finishReport()
		}
	}
	var span simulate.Span
	var requests int64
	err = simulate.Run(ctx, r.src, r.policies, func(req simulate.Request, ds []sluice.Decision) error {
		requests++
		if r.chart != nil {
			span.Add(req)
			if err := r.chart.Add(req, ds); err != nil {
				return err
			}
		}
		return observe(req, ds)
	})
	if err != nil {
		return r.traceErr(err)
	}
	if requests == 0 && r.trace != nil && !r.f.allowEmpty {
		return emptyTrace(r.traceName, r.trace)
	}
	if r.chart != nil {
		r.chart.Heading = chartHeading(r.policies, r.traffic, r.traceName, span)
		if err := writeChart(r.chart, r.chartFile, r.chartFormat, r.f.chart); err != nil {
			return fmt.Errorf("simulate: --chart: %w", err)
		}
	}
	if err := finish(); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	return nil
}

// simulation is one run of `sluice simulate`: what its flags ask for and
// what it has opened.
type simulation struct {
	f           *simulateFlags
	policies    []sluice.Policy
	traffic     *simulate.Traffic // nil when a trace is read
	chartFormat string            // "" for no chart

	chart     *simulate.Chart
	chartFile *os.File
	src       simulate.Source
	trace     *simulate.TraceReader // the trace read, when there is one
	traceName string
	cleanups  []func()
}

// parseSimulate reads and checks the flags of `sluice simulate`.
func parseSimulate(s streams, args []string) (*simulation, error) {
	fs, f := newSimulateFlags(s.stderr)
	if err := parseFlags(fs, "simulate", "simulate", simulateUsage, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("simulate", "simulate: unexpected argument %q (flags only)", fs.Arg(0))
	}
	set := make(map[string]bool)
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	r := &simulation{f: f}
	var err error
	if r.policies, err = f.policies(set); err != nil {
		return nil, err
	}
	switch f.format {
	case "table":
	case "jsonl":
		if len(r.policies) > 1 {
			return nil, usageErrorf("simulate", "simulate: --format jsonl needs one algorithm; --algorithm all prints a comparison table")
		}
	default:
		return nil, usageErrorf("simulate", "simulate: --format must be table or jsonl, got %q", f.format)
	}
	if set["chart"] {
		if r.chartFormat, err = simulate.ChartFormat(f.chart); err != nil {
			return nil, usageErrorf("simulate", "simulate: --chart: %w", err)
		}
		if r.policies[0].Calendar.Unit != sluice.NoCalendar {
			return nil, usageErrorf("simulate", "simulate: --chart draws counts over a trailing period and does not take a calendar period; leave out --chart, or give --period a duration")
		}
	}
	period := r.policies[0].Period
	if r.policies[0].Algorithm == sluice.ConcurrencyAlgorithm {
		period = 0 // the lease is no period to repeat traffic at
	}
	if r.traffic, err = f.traffic(set, period); err != nil {
		return nil, err
	}
	return r, nil
}

// close releases what the run opened.
func (r *simulation) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// openChart opens the chart's temporary file beside FILE, renamed to FILE
// when complete, so that a failed run leaves FILE as it was.
func (r *simulation) openChart() error {
	dir, base := filepath.Split(r.f.chart)
	if dir == "" {
		dir = "."
	}
	file, err := os.CreateTemp(dir, "."+base+".*")
	if err != nil {
		return fmt.Errorf("simulate: --chart: %w", err)
	}
	r.chartFile = file
	r.cleanups = append(r.cleanups, func() {
		file.Close()
		os.Remove(file.Name()) // fails harmlessly once renamed
	})
	r.chart = simulate.NewChart(r.policies)
	return nil
}

// openSource opens the requests of the run: the generated traffic, or the
// trace from --trace or standard input.
func (r *simulation) openSource(s streams) error {
	if r.traffic != nil {
		gen, err := simulate.NewGenerator(*r.traffic)
		if err != nil {
			return usageErrorf("simulate", "simulate: %w", err)
		}
		r.src = gen
		if r.chart != nil {
			r.chart.From = gen.Start()
			r.chart.To = gen.Start() + r.traffic.Duration.Milliseconds()
		}
		return nil
	}
	in, name := s.stdin, "<stdin>"
	if r.f.trace != "-" && r.f.trace != "" {
		file, err := os.Open(r.f.trace)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		r.cleanups = append(r.cleanups, func() { file.Close() })
		in, name = file, r.f.trace
	}
	r.traceName = name
	if r.f.format == "jsonl" {
		// Check the whole trace first, so that a bad line stops the
		// run before any decision is printed.
		rewound, cleanup, err := checkAndRewind(in)
		r.cleanups = append(r.cleanups, cleanup)
		if err != nil {
			return r.traceErr(err)
		}
		in = rewound
	}
	if name == "<stdin>" && interactive(in) {
		fmt.Fprintln(s.stderr, "reading trace from standard input (Ctrl-D to end)")
	}
	r.trace = simulate.NewTraceReader(in)
	r.src = r.trace
	return nil
}

// traceErr is err of the run, said with what it is about.
func (r *simulation) traceErr(err error) error {
	var pe *simulate.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("simulate: trace %s: %w", r.traceName, err)
	}
	if errors.Is(err, simulate.ErrChartTooLarge) {
		return fmt.Errorf("simulate: --chart: %w", err)
	}
	return fmt.Errorf("simulate: %w", err)
}

// report returns what observes each decision of the run and what writes
// the result to out at the end: the JSON lines, the comparison table of
// several algorithms, or one algorithm's summary by key.
func (r *simulation) report(out io.Writer) (observe func(simulate.Request, []sluice.Decision) error, finish func() error) {
	if r.f.format == "jsonl" {
		jsonl := simulate.NewJSONLWriter(out)
		return func(req simulate.Request, ds []sluice.Decision) error { return jsonl.Write(req, ds[0]) }, jsonl.Flush
	}
	var table interface{ WriteTable(io.Writer) error }
	if len(r.policies) > 1 {
		cmp := simulate.NewComparison(r.policies)
		table = cmp
		observe = func(req simulate.Request, ds []sluice.Decision) error {
			cmp.Add(req, ds)
			return nil
		}
	} else {
		summary := simulate.NewKeySummary(r.policies[0])
		table = summary
		observe = func(req simulate.Request, ds []sluice.Decision) error {
			summary.Add(req, ds[0])
			return nil
		}
	}
	return observe, func() error {
		if r.traffic != nil {
			if _, err := io.WriteString(out, "Pattern: "+r.traffic.String()+"\n"); err != nil {
				return err
			}
		}
		return table.WriteTable(out)
	}
}

// traffic returns the generated traffic the flags ask for, or nil when
// they ask for none (a trace is read). period is the policies' period,
// which the periodic patterns repeat at.
func (f *simulateFlags) traffic(set map[string]bool, period time.Duration) (*simulate.Traffic, error) {
	if !set["pattern"] {
		for _, name := range []string{"rate", "duration", "keys", "seed", "hold"} {
			if set[name] {
				return nil, usageErrorf("simulate", "simulate: --%s describes generated traffic and needs --pattern", name)
			}
		}
		return nil, nil
	}
	if set["trace"] {
		return nil, usageErrorf("simulate", "simulate: --pattern and --trace cannot be used together: generate traffic or read a trace")
	}
	p, err := simulate.ParsePattern(f.pattern)
	if err != nil {
		return nil, usageErrorf("simulate", "simulate: --pattern: %w", err)
	}
	switch {
	case !set["rate"]:
		return nil, usageErrorf("simulate", "simulate: --pattern needs --rate (requests per second per key, such as 10 or 2.5, or N/DUR such as 100/1m)")
	case !set["duration"]:
		return nil, usageErrorf("simulate", "simulate: --pattern needs --duration (Go duration syntax: 30s, 4m, 1h)")
	case f.keys < 1 || f.keys > simulate.MaxKeys:
		return nil, usageErrorf("simulate", "simulate: --keys must be from 1 to %d, got %d", simulate.MaxKeys, f.keys)
	}
	rate, err := simulate.ParseRate(f.rate)
	if err != nil {
		return nil, usageErrorf("simulate", "simulate: --rate: %w", err)
	}
	if p.Periodic() && f.period.calendar != "" {
		return nil, usageErrorf("simulate", "simulate: --pattern %s repeats every period and needs a duration as --period; with a calendar period use steady, poisson or ramp, or a trace", p)
	}
	if p.Periodic() && period == 0 {
		return nil, usageErrorf("simulate", "simulate: --pattern %s repeats every period, and a concurrency limit has none; use steady, poisson or ramp, or a trace", p)
	}
	t := simulate.Traffic{Pattern: p, Rate: rate, Duration: f.duration, Period: period, Keys: int(f.keys), Seed: f.seed, Hold: f.hold}
	if err := t.Validate(); err != nil {
		return nil, usageErrorf("simulate", "simulate: --pattern %s: %w", p, err)
	}
	return &t, nil
}

// chartHeading returns the lines above a chart: the policies, and the
// traffic or the trace.
func chartHeading(policies []sluice.Policy, traffic *simulate.Traffic, traceName string, span simulate.Span) []string {
	lines := []string{"sluice simulate: " + simulate.DescribePolicies(policies)}
	if traffic != nil {
		lines = append(lines, fmt.Sprintf("Traffic: %s; %s", traffic, span))
	} else {
		lines = append(lines, fmt.Sprintf("Trace: %s, %s", traceName, span))
	}
	return lines
}

// writeChart draws chart to the temporary file tmp and renames it to name.
func writeChart(chart *simulate.Chart, tmp *os.File, format, name string) error {
	w := bufio.NewWriter(tmp)
	if err := chart.Write(w, format); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

// policies returns the policies the flags ask for: one, or with
// --algorithm all one per algorithm. set holds the names of the flags given.
func (f *simulateFlags) policies(set map[string]bool) ([]sluice.Policy, error) {
	switch {
	case !set["algorithm"] || f.algorithm == "":
		return nil, usageErrorf("simulate", "simulate: --algorithm is required (one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, concurrency, all)")
	case !set["limit"]:
		return nil, usageErrorf("simulate", "simulate: --limit is required")
	case f.algorithm == sluice.ConcurrencyAlgorithm.String():
		return f.concurrency(set)
	case set["lease"]:
		return nil, usageErrorf("simulate", "simulate: --lease applies only to --algorithm concurrency; a rate algorithm takes --period")
	case !set["period"]:
		return nil, usageErrorf("simulate", "simulate: --period is required (Go duration syntax: 250ms, 1s, 1m, 24h; or calendar_day, calendar_week, calendar_month, calendar_year)")
	case f.period.calendar == "" && (set["time-zone"] || set["week-starts"]):
		return nil, usageErrorf("simulate", "simulate: --time-zone and --week-starts apply only to a calendar --period (calendar_day, calendar_week, calendar_month or calendar_year)")
	case set["burst"] && f.burst < 1:
		return nil, usageErrorf("simulate", "simulate: --burst must be at least 1, got %d", f.burst)
	case !set["block-for"] && (set["factor"] || set["max-block"] || set["forget-after"]):
		return nil, usageErrorf("simulate", "simulate: --factor, --max-block and --forget-after shape a penalty: give its --block-for too")
	}
	pen := sluice.Penalty{BlockFor: f.blockFor, Factor: f.factor, MaxBlock: f.maxBlock, ForgetAfter: f.forgetAfter}
	var cal sluice.Calendar
	if f.period.calendar != "" {
		c, err := config.ParseCalendar(f.period.calendar, f.timeZone, f.weekStart)
		if err != nil {
			return nil, usageErrorf("simulate", "simulate: --period: %w", err)
		}
		cal = c
	}
	var algs []sluice.Algorithm
	switch {
	case f.algorithm == "all" && cal.Unit != sluice.NoCalendar:
		// Only the window algorithms take calendar periods.
		algs = []sluice.Algorithm{sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm}
	case f.algorithm == "all":
		algs = sluice.Algorithms()
	default:
		a, err := sluice.ParseAlgorithm(f.algorithm)
		if err != nil {
			return nil, usageErrorf("simulate", "simulate: --algorithm: %w", err)
		}
		algs = []sluice.Algorithm{a}
	}
	ps := make([]sluice.Policy, len(algs))
	for i, a := range algs {
		ps[i] = sluice.Policy{Algorithm: a, Limit: f.limit, Period: f.period.d, Calendar: cal, Penalty: pen}
		if a.HasBurst() || len(algs) == 1 {
			ps[i].Burst = f.burst
		}
		if err := ps[i].Validate(); err != nil {
			return nil, usageErrorf("simulate", "simulate: %w", err)
		}
	}
	return ps, nil
}

// concurrency returns the concurrency policy the flags ask for: --limit
// units held at once, with --lease. set holds the names of the flags given.
func (f *simulateFlags) concurrency(set map[string]bool) ([]sluice.Policy, error) {
	for _, name := range []string{"period", "burst", "time-zone", "week-starts", "block-for", "factor", "max-block", "forget-after"} {
		if set[name] {
			return nil, usageErrorf("simulate", "simulate: --%s does not apply to --algorithm concurrency, which limits the units held at once, not a rate; give the lease with --lease (default 30s)", name)
		}
	}
	p := sluice.Concurrency(f.limit, f.lease)
	if err := p.Validate(); err != nil {
		return nil, usageErrorf("simulate", "simulate: %w", err)
	}
	return []sluice.Policy{p}, nil
}

// checkAndRewind reads the whole trace from r to check it, and returns a
// reader positioned where r was, to read it again: r itself when it can
// seek, else a temporary file that received a copy of it. cleanup removes
// that file; it is never nil.
func checkAndRewind(r io.Reader) (_ io.Reader, cleanup func(), _ error) {
	cleanup = func() {}
	if sk, ok := r.(io.Seeker); ok {
		if start, err := sk.Seek(0, io.SeekCurrent); err == nil {
			if _, err := simulate.CheckTrace(r); err != nil {
				return nil, cleanup, err
			}
			if _, err := sk.Seek(start, io.SeekStart); err != nil {
				return nil, cleanup, fmt.Errorf("rewind the trace: %w", err)
			}
			return r, cleanup, nil
		}
	}
	tmp, err := os.CreateTemp("", "sluice-trace-*.csv")
	if err != nil {
		return nil, cleanup, fmt.Errorf("copy the trace: %w", err)
	}
	cleanup = func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}
	if _, err := simulate.CheckTrace(io.TeeReader(r, tmp)); err != nil {
		return nil, cleanup, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, cleanup, fmt.Errorf("rewind the copy of the trace: %w", err)
	}
	return tmp, cleanup, nil
}

// numFlag is an int64 or uint64 flag whose errors say what is wanted.
type numFlag[T int64 | uint64] struct{ p *T }

func (v numFlag[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return fmt.Sprint(*v.p)
}

func (v numFlag[T]) Set(s string) error {
	signed := ^T(0) < 0
	var n T
	var err error
	if signed {
		var i int64
		i, err = strconv.ParseInt(s, 10, 64)
		n = T(i)
	} else {
		var u uint64
		u, err = strconv.ParseUint(s, 10, 64)
		n = T(u)
	}
	switch {
	case errors.Is(err, strconv.ErrRange):
		return errors.New("out of range")
	case err != nil && signed:
		return errors.New("not an integer")
	case err != nil:
		return errors.New("not an unsigned integer")
	}
	*v.p = n
	return nil
}

// periodFlag is --period: a duration, or a calendar period's name.
type periodFlag struct {
	d        time.Duration
	calendar string
}

func (v *periodFlag) String() string {
	if v == nil {
		return "0s"
	}
	if v.calendar != "" {
		return v.calendar
	}
	return v.d.String()
}

func (v *periodFlag) Set(s string) error {
	if config.IsCalendarPeriod(s) {
		*v = periodFlag{calendar: s}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(durationProblem(s) + ", or a calendar period (calendar_day, calendar_week, calendar_month, calendar_year)")
	}
	*v = periodFlag{d: d}
	return nil
}

// durationFlag is a time.Duration flag whose errors say what is wanted.
type durationFlag time.Duration

func (v *durationFlag) String() string {
	if v == nil {
		return "0s"
	}
	return time.Duration(*v).String()
}

func (v *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(durationProblem(s))
	}
	*v = durationFlag(d)
	return nil
}

// emptyTrace is the error for a trace without requests, naming the line
// read as a header, if any: the commonest way to get one by mistake.
func emptyTrace(name string, tr *simulate.TraceReader) error {
	msg := fmt.Sprintf("simulate: trace %s has no requests", name)
	if h, line := tr.Header(); line > 0 {
		msg += fmt.Sprintf(" (line %d, %q, was read as a header: its first field is not an integer)", line, h)
	}
	return errors.New(msg + "; --allow-empty accepts a trace without requests")
}

// interactive reports whether r is a terminal, by the test the standard
// library allows: a character device other than /dev/null.
func interactive(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
