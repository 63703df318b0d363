#!/usr/bin/env bash
# flood.sh reproduces the "Refused floods" numbers in docs/BENCHMARKS.md:
# BenchmarkFlood (flood_test.go) on one private redis-server, COUNT rounds,
# summarised by benchstat (medians).
#
# Usage: bench/redis/flood.sh [OUT_DIR]    (default: bench/redis/results/flood)
# Environment: COUNT (default 3), BENCHTIME (default 2s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
out=${1:-$here/results/flood}
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
for round in $(seq "${COUNT:-3}"); do
	echo "# round $round, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/raw.txt"
	(cd redis && "$bin/redis.test" -test.run '^$' -test.bench '^BenchmarkFlood$' -test.benchtime "${BENCHTIME:-2s}" -test.count 1) | tee -a "$out/raw.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
go tool benchstat "$out/raw.txt" | tee "$out/benchstat.txt"
