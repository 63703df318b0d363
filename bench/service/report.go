package main

import (
	"fmt"
	"maps"
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

// runs are the results without errors, by group and by round.
type runs struct {
	groups  map[groupKey][]result
	byRound map[groupKey]map[int]result
	order   []groupKey // allowed first, then by connections and API
}

func collect(results []result) *runs {
	rs := &runs{groups: map[groupKey][]result{}, byRound: map[groupKey]map[int]result{}}
	for _, r := range results {
		if r.Error != "" {
			continue
		}
		k := keyOf(r)
		if _, ok := rs.groups[k]; !ok {
			rs.order = append(rs.order, k)
			rs.byRound[k] = map[int]result{}
		}
		rs.groups[k] = append(rs.groups[k], r)
		rs.byRound[k][r.Round] = r
	}
	slices.SortStableFunc(rs.order, func(a, b groupKey) int {
		if c := strings.Compare(a.workload, b.workload); c != 0 { // allowed first
			return c
		}
		if c := a.conc - b.conc; c != 0 {
			return c
		}
		return strings.Compare(a.api, b.api)
	})
	return rs
}

// median returns the median of f over the rounds of k.
func (rs *runs) median(k groupKey, f func(result) float64) float64 {
	return medianOf(rs.groups[k], f)
}

// ratio returns the median over rounds of f(a)/f(b) within a round.
func (rs *runs) ratio(a, b groupKey, f func(result) float64) float64 {
	var xs []float64
	for round, ra := range rs.byRound[a] {
		if rb, ok := rs.byRound[b][round]; ok && f(rb) > 0 {
			xs = append(xs, f(ra)/f(rb))
		}
	}
	return median(xs)
}

// diff returns the median over rounds of f(a)-f(b) within a round.
func (rs *runs) diff(a, b groupKey, f func(result) float64) float64 {
	var xs []float64
	for round, ra := range rs.byRound[a] {
		if rb, ok := rs.byRound[b][round]; ok {
			xs = append(xs, f(ra)-f(rb))
		}
	}
	return median(xs)
}

func (rs *runs) has(k groupKey) bool { _, ok := rs.byRound[k]; return ok }

// as returns k with another contender (and API, if api is not empty).
func (k groupKey) as(contender, api string) groupKey {
	k.contender = contender
	if api != "" {
		k.api = api
	}
	return k
}

var (
	perSec = func(r result) float64 { return r.PerSec }
	p50    = func(r result) float64 { return r.P50us }
	p99    = func(r result) float64 { return r.P99us }
)

// status says whether a target was met.
func status(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// report returns the Markdown tables of the medians over rounds of runs
// without errors, and the ratios the targets are about, each the median
// of the ratios within a round.
func report(results []result) string {
	rs := collect(results)
	var b strings.Builder
	var loads []float64
	rounds := map[int]bool{}
	for _, r := range results {
		if r.Error == "" {
			loads = append(loads, r.Load1Start, r.Load1End)
			rounds[r.Round] = true
		}
	}
	fmt.Fprintf(&b, "Medians of %d rounds; load average (1 min) during the runs %.1f to %.1f.\n\n", len(rounds), slices.Min(append(loads, 1e9)), slices.Max(append(loads, -1)))
	mainTable(&b, rs)
	gubernatorRatios(&b, rs)
	floorCosts(&b, rs)
	libraryRatios(&b, rs)
	ratelimitRatios(&b, rs)
	floodTables(&b, rs)
	return b.String()
}

// cpuCell formats the median of a CPU time per decision, "–" for none.
func cpuCell(rs []result, f func(result) float64) string {
	m := medianOf(rs, f)
	if m == 0 {
		return "–"
	}
	return micros(m)
}

// mainTable writes the medians of every run but the flood workload's.
func mainTable(b *strings.Builder, rs *runs) {
	b.WriteString("| workload | conns | API | server | decisions/s | p50 | p99 | server CPU/decision | load generator CPU/decision | Redis CPU/decision | denied |\n")
	b.WriteString("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range rs.order {
		if floodWorkloads[k.workload] {
			continue
		}
		g := rs.groups[k]
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n",
			k.workload, k.conc, k.api, k.contender,
			rate(medianOf(g, perSec)), micros(medianOf(g, p50)), micros(medianOf(g, p99)),
			cpuCell(g, func(r result) float64 { return r.ServerCPUus }),
			cpuCell(g, func(r result) float64 { return r.ClientCPUus }),
			cpuCell(g, func(r result) float64 { return r.RedisCPUus }),
			100*medianOf(g, func(r result) float64 { return float64(r.Denied) / float64(r.Decisions) }))
	}
}

// gubernatorRatios writes Sluice's memory store against gubernator.
func gubernatorRatios(b *strings.Builder, rs *runs) {
	cpuAll := func(r result) float64 { return r.ServerCPUus + r.ClientCPUus + r.RedisCPUus }
	b.WriteString("\nSluice (memory store) against gubernator, same API, workload and connections; median of the ratios within a round:\n\n")
	b.WriteString("| workload | conns | API | decisions/s | p99 | CPU/decision (server + load generator) |\n| --- | ---: | --- | ---: | ---: | ---: |\n")
	for _, k := range rs.order {
		g := k.as("gubernator", "")
		if k.contender != "sluice-memory" || !rs.has(g) {
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %s | %.2f× | %.2f× | %.2f× |\n", k.workload, k.conc, k.api,
			rs.ratio(k, g, perSec), rs.ratio(k, g, p99), rs.ratio(k, g, cpuAll))
	}
}

// floorTargets are the targets for Sluice's server CPU per decision, in
// µs, with the memory store on the allowed workload at 64 connections.
var floorTargets = map[string]float64{"grpc": 20, "http": 25}

// floorCosts writes Sluice's server CPU per decision beside the floor's
// (bare) and what Sluice adds above it, with floorTargets.
func floorCosts(b *strings.Builder, rs *runs) {
	if !slices.ContainsFunc(rs.order, func(k groupKey) bool { return k.contender == "bare" }) {
		return
	}
	b.WriteString("\nSluice (memory store) against bare, a server that decides nothing over the same net/http and grpc-go servers: the server's CPU per decision (medians), Sluice's cost above the floor (median of the differences within a round: what Sluice's own work costs) and the ratio of decisions/s. Target at 64 connections: Sluice's server CPU per decision, floor included, at most 20 µs over gRPC and 25 µs over HTTP.\n\n")
	b.WriteString("| conns | API | Sluice server CPU/decision | floor (bare) | Sluice above the floor | decisions/s vs floor | target | status |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	server := func(r result) float64 { return r.ServerCPUus }
	for _, k := range rs.order {
		bare := k.as("bare", "")
		if k.contender != "sluice-memory" || k.workload != "allowed" || !rs.has(bare) {
			continue
		}
		total := rs.median(k, server)
		target, st := "–", "–"
		if t, ok := floorTargets[k.api]; ok && k.conc == 64 {
			target, st = "≤ "+micros(t), status(total <= t)
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %.2f× | %s | %s |\n", k.conc, k.api,
			micros(total), micros(rs.median(bare, server)), micros(rs.diff(k, bare, server)),
			rs.ratio(k, bare, perSec), target, st)
	}
}

// libraryRatios writes the Redis service against the Redis store called
// as a library.
func libraryRatios(b *strings.Builder, rs *runs) {
	b.WriteString("\nSluice service with the Redis store against the Redis store as a library in the load generator, same Redis, same workload; median of the ratios within a round:\n\n")
	b.WriteString("| conns | API | decisions/s | p50 | p99 |\n| --- | --- | ---: | ---: | ---: |\n")
	for _, k := range rs.order {
		lib := k.as("redisstore", "library")
		if k.contender != "sluice-redis" || !rs.has(lib) {
			continue
		}
		fmt.Fprintf(b, "| %d | %s | %.2f× | %.2f× | %.2f× |\n", k.conc, k.api,
			rs.ratio(k, lib, perSec), rs.ratio(k, lib, p50), rs.ratio(k, lib, p99))
	}
}

// ratelimitRatios writes Sluice on Redis against envoyproxy/ratelimit on
// the allowed-window workload, with the target of 2.5× its decisions/s.
func ratelimitRatios(b *strings.Builder, rs *runs) {
	var ks []groupKey
	for _, k := range rs.order {
		if k.workload == "allowed-window" && k.contender == "sluice-redis" && rs.has(k.as("ratelimit", "")) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return
	}
	b.WriteString("\nSluice (Redis store) against envoyproxy/ratelimit (its defaults) over Envoy's gRPC API, same Redis, every decision allowed (the same configuration file: a fixed window of 1,000,000 a second); CPU per decision: medians, server + Redis; ratios: median of the ratios within a round. Target: at least 2.5× the decisions/s at a lower p99.\n\n")
	b.WriteString("| conns | Sluice decisions/s | ratelimit decisions/s | decisions/s | Sluice p99 | ratelimit p99 | p99 | Sluice CPU/decision | ratelimit CPU/decision | status |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, k := range ks {
		rl := k.as("ratelimit", "")
		dps, lat := rs.ratio(k, rl, perSec), rs.ratio(k, rl, p99)
		fmt.Fprintf(b, "| %d | %s | %s | %.2f× | %s | %s | %.2f× | %s + %s | %s + %s | %s |\n", k.conc,
			rate(rs.median(k, perSec)), rate(rs.median(rl, perSec)), dps,
			micros(rs.median(k, p99)), micros(rs.median(rl, p99)), lat,
			micros(rs.median(k, func(r result) float64 { return r.ServerCPUus })),
			micros(rs.median(k, func(r result) float64 { return r.RedisCPUus })),
			micros(rs.median(rl, func(r result) float64 { return r.ServerCPUus })),
			micros(rs.median(rl, func(r result) float64 { return r.RedisCPUus })),
			status(dps >= 2.5 && lat < 1))
	}
}

// commandsPer1k returns Redis's commands per 1,000 decisions of the runs
// g, command by command (median over the runs, "name 1.2"), the
// commands of at least 0.05 per 1,000 by name and in order.
func commandsPer1k(g []result) string {
	names := map[string]bool{}
	for _, r := range g {
		for name := range r.RedisCommands {
			names[name] = true
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		m := medianOf(g, func(r result) float64 {
			return 1000 * float64(r.RedisCommands[name]) / float64(r.Decisions+r.CalmDecisions)
		})
		if m >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, m))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// floodWorkloads are the workloads of the flood tables.
var floodWorkloads = map[string]bool{"flood": true, "flood-alone": true, "calm": true}

// floodTables writes the flood workloads: one key refused at a number of
// connections beside well-behaved keys (flood), alone (flood-alone), and
// the well-behaved keys alone (calm), Sluice on Redis (HTTP and gRPC) and
// envoyproxy/ratelimit with its local cache, with the target of 2× its
// flood decisions/s.
func floodTables(b *strings.Builder, rs *runs) {
	var ks []groupKey
	for _, k := range rs.order {
		if k.workload == "flood" {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return
	}
	b.WriteString("\nFlood: conns workers ask for one key that is refused (a fixed window of 10 a minute) while well-behaved workers ask for other keys, each pausing after every decision: decisions/s and latencies of the flood key and, apart, of the well-behaved keys, and the well-behaved keys' p99 when they run alone. The flood alone (no well-behaved keys): Redis's commands (INFO commandstats, which counts the commands a script runs as well as the script) and CPU per 1,000 or per decision; medians:\n\n")
	b.WriteString("| conns | API | server | flood decisions/s | flood p50 | flood p99 | well-behaved decisions/s | well-behaved p99 | well-behaved p99 alone | flood alone: Redis commands per 1,000 decisions | of which | server CPU/decision | Redis CPU/decision |\n")
	b.WriteString("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n")
	calmP99 := func(r result) float64 { return r.CalmP99us }
	for _, k := range ks {
		g := rs.groups[k]
		alone := rs.groups[groupKey{"flood-alone", k.api, k.conc, k.contender}]
		calm := rs.groups[groupKey{"calm", k.api, 0, k.contender}]
		per1k, of := "–", "–"
		if len(alone) > 0 {
			per1k = fmt.Sprintf("%.2f", medianOf(alone, func(r result) float64 { return r.RedisPer1k }))
			of = commandsPer1k(alone)
		}
		calmAlone := "–"
		if len(calm) > 0 {
			calmAlone = micros(medianOf(calm, calmP99))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			k.conc, k.api, k.contender,
			rate(medianOf(g, perSec)), micros(medianOf(g, p50)), micros(medianOf(g, p99)),
			rate(medianOf(g, func(r result) float64 { return r.CalmPerSec })), micros(medianOf(g, calmP99)), calmAlone,
			per1k, of,
			cpuCell(alone, func(r result) float64 { return r.ServerCPUus }),
			cpuCell(alone, func(r result) float64 { return r.RedisCPUus }))
	}
	b.WriteString("\nFlood, Sluice on Redis against envoyproxy/ratelimit with its local cache (over gRPC); median of the ratios within a round (the flood with well-behaved keys beside it). Target: at least 2× its flood decisions/s at a lower p99. The bare rows are the floor, a server that decides nothing over the same stack: the most any server reaches against ratelimit-cache with this load generator on these cores.\n\n")
	b.WriteString("| conns | Sluice API | flood decisions/s | flood p99 | well-behaved p99 | status |\n| ---: | --- | ---: | ---: | ---: | --- |\n")
	for _, k := range ks {
		rl := k.as("ratelimit-cache", "grpc")
		if k.contender != "sluice-redis" && k.contender != "bare" || !rs.has(rl) {
			continue
		}
		if k.contender == "bare" {
			fmt.Fprintf(b, "| %d | %s (bare, the floor) | %.2f× | %.2f× | – | – |\n", k.conc, k.api, rs.ratio(k, rl, perSec), rs.ratio(k, rl, p99))
			continue
		}
		dps, lat := rs.ratio(k, rl, perSec), rs.ratio(k, rl, p99)
		calm := "–"
		if rs.median(rl, calmP99) > 0 {
			calm = fmt.Sprintf("%.2f×", rs.ratio(k, rl, calmP99))
		}
		fmt.Fprintf(b, "| %d | %s | %.2f× | %.2f× | %s | %s |\n", k.conc, k.api, dps, lat, calm, status(dps >= 2 && lat < 1))
	}
}
