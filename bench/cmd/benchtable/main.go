// Command benchtable turns the output of the bench module's benchmarks into
// the tables of docs/BENCHMARKS.md and checks Sluice's targets.
//
// Usage:
//
//	benchtable ROUND_FILE...
//
// Each file holds one round: one run of every benchmark (go test
// -count 1). Rounds are run one after another, so within a round every
// library ran within a minute or so of the others; a ratio is computed
// within each round and then summarized over the rounds (median, min, max),
// beside the ratio of the medians. Benchmark names must end in
// "/lib=NAME" (plus the -GOMAXPROCS suffix).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// libs is the column order; the first is the subject, the rest are peers.
var libs = []string{"sluice", "xrate", "xrate-shards", "golimiter", "throttled"}

// sample is one benchmark result in one round.
type sample map[string]float64 // unit -> value

// data maps workload -> lib -> round -> sample.
type data map[string]map[string][]sample

func run(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: benchtable ROUND_FILE [ROUND_FILE ...]")
	}
	d := data{}
	var order []string
	for round, path := range args {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = parse(f, path, round, len(args), d, &order)
		f.Close()
		if err != nil {
			return err
		}
	}
	return report(w, d, order, len(args))
}

// parse reads the benchmark lines of one round into d.
func parse(r io.Reader, path string, round, rounds int, d data, order *[]string) error {
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		// A benchmark without a library (such as Clock/time.Now) is
		// filed under the library "".
		workload, lib := strings.TrimPrefix(name, "Benchmark"), ""
		if i := strings.LastIndex(name, "/lib="); i >= 0 {
			workload, lib = strings.TrimPrefix(name[:i], "Benchmark"), name[i+len("/lib="):]
		}
		s := sample{}
		for j := 2; j+1 < len(fields); j += 2 {
			v, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				return fmt.Errorf("%s:%d: value %q of %s: %w", path, line, fields[j], fields[j+1], err)
			}
			s[fields[j+1]] = v
		}
		if d[workload] == nil {
			d[workload] = map[string][]sample{}
			*order = append(*order, workload)
		}
		if d[workload][lib] == nil {
			d[workload][lib] = make([]sample, rounds)
		}
		d[workload][lib][round] = s
	}
	return sc.Err()
}

