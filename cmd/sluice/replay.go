package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/internal/simulate"
)

const replayUsage = `
Replaying a decision log:

  sluice simulate --replay LOG --config CANDIDATE.yaml [--top N]
                  [--chart FILE --chart-limit NAME]

Plays the decisions that sluice serve --decision-log wrote to LOG through
the limits of CANDIDATE.yaml, at the logged times, and reports against what
was decided: decisions whose outcome changes, per rule and limit; the keys
most affected, with when each was first refused then and would be under the
candidate; and with --chart, one limit's requests over time, as decided and
under the candidate (.png or .svg). Replaying a log against the
configuration that wrote it reproduces every decision (docs/operations.md,
"Decision log").

  --replay LOG         the decision log (- reads standard input)
  --config FILE        the candidate configuration (sluice serve's file)
  --top N              keys listed (default 20)
  --chart FILE         draw --chart-limit's requests to FILE
  --chart-limit NAME   the limit the chart draws (default: the one with
                       the most changed decisions)
`

// wantsReplay reports whether args ask for a replay.
func wantsReplay(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--replay" || a == "-replay" || strings.HasPrefix(a, "--replay=") || strings.HasPrefix(a, "-replay=") {
			return true
		}
	}
	return false
}

// runReplay runs sluice simulate --replay.
func runReplay(ctx context.Context, s streams, args []string) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	logName := fs.String("replay", "", "decision log")
	cfgName := fs.String("config", "", "candidate configuration")
	top := fs.Int("top", 20, "keys listed")
	chartName := fs.String("chart", "", "chart file")
	chartLimit := fs.String("chart-limit", "", "limit charted")
	if err := parseFlags(fs, "simulate", "simulate", simulateUsage, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageErrorf("simulate", "simulate: unexpected argument %q", fs.Arg(0))
	case *logName == "":
		return usageErrorf("simulate", "simulate: --replay needs a decision log")
	case *cfgName == "":
		return usageErrorf("simulate", "simulate: --replay needs --config CANDIDATE.yaml, the configuration to replay against")
	case *top < 0:
		return usageErrorf("simulate", "simulate: --top must not be negative")
	case *chartLimit != "" && *chartName == "":
		return usageErrorf("simulate", "simulate: --chart-limit needs --chart FILE")
	}
	var format string
	if *chartName != "" {
		f, err := simulate.ChartFormat(*chartName)
		if err != nil {
			return usageErrorf("simulate", "simulate: --chart: %v", err)
		}
		format = f
	}
	data, err := os.ReadFile(*cfgName)
	if err != nil {
		return fmt.Errorf("simulate: --config: %w", err)
	}
	cfg, err := config.Parse(*cfgName, data, formats)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(s.stderr, p.String())
			}
			return &exitError{code: 1, err: fmt.Errorf("simulate: %s has %s", *cfgName, problemCount(len(ce.Problems)))}
		}
		return fmt.Errorf("simulate: %w", err)
	}
	limits := map[string]simulate.ReplayLimit{}
	for _, l := range cfg.Limits() {
		limits[l.Policy.Name] = simulate.ReplayLimit{Policy: l.Policy, Shadow: l.Shadow}
	}
	// The limits of Envoy's descriptors, by the names the log gives them
	// ("envoy:" domain "." descriptor path).
	envoy, err := buildEnvoy(cfg)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	for _, p := range envoy.Policies() {
		limits[p.Name] = simulate.ReplayLimit{Policy: p}
	}

	var in io.Reader = s.stdin
	if *logName != "-" {
		f, err := os.Open(*logName)
		if err != nil {
			return fmt.Errorf("simulate: --replay: %w", err)
		}
		defer f.Close()
		in = f
	}
	// Two passes when the chart's limit is to be found: the first counts
	// changes without a chart.
	records, err := readRecords(in, *logName)
	if err != nil {
		return err
	}
	simulate.SortRecords(records)
	run := func(chartOf string) (*simulate.Replay, *simulate.ReplayReport, error) {
		r := simulate.NewReplay(limits, chartOf)
		for _, rec := range records {
			if err := r.Add(ctx, rec); err != nil {
				r.Close()
				return nil, nil, fmt.Errorf("simulate: --replay: %w", err)
			}
		}
		return r, r.Report(), nil
	}
	r, rep, err := run(*chartLimit)
	if err != nil {
		return err
	}
	defer r.Close()
	if *chartName != "" && *chartLimit == "" {
		best := mostChanged(rep)
		if best == "" {
			return fmt.Errorf("simulate: --chart: no replayed limit to draw")
		}
		r.Close()
		if r, rep, err = run(best); err != nil {
			return err
		}
	} else if *chartLimit != "" {
		if _, ok := limits[*chartLimit]; !ok {
			return usageErrorf("simulate", "simulate: --chart-limit: the candidate has no limit %q", *chartLimit)
		}
	}
	out := bufio.NewWriter(s.stdout)
	if err := simulate.WriteReplayReport(out, rep, *top); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if *chartName != "" {
		f, err := os.Create(*chartName)
		if err != nil {
			return fmt.Errorf("simulate: --chart: %w", err)
		}
		w := bufio.NewWriter(f)
		err = r.WriteChart(w, format)
		if err == nil {
			err = w.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(*chartName)
			return fmt.Errorf("simulate: --chart: %w", err)
		}
	}
	return nil
}

// readRecords reads every record of a decision log.
func readRecords(in io.Reader, name string) ([]*decisionlog.Record, error) {
	dr := decisionlog.NewReader(in)
	var out []*decisionlog.Record
	for {
		rec, err := dr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("simulate: %s: %w", name, err)
		}
		out = append(out, rec)
	}
}

// mostChanged returns the limit with the most changed decisions, else the
// first replayed one.
func mostChanged(rep *simulate.ReplayReport) string {
	best, n := "", -1
	changes := map[string]int{}
	var order []string
	for _, g := range rep.Limits {
		if _, ok := changes[g.Limit]; !ok {
			order = append(order, g.Limit)
		}
		changes[g.Limit] += g.NewlyRefused + g.NewlyAdmitted
	}
	for _, l := range order {
		if changes[l] > n {
			best, n = l, changes[l]
		}
	}
	return best
}

// simDecisionLog writes the decisions of sluice simulate as a decision
// log (door "simulate"), for --replay to play against a configuration.
type simDecisionLog struct {
	f    *os.File
	w    *bufio.Writer
	name string
	done bool
}

func newSimDecisionLog(path, name string) (*simDecisionLog, error) {
	if name == "" {
		return nil, usageErrorf("simulate", "simulate: --name must not be empty")
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("simulate: --decision-log: %w", err)
	}
	return &simDecisionLog{f: f, w: bufio.NewWriter(f), name: name}, nil
}

func (l *simDecisionLog) write(req simulate.Request, d sluice.Decision) error {
	outcome := "allowed"
	if !d.Allowed {
		outcome = "denied"
	}
	rec := decisionlog.Record{Time: time.UnixMilli(req.T).UTC(), Door: "simulate",
		Limits: []decisionlog.Entry{{Limit: l.name, Key: req.Key, Cost: req.Cost, Outcome: outcome}}}
	b, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	l.w.Write(b)
	return l.w.WriteByte('\n')
}

func (l *simDecisionLog) close() error {
	if l.done {
		return nil
	}
	l.done = true
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
