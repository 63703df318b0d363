package main

import (
	"fmt"
	"slices"
	"strings"
)

// groupKey names the runs of one contender, API, workload and
// concurrency across rounds.
type groupKey struct {
	workload, api string
	conc          int
	contender     string
}

func keyOf(r result) groupKey { return groupKey{r.Workload, r.API, r.Conc, r.Contender} }

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianOf returns the median of f over rs.
func medianOf(rs []result, f func(result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

// micros formats a time in µs.
func micros(us float64) string {
	switch {
	case us >= 10_000:
		return fmt.Sprintf("%.1f ms", us/1000)
	case us >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	case us >= 100:
		return fmt.Sprintf("%.0f µs", us)
	}
	return fmt.Sprintf("%.1f µs", us)
}

// rate formats decisions per second.
func rate(x float64) string {
	if x >= 1000 {
		return fmt.Sprintf("%.1fk", x/1000)
	}
	return fmt.Sprintf("%.0f", x)
}

// report returns the Markdown tables of the medians over rounds of runs
// without errors, and the ratios the targets are about, each the median
// of the ratios within a round.
func report(results []result) string {
	groups := map[groupKey][]result{}
	var order []groupKey
	rounds := map[int]bool{}
	loads := []float64{}
	for _, r := range results {
		if r.Error != "" {
			continue
		}
		k := keyOf(r)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
		rounds[r.Round] = true
		loads = append(loads, r.Load1Start, r.Load1End)
	}
	slices.SortStableFunc(order, func(a, b groupKey) int {
		if c := strings.Compare(a.workload, b.workload); c != 0 { // allowed first
			return c
		}
		if c := a.conc - b.conc; c != 0 {
			return c
		}
		return strings.Compare(a.api, b.api)
	})

	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d rounds; load average (1 min) during the runs %.1f to %.1f.\n\n", len(rounds), slices.Min(append(loads, 1e9)), slices.Max(append(loads, -1)))
	b.WriteString("| workload | conns | API | server | decisions/s | p50 | p99 | server CPU/decision | load generator CPU/decision | Redis CPU/decision | denied |\n")
	b.WriteString("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range order {
		rs := groups[k]
		cpu := func(f func(result) float64) string {
			m := medianOf(rs, f)
			if m == 0 {
				return "–"
			}
			return micros(m)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n",
			k.workload, k.conc, k.api, k.contender,
			rate(medianOf(rs, func(r result) float64 { return r.PerSec })),
			micros(medianOf(rs, func(r result) float64 { return r.P50us })),
			micros(medianOf(rs, func(r result) float64 { return r.P99us })),
			cpu(func(r result) float64 { return r.ServerCPUus }),
			cpu(func(r result) float64 { return r.ClientCPUus }),
			cpu(func(r result) float64 { return r.RedisCPUus }),
			100*medianOf(rs, func(r result) float64 { return float64(r.Denied) / float64(r.Decisions) }))
	}

	// Ratios within a round, then their median.
	byRound := map[groupKey]map[int]result{}
	for _, r := range results {
		if r.Error != "" {
			continue
		}
		k := keyOf(r)
		if byRound[k] == nil {
			byRound[k] = map[int]result{}
		}
		byRound[k][r.Round] = r
	}
	ratio := func(a, b groupKey, f func(result) float64) float64 {
		var xs []float64
		for round, ra := range byRound[a] {
			if rb, ok := byRound[b][round]; ok && f(rb) > 0 {
				xs = append(xs, f(ra)/f(rb))
			}
		}
		return median(xs)
	}
	perSec := func(r result) float64 { return r.PerSec }
	p99 := func(r result) float64 { return r.P99us }
	cpuAll := func(r result) float64 { return r.ServerCPUus + r.ClientCPUus + r.RedisCPUus }

	b.WriteString("\nSluice (memory store) against gubernator, same API, workload and connections; median of the ratios within a round:\n\n")
	b.WriteString("| workload | conns | API | decisions/s | p99 | CPU/decision (server + load generator) |\n| --- | ---: | --- | ---: | ---: | ---: |\n")
	for _, k := range order {
		if k.contender != "sluice-memory" {
			continue
		}
		g := k
		g.contender = "gubernator"
		if _, ok := byRound[g]; !ok {
			continue
		}
		r1 := ratio(k, g, perSec)
		r2 := ratio(k, g, p99)
		r3 := ratio(k, g, cpuAll)
		fmt.Fprintf(&b, "| %s | %d | %s | %.2f× | %.2f× | %.2f× |\n", k.workload, k.conc, k.api, r1, r2, r3)
	}

	if slices.ContainsFunc(order, func(k groupKey) bool { return k.contender == "bare" }) {
		b.WriteString("\nSluice (memory store) against bare, a server that decides nothing over the same net/http and grpc-go servers; median within a round of the ratio of decisions/s and of the difference in the server's CPU per decision (what Sluice's own work costs):\n\n")
		b.WriteString("| conns | API | decisions/s | server CPU/decision added |\n| ---: | --- | ---: | ---: |\n")
		for _, k := range order {
			if k.contender != "sluice-memory" || k.workload != "allowed" {
				continue
			}
			bare := k
			bare.contender = "bare"
			if _, ok := byRound[bare]; !ok {
				continue
			}
			var added []float64
			for round, rs := range byRound[k] {
				if rb, ok := byRound[bare][round]; ok {
					added = append(added, rs.ServerCPUus-rb.ServerCPUus)
				}
			}
			fmt.Fprintf(&b, "| %d | %s | %.2f× | %s |\n", k.conc, k.api, ratio(k, bare, perSec), micros(median(added)))
		}
	}

	b.WriteString("\nSluice service with the Redis store against the Redis store as a library in the load generator, same Redis, same workload; median of the ratios within a round:\n\n")
	b.WriteString("| conns | API | decisions/s | p50 | p99 |\n| --- | --- | ---: | ---: | ---: |\n")
	p50 := func(r result) float64 { return r.P50us }
	for _, k := range order {
		if k.contender != "sluice-redis" {
			continue
		}
		lib := groupKey{k.workload, "library", k.conc, "redisstore"}
		if _, ok := byRound[lib]; !ok {
			continue
		}
		r1 := ratio(k, lib, perSec)
		r2 := ratio(k, lib, p50)
		r3 := ratio(k, lib, p99)
		fmt.Fprintf(&b, "| %d | %s | %.2f× | %.2f× | %.2f× |\n", k.conc, k.api, r1, r2, r3)
	}
	return b.String()
}
