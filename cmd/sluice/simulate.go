package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/simulate"
)

const simulateUsage = `Usage: sluice simulate --algorithm ALG|all --limit N --period DUR [--burst B]
                       [--trace FILE|-] [--format table|jsonl]

Replays a trace of requests through a rate-limiting algorithm at the trace's
own times and prints every decision (jsonl) or a summary per key (table).
With --algorithm all it compares the six algorithms on the same trace.

Flags:
  --algorithm ALG|all  token_bucket, gcra, leaky_bucket, fixed_window,
                       sliding_log, sliding_window, or all (required)
  --limit N            cost units admitted per period (required)
  --period DUR         the period, in Go duration syntax: 250ms, 1s, 1m, 24h
                       (required; a whole number of microseconds)
  --burst B            capacity of token_bucket, gcra and leaky_bucket
                       (default: the limit); the window algorithms have no
                       burst of their own and refuse one other than the limit.
                       With --algorithm all it applies to the bucket family only.
  --trace FILE|-       the trace to read; - or no --trace reads standard input
  --format table|jsonl
                       table (default): a summary per key, or with
                       --algorithm all a comparison; jsonl: one decision per
                       line (one algorithm only)

Trace: CSV, one request per line, t_ms,key[,cost]:
  - t_ms: integer milliseconds since the Unix epoch (0 to 253402300799999);
    windows align to multiples of the period from 0. Timestamps never
    decrease from one line to the next (equal is fine); a trace where one
    does is refused before any decision is printed.
  - key: non-empty, without commas, double quotes or control characters
    (quoted CSV fields are not supported).
  - cost: an integer from 1 to 1000000000; 1 when the field is left out.
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
                  initial if nothing else came
A jsonl run reads the trace twice, so that a bad line stops it before any
output; standard input that cannot seek (a pipe) is copied to a temporary file.

Comparison (--algorithm all): per algorithm, the requests admitted and
denied, the cost admitted, the most cost admitted for one key within any
period-long interval, and the p99 delay: the nearest-rank 99th percentile
of the delays of the admitted requests (the ceil(0.99*n)-th smallest of n).

Memory: a table or jsonl run keeps state per key, not per request; a
comparison also keeps, per key and algorithm, the admitted requests of the
last period.

Exit status: 0 on success, 1 when the trace is invalid or cannot be read,
2 for invalid flags or an invalid policy.

Example:
  sluice simulate --algorithm all --limit 100 --period 1m --trace examples/traces/boundary.csv
`

// simulateFlags are the parsed flags of `sluice simulate`.
type simulateFlags struct {
	algorithm string
	limit     int64
	period    time.Duration
	burst     int64
	trace     string
	format    string
}

// newSimulateFlags returns the flag set of `sluice simulate`, which
// reports to stderr, and the values it fills.
func newSimulateFlags(stderr io.Writer) (*flag.FlagSet, *simulateFlags) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), simulateUsage) }
	f := new(simulateFlags)
	fs.StringVar(&f.algorithm, "algorithm", "", "the algorithm, or all")
	fs.Var((*intFlag)(&f.limit), "limit", "cost units per period")
	fs.Var((*durationFlag)(&f.period), "period", "the period")
	fs.Var((*intFlag)(&f.burst), "burst", "the token-bucket family's capacity")
	fs.StringVar(&f.trace, "trace", "-", "the trace file, or - for standard input")
	fs.StringVar(&f.format, "format", "table", "table or jsonl")
	return fs, f
}