// values returns the unit's values of workload/lib over the rounds that
// have it.
func (d data) values(workload, lib, unit string) []float64 {
	var vs []float64
	for _, s := range d[workload][lib] {
		if v, ok := s[unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	if n := len(vs); n%2 == 1 {
		return vs[n/2]
	} else {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
}

// ratio is a summary of per-round ratios of a peer's cost to Sluice's: how
// many times faster (or smaller) Sluice is.
type ratio struct {
	ofMedians        float64
	median, min, max float64
	rounds           int
}

func (r ratio) String() string {
	if r.rounds == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f× (per round: median %.2f×, %.2f–%.2f×, %d rounds)", r.ofMedians, r.median, r.min, r.max, r.rounds)
}

// fastestPeerRatio compares Sluice with the peer that has the lowest value
// of unit, within each round and over the medians.
func (d data) fastestPeerRatio(workload, unit string) (ratio, string) {
	var per []float64
	rounds := len(d[workload]["sluice"])
	for round := range rounds {
		s, ok := d[workload]["sluice"][round][unit]
		if !ok || s == 0 {
			continue
		}
		best := 0.0
		for _, lib := range libs[1:] {
			if ss := d[workload][lib]; ss != nil {
				if v, ok := ss[round][unit]; ok && (best == 0 || v < best) {
					best = v
				}
			}
		}
		if best > 0 {
			per = append(per, best/s)
		}
	}
	bestLib, bestMed := "", 0.0
	for _, lib := range libs[1:] {
		if vs := d.values(workload, lib, unit); len(vs) > 0 {
			if m := median(vs); bestLib == "" || m < bestMed {
				bestLib, bestMed = lib, m
			}
		}
	}
	if len(per) == 0 || bestLib == "" {
		return ratio{}, ""
	}
	return ratio{
		ofMedians: bestMed / median(d.values(workload, "sluice", unit)),
		median:    median(per),
		min:       slices.Min(per),
		max:       slices.Max(per),
		rounds:    len(per),
	}, bestLib
}

// peerRatio compares Sluice with one peer, within each round.
func (d data) peerRatio(workload, peer, unit string) ratio {
	var per []float64
	for round, s := range d[workload]["sluice"] {
		ps := d[workload][peer]
		if ps == nil || s[unit] == 0 {
			continue
		}
		if v, ok := ps[round][unit]; ok {
			per = append(per, v/s[unit])
		}
	}
	if len(per) == 0 {
		return ratio{}
	}
	return ratio{
		ofMedians: median(d.values(workload, peer, unit)) / median(d.values(workload, "sluice", unit)),
		median:    median(per),
		min:       slices.Min(per),
		max:       slices.Max(per),
		rounds:    len(per),
	}
}

// report writes the tables and the targets of the rounds of d, workloads
// in order, as Markdown.
func report(w io.Writer, d data, order []string, rounds int) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Medians over %d rounds; lower is better. ns/op is wall-clock time, cpu-ns/op the process's CPU time per operation (see docs/BENCHMARKS.md).\n", rounds)
	reportTimes(p, d, order)
	reportBytes(p, d)
	reportOther(p, d, order)
	reportTargets(p, d)
	return nil
}

// printf is report's writer.
type printf func(format string, args ...any)

// reportTimes writes the table of each time unit: every library's median
// per workload, and the fastest peer's ratio to Sluice.
func reportTimes(p printf, d data, order []string) {
	for _, unit := range []string{"ns/op", "cpu-ns/op"} {
		libHeader(p, fmt.Sprintf("workload (%s)", unit), "fastest peer ÷ sluice")
		for _, wl := range order {
			if wl == "BytesPerKey" || len(d.values(wl, "sluice", unit)) == 0 {
				continue
			}
			p("| %s |", wl)
			libCells(p, d, wl, unit)
			r, best := d.fastestPeerRatio(wl, unit)
			p(" %.2f× (%s) |\n", r.ofMedians, best)
		}
	}
}

// reportBytes writes the table of heap bytes per tracked key.
func reportBytes(p printf, d data) {
	libHeader(p, "bytes of heap per tracked key at 1,000,000 keys", "")
	p("| B/key |")
	libCells(p, d, "BytesPerKey", "B/key")
	p("\n")
}

// libHeader writes, after a blank line, the header of a table with the
// column first, one column per library, and the column extra unless it
// is empty.
func libHeader(p printf, first, extra string) {
	p("\n| %s |", first)
	for _, lib := range libs {
		p(" %s |", lib)
	}
	if extra != "" {
		p(" %s |", extra)
	}
	p("\n|---|")
	for range libs {
		p("---:|")
	}
	if extra != "" {
		p("---|")
	}
	p("\n")
}

// libCells writes one cell per library: the median of its values of wl
// in unit, or a dash where it has none.
func libCells(p printf, d data, wl, unit string) {
	for _, lib := range libs {
		if vs := d.values(wl, lib, unit); len(vs) > 0 {
			p(" %s |", format(median(vs)))
		} else {
			p(" – |")
		}
	}
}

// reportOther writes the other measurements of the run and the
// allocations of any library that allocates.
func reportOther(p printf, d data, order []string) {
	var other []string
	for _, wl := range order {
		if len(d.values(wl, "", "ns/op")) > 0 {
			other = append(other, fmt.Sprintf("%s %s ns/op (%s cpu-ns/op)", wl,
				format(median(d.values(wl, "", "ns/op"))), format(median(d.values(wl, "", "cpu-ns/op")))))
		}
	}
	if len(other) > 0 {
		p("\nOther measurements in the same run: %s.\n", strings.Join(other, "; "))
	}

	// Allocations: every library should allocate nothing per decision on
	// an existing key; list any that does.
	var allocs []string
	for _, wl := range order {
		if wl == "BytesPerKey" {
			continue
		}
		for _, lib := range libs {
			if m := median(d.values(wl, lib, "allocs/op")); m > 0 {
				allocs = append(allocs, fmt.Sprintf("%s/%s %.0f allocs/op (%.0f B/op)", wl, lib, m, median(d.values(wl, lib, "B/op"))))
			}
		}
	}
	if len(allocs) == 0 {
		p("\nAllocations: 0 allocs/op for every library in every timed workload.\n")
	} else {
		p("\nAllocations: %s; every other timed workload 0 allocs/op.\n", strings.Join(allocs, "; "))
	}
}

// reportTargets writes whether each of Sluice's targets is met.
func reportTargets(p printf, d data) {
	p("\nTargets (each ratio computed within each round of the same run, and of the medians):\n")
	met := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	for _, unit := range []string{"ns/op", "cpu-ns/op"} {
		const wl1 = "OneKeySerial"
		r := d.peerRatio(wl1, "xrate", unit)
		if r.rounds == 0 {
			continue
		}
		p("\n- [%s] one key, serial, token bucket: Sluice ≥ 1.5× faster than x/time/rate's Allow: %s: %s", unit, met(r.ofMedians >= 1.5), r)
		if r.ofMedians < 1.5 {
			p("; short by %.0f%%: Sluice would need ≤ %s, it took %s", 100*(1.5-r.ofMedians)/1.5,
				format(median(d.values(wl1, "xrate", unit))/1.5), format(median(d.values(wl1, "sluice", unit))))
		}
		p(".\n")
		for _, wl2 := range []string{"KeysPrepared/keys=100000", "KeysParallel/keys=100000"} {
			r2, best := d.fastestPeerRatio(wl2, unit)
			if r2.rounds == 0 {
				continue
			}
			shape := "keys prepared beforehand"
			if strings.HasPrefix(wl2, "KeysParallel") {
				shape = "keys built in the loop"
			}
			p("- [%s] 100,000 keys, parallel, %s: Sluice ≥ 2× faster than the fastest peer (%s): %s: %s", unit, shape, best, met(r2.ofMedians >= 2), r2)
			if r2.ofMedians < 2 {
				p("; short by %.0f%%: Sluice would need ≤ %s, it took %s", 100*(2-r2.ofMedians)/2,
					format(median(d.values(wl2, best, unit))/2), format(median(d.values(wl2, "sluice", unit))))
			}
			p(".\n")
		}
	}
	if bk := d.values("BytesPerKey", "sluice", "B/key"); len(bk) > 0 {
		m := median(bk)
		p("\n- ≤ 48 bytes of heap per tracked token-bucket key at 1,000,000 keys: %s: %s B/key (%s–%s over %d rounds).\n",
			met(m <= 48), format(m), format(slices.Min(bk)), format(slices.Max(bk)), len(bk))
	} else {
		p("\n- ≤ 48 bytes of heap per tracked token-bucket key: no BytesPerKey result.\n")
	}
}

// format prints v with three significant digits, as benchstat does.
func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
