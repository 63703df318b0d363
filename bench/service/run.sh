#!/usr/bin/env bash
# run.sh reproduces the "Service" numbers in docs/BENCHMARKS.md.
#
# It builds sluice (the main module's cmd/sluice), gubernatord (gubernator
# v2.13.0 in its own process), bared (the transport's floor),
# envoyproxy/ratelimit (from its Go module, in the nested module
# ratelimitd/, which pins its version and its own dependencies), the load
# generator (this directory) and the Redis store's library benchmark
# (bench/redis), then runs the load generator: it starts a private
# redis-server, two `sluice serve` (memory store, Redis store),
# gubernatord, bared and two envoyproxy/ratelimit (its defaults; with its
# local cache) on the same redis-server, and runs ROUNDS rounds of every
# contender in turn. After each round it runs the library benchmark of
# bench/redis once (Sluice's Redis store at 16 and 64 callers), so that the
# service's Redis numbers can be set beside it from the same session.
#
# Usage: bench/service/run.sh [OUT_DIR] [-- extra load generator flags]
#        (default OUT_DIR: bench/out/service, ignored by git)
# Environment: ROUNDS (default 3), DURATION (default 10s), WARMUP (2s),
# CONC (16,64: the allowed and allowed-window workloads), MIXED_CONC (64),
# FLOOD_CONC (64: flood workers of the flood workload), FLOOD_CALM (8:
# well-behaved workers beside them), REDIS_SERVER (redis-server),
# RATELIMIT (1; 0 leaves envoyproxy/ratelimit, and with it the
# allowed-window and flood workloads, out and skips its build).
# Needs redis-server on PATH (Debian: apt-get install redis-server).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
root=$(cd "$bench/.." && pwd)
out=${1:-$bench/out/service}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

redis=${REDIS_SERVER:-redis-server}
command -v "$redis" >/dev/null || { echo "run.sh: $redis not found (apt-get install redis-server)" >&2; exit 1; }

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	if commit=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
		git -C "$root" diff --quiet HEAD -- cmd internal redisstore memstore bench/service ./*.go || commit="$commit (with uncommitted changes)"
	else
		commit=unknown
	fi
	echo "commit: $commit"
	echo "go: $(go version)"
	echo "redis: $("$redis" --version)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "rounds: ${ROUNDS:-3}, duration: ${DURATION:-10s}, warm-up: ${WARMUP:-2s}, conc: ${CONC:-16,64}, mixed conc: ${MIXED_CONC-64}, flood conc: ${FLOOD_CONC-64}, flood calm: ${FLOOD_CALM:-8}"
} >"$out/machine.txt"
cat "$out/machine.txt"

(cd "$root" && go build -o "$bin/sluice" ./cmd/sluice)
(cd "$bench" && go build -o "$bin/gubernatord" ./service/gubernatord)
(cd "$bench" && go build -o "$bin/bared" ./service/bared)
ratelimit=()
if [ "${RATELIMIT:-1}" != 0 ]; then
	(cd "$here/ratelimitd" && go build -o "$bin/ratelimit" github.com/envoyproxy/ratelimit/src/service_cmd)
	echo "ratelimit: github.com/envoyproxy/ratelimit $(cd "$here/ratelimitd" && go list -m -f '{{.Version}}' github.com/envoyproxy/ratelimit)" >>"$out/machine.txt"
	ratelimit=(--ratelimit "$bin/ratelimit")
fi
(cd "$bench" && go build -o "$bin/service" ./service)
(cd "$bench" && go test -c -o "$bin/redis.test" ./redis)
(cd "$bench" && go build -o "$bin/benchstat" golang.org/x/perf/cmd/benchstat)

rm -f "$out/between.txt"
"$bin/service" --sluice "$bin/sluice" --gubernatord "$bin/gubernatord" --bared "$bin/bared" "${ratelimit[@]}" --redis-server "$redis" \
	--out "$out" --rounds "${ROUNDS:-3}" --duration "${DURATION:-10s}" --warmup "${WARMUP:-2s}" \
	--conc "${CONC:-16,64}" --mixed-conc "${MIXED_CONC-64}" --flood-conc "${FLOOD_CONC-64}" --flood-calm "${FLOOD_CALM:-8}" \
	--between "cd '$bench/redis' && '$bin/redis.test' -test.run '^\$' -test.bench '^BenchmarkRedis\$/^callers=(16|64)\$/^lib=sluice\$' -test.benchtime 2s -test.count 1" \
	"$@" | tee "$out/run.txt"

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
"$bin/benchstat" "$out/between.txt" >"$out/library-benchstat.txt"
cat "$out/library-benchstat.txt"