func runSimulate(ctx context.Context, s streams, args []string) error {
	fs, f := newSimulateFlags(s.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err: fmt.Errorf("simulate: %w", err), shown: true, cmd: "simulate"}
	}
	if fs.NArg() > 0 {
		return usageErrorf("simulate", "simulate: unexpected argument %q (flags only)", fs.Arg(0))
	}
	set := make(map[string]bool)
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	policies, err := f.policies(set)
	if err != nil {
		return err
	}
	switch f.format {
	case "table":
	case "jsonl":
		if len(policies) > 1 {
			return usageErrorf("simulate", "simulate: --format jsonl needs one algorithm; --algorithm all prints a comparison table")
		}
	default:
		return usageErrorf("simulate", "simulate: --format must be table or jsonl, got %q", f.format)
	}

	in, name := s.stdin, "<stdin>"
	if f.trace != "-" && f.trace != "" {
		file, err := os.Open(f.trace)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		defer file.Close()
		in, name = file, f.trace
	}
	traceErr := func(err error) error {
		var pe *simulate.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("simulate: trace %s: %w", name, err)
		}
		return fmt.Errorf("simulate: %w", err)
	}

	out := bufio.NewWriterSize(s.stdout, 64<<10)
	switch {
	case f.format == "jsonl":
		// Check the whole trace first, so that a bad line stops the run
		// before any decision is printed.
		in, cleanup, err := checkAndRewind(in)
		defer cleanup()
		if err != nil {
			return traceErr(err)
		}
		jw := simulate.NewJSONLWriter(out)
		err = simulate.Run(ctx, simulate.NewTraceReader(in), policies, func(req simulate.Request, ds []sluice.Decision) error {
			return jw.Write(req, ds[0])
		})
		if err != nil {
			return traceErr(err)
		}
		if err := jw.Flush(); err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
	case len(policies) > 1:
		cmp := simulate.NewComparison(policies)
		err := simulate.Run(ctx, simulate.NewTraceReader(in), policies, func(req simulate.Request, ds []sluice.Decision) error {
			cmp.Add(req, ds)
			return nil
		})
		if err != nil {
			return traceErr(err)
		}
		if err := cmp.WriteTable(out); err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
	default:
		sum := simulate.NewKeySummary(policies[0])
		err := simulate.Run(ctx, simulate.NewTraceReader(in), policies, func(req simulate.Request, ds []sluice.Decision) error {
			sum.Add(req, ds[0])
			return nil
		})
		if err != nil {
			return traceErr(err)
		}
		if err := sum.WriteTable(out); err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	return nil
}

// policies returns the policies the flags ask for: one, or with
// --algorithm all one per algorithm. set holds the names of the flags given.
func (f *simulateFlags) policies(set map[string]bool) ([]sluice.Policy, error) {
	switch {
	case !set["algorithm"] || f.algorithm == "":
		return nil, usageErrorf("simulate", "simulate: --algorithm is required (one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, all)")
	case !set["limit"]:
		return nil, usageErrorf("simulate", "simulate: --limit is required")
	case !set["period"]:
		return nil, usageErrorf("simulate", "simulate: --period is required (Go duration syntax: 250ms, 1s, 1m, 24h)")
	case set["burst"] && f.burst < 1:
		return nil, usageErrorf("simulate", "simulate: --burst must be at least 1, got %d", f.burst)
	}
	var algs []sluice.Algorithm
	if f.algorithm == "all" {
		algs = sluice.Algorithms()
	} else {
		a, err := sluice.ParseAlgorithm(f.algorithm)
		if err != nil {
			return nil, usageErrorf("simulate", "simulate: --algorithm: %w", err)
		}
		algs = []sluice.Algorithm{a}
	}
	ps := make([]sluice.Policy, len(algs))
	for i, a := range algs {
		ps[i] = sluice.Policy{Algorithm: a, Limit: f.limit, Period: f.period}
		if a.HasBurst() || len(algs) == 1 {
			ps[i].Burst = f.burst
		}
		if err := ps[i].Validate(); err != nil {
			return nil, usageErrorf("simulate", "simulate: %w", err)
		}
	}
	return ps, nil
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

// intFlag is an int64 flag whose errors say what is wanted.
type intFlag int64

func (v *intFlag) String() string {
	if v == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*v), 10)
}

func (v *intFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return errors.New("out of range")
	}
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intFlag(n)
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
		return errors.New("not a duration (Go syntax: 250ms, 1s, 1m, 24h)")
	}
	*v = durationFlag(d)
	return nil
}
