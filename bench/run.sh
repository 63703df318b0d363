#!/usr/bin/env bash
# run.sh reproduces the numbers in docs/BENCHMARKS.md.
#
# It builds two test binaries (this module's side-by-side benchmarks and the
# memstore package's own), then runs ROUNDS rounds; each round runs every
# benchmark once (-test.count 1), the peers' and memstore's one after the
# other. Interleaving rounds, rather than -count N on one benchmark at a
# time, spreads the noise of a shared machine over every library alike, and
# lets benchtable compute each ratio within a round.
#
# Usage: bench/run.sh [OUT_DIR]     (default: bench/out/memstore, ignored by git)
# Environment: ROUNDS (default 5), BENCHTIME (default 1s; at most 2s, or
# the one-key runs exhaust the burst and fail).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$here/out/memstore}
rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-1s}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	if commit=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
		git -C "$root" diff --quiet HEAD -- . || commit="$commit (with uncommitted changes)"
	else
		commit="${SLUICE_COMMIT:-unknown (not a git checkout)}"
	fi
	echo "commit: $commit"
	echo "go: $(go version)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "cpu family/model: $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2- | tr -d ' ')/$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2- | tr -d ' ')"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "rounds: $rounds, benchtime: $benchtime"
} >"$out/machine.txt"
cat "$out/machine.txt"

# benchstat is pinned in go.mod's tool block; building it here installs it.
(cd "$here" && go build -o "$bin/benchstat" golang.org/x/perf/cmd/benchstat)
(cd "$here" && go test -c -o "$bin/bench.test" .)
(cd "$root" && go test -c -o "$bin/memstore.test" ./memstore)

rm -f "$out"/round-*.txt "$out"/memstore-*.txt
for i in $(seq 1 "$rounds"); do
	echo "round $i/$rounds (load $(cut -d' ' -f1 /proc/loadavg))" >&2
	(cd "$here" && "$bin/bench.test" -test.run '^$' -test.bench '^Benchmark(OneKeySerial|OneKeyParallel|KeysParallel|KeysPrepared|BytesPerKey|Clock|SluiceLayers)$' -test.benchtime "$benchtime" -test.count 1 -test.benchmem) >"$out/round-$i.txt"
	(cd "$root/memstore" && "$bin/memstore.test" -test.run '^$' -test.bench . -test.benchtime "$benchtime" -test.count 1 -test.benchmem) >"$out/memstore-$i.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

cat "$out"/round-*.txt >"$out/peers.txt"
cat "$out"/memstore-*.txt >"$out/memstore.txt"
"$bin/benchstat" -col "/lib@(sluice xrate xrate-shards golimiter throttled)" "$out/peers.txt" >"$out/peers-benchstat.txt"
"$bin/benchstat" "$out/memstore.txt" >"$out/memstore-benchstat.txt"
(cd "$here" && go run ./cmd/benchtable "$out"/round-*.txt) >"$out/table.md"

cat "$out/peers-benchstat.txt" "$out/memstore-benchstat.txt" "$out/table.md"
