#!/usr/bin/env bash
# run.sh reproduces the "Redis store" numbers in docs/BENCHMARKS.md: Sluice's
# Redis store against go-redis/redis_rate and a bare EVALSHA on one private
# redis-server, and the client-library comparison, COUNT times each,
# summarised by benchstat (medians). Within a run, every caller count runs
# every library in turn on the same server.
#
# Usage: bench/redis/run.sh [OUT_DIR]    (default: bench/redis/results)
# Environment: COUNT (default 5), BENCHTIME (default 2s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
out=${1:-$here/results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git -C "$bench" rev-parse HEAD)"
	echo "go: $(go version)"
	echo "redis: $(redis-server --version)"
	echo "nproc: $(nproc)"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"
cd "$bench"
go test ./redis -run '^$' -bench . -benchtime "${BENCHTIME:-2s}" -count "${COUNT:-5}" | tee "$out/raw.txt"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
go tool benchstat "$out/raw.txt" | tee "$out/benchstat.txt"
