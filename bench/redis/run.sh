#!/usr/bin/env bash
# run.sh reproduces the "Redis store" numbers in docs/BENCHMARKS.md: Sluice's
# Redis store (batched, as by default, and with MaxBatch 1) against
# go-redis/redis_rate and a bare EVALSHA on one private redis-server, and
# the client-library comparison. It runs COUNT rounds; each round runs every
# benchmark once, every library in turn at each caller count, so that the
# libraries compared share the machine's conditions. benchstat summarises
# the rounds (medians), and ratios.txt holds, per caller count, the
# within-round ratio of Sluice's decisions per second to redis_rate's.
#
# Usage: bench/redis/run.sh [OUT_DIR]    (default: bench/out/redis, ignored by git)
# Environment: COUNT (default 5), BENCHTIME (default 2s), BENCH (another
# -test.bench pattern, as flood.sh passes; then there are no ratios).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
out=${1:-$bench/out/redis}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git -C "$bench" rev-parse HEAD)"
	echo "go: $(go version)"
	echo "redis: $(redis-server --version)"
	echo "nproc: $(nproc)"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"
cd "$bench"
go test -c -o "$bin/redis.test" ./redis
: >"$out/raw.txt"
for round in $(seq "${COUNT:-5}"); do
	echo "# round $round, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/raw.txt"
	(cd redis && "$bin/redis.test" -test.run '^$' -test.bench "${BENCH:-^Benchmark(Redis|RedisInstructions|Client)\$}" -test.benchtime "${BENCHTIME:-2s}" -test.count 1) | tee -a "$out/raw.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
go tool benchstat "$out/raw.txt" | tee "$out/benchstat.txt"
[ -z "${BENCH:-}" ] || exit 0
# Within-round ratios: Sluice (batched, then unbatched) over redis_rate.
awk '
	/^# round/ { round++ }
	/^BenchmarkRedis\// {
		split($1, p, "/"); callers = p[2]; lib = p[3]; sub(/-[0-9]+$/, "", lib)
		for (i = 3; i < NF; i += 2) if ($(i+1) == "decisions/s") v[round, callers, lib] = $i
		seen[callers] = 1
	}
	END {
		for (c in seen) for (r = 1; r <= round; r++) if ((r, c, "lib=redis_rate") in v)
			printf "%s round %d: batched %.2f, unbatched %.2f\n", c, r,
				v[r, c, "lib=sluice"] / v[r, c, "lib=redis_rate"], v[r, c, "lib=sluice-unbatched"] / v[r, c, "lib=redis_rate"]
	}' "$out/raw.txt" | sort -t= -k2 -n | tee "$out/ratios.txt"
