#!/usr/bin/env bash
# ab.sh: interleaved A/B of BenchmarkFlood's closed-loop flood on the memory
# store and the Redis store with local refusals: ROUNDS rounds (default 12),
# each running the base binary and the new one, in alternating order, niced.
# summary.awk turns raw.txt into ab.txt (per round: decisions/s of both
# stores and their ratio, and the CPU-per-decision ratio, for each binary).
#
# Usage: ab.sh BASE.test NEW.test OUT_DIR
#   (each a test binary of bench/redis: cd bench && go test -c -o X ./redis)
set -eu
base=$1 new=$2 out=$3 rounds=${ROUNDS:-12}
mkdir -p "$out"
: >"$out/raw.txt"
for r in $(seq "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
	for t in $order; do
		if [ "$t" = base ]; then bin=$base; else bin=$new; fi
		echo "# round $r bin $t load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/raw.txt"
		nice -n 10 "$bin" -test.run '^$' -test.bench 'Flood/store=(memory|redis-local)/flood=closed' \
			-test.benchtime 2s -test.count 1 2>&1 | grep '^Benchmark' >>"$out/raw.txt"
	done
done
awk -f "$(dirname "$0")/summary.awk" "$out/raw.txt" | tee "$out/ab.txt"
