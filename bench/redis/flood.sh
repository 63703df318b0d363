#!/usr/bin/env bash
# flood.sh reproduces the "Refused floods" numbers in docs/BENCHMARKS.md:
# BenchmarkFlood (flood_test.go) on one private redis-server, COUNT rounds,
# summarised by benchstat (medians); run.sh runs the rounds. ratios.txt
# holds the within-round ratios that the refused-flood targets are judged
# on (docs/BENCHMARKS.md, "Targets at a glance").
#
# Usage: bench/redis/flood.sh [OUT_DIR]    (default: bench/out/flood, ignored by git)
# Environment: COUNT (default 3), BENCHTIME (default 2s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(cd "$here/.." && pwd)/out/flood}
BENCH='^BenchmarkFlood$' COUNT=${COUNT:-3} "$here/run.sh" "$out"
# Within-round ratios of the refused-flood targets: the closed-loop flood's
# decisions/s and CPU per decision, Redis store with local refusals against
# the memory store; the well-behaved keys' p99 with each flood against
# without, on the Redis store with local refusals, and with the control
# flood (spin: the closed loop's callers asking no store) against without.
awk '
	/^# round/ { round++ }
	/^BenchmarkFlood\// {
		split($1, p, "/"); store = p[2]; flood = p[3]; sub(/-[0-9]+$/, "", flood)
		for (i = 3; i < NF; i += 2) v[round, store, flood, $(i+1)] = $i
	}
	END {
		for (r = 1; r <= round; r++) {
			m = v[r, "store=memory", "flood=closed", "decisions/s"]
			l = v[r, "store=redis-local", "flood=closed", "decisions/s"]
			mc = v[r, "store=memory", "flood=closed", "cpu-ns/decision"]
			lc = v[r, "store=redis-local", "flood=closed", "cpu-ns/decision"]
			g = v[r, "store=redis-local", "flood=none", "good-p99-µs"]
			if (m > 0 && l > 0)
				printf "round %d: closed flood decisions/s redis-local/memory %.2f", r, l / m
			if (mc > 0 && lc > 0)
				printf ", CPU per decision memory/redis-local %.2f", mc / lc
			if (g > 0)
				printf ", good p99 closed/none %.2f, paced/none %.2f, spin (no store)/none %.2f",
					v[r, "store=redis-local", "flood=closed", "good-p99-µs"] / g,
					v[r, "store=redis-local", "flood=paced", "good-p99-µs"] / g,
					v[r, "store=redis-local", "flood=spin", "good-p99-µs"] / g
			printf "\n"
		}
	}' "$out/raw.txt" | tee "$out/ratios.txt"
