#!/usr/bin/env bash
# flood.sh reproduces the "Refused floods" numbers in docs/BENCHMARKS.md:
# BenchmarkFlood (flood_test.go) on one private redis-server, COUNT rounds,
# summarised by benchstat (medians). run.sh runs the rounds.
#
# Usage: bench/redis/flood.sh [OUT_DIR]    (default: bench/redis/results/flood)
# Environment: COUNT (default 3), BENCHTIME (default 2s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BENCH='^BenchmarkFlood$' COUNT=${COUNT:-3} exec "$here/run.sh" "${1:-$here/results/flood}"
