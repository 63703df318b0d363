#!/usr/bin/env bash
# compare.sh measures the hot path's rows at two or more commits, the table
# of docs/BENCHMARKS.md, "Why the hot path is shaped as it is".
#
# For each commit it builds the test binaries of memstore, httplimit, the
# service's /v1/check and Envoy handlers and this module's peers, once per
# code layout: the linker's -randlayout seeds 1..LAYOUTS order the
# functions differently, and on some machines the layout alone moves a
# row by more than a change does. Then it runs ROUNDS rounds; each runs
# every layout of every commit in turn, so that the noise of a shared
# machine falls on every commit alike. benchstat then compares the
# commits, each sample pooling the layouts.
#
# Usage: bench/compare.sh OUT_DIR COMMIT COMMIT...
# Environment: ROUNDS (default 6), LAYOUTS (default 3), BENCHTIME (default
# 300ms).
set -euo pipefail

if [ $# -lt 3 ]; then
	echo "usage: bench/compare.sh OUT_DIR COMMIT COMMIT..." >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=$1
shift
rounds=${ROUNDS:-6}
layouts=${LAYOUTS:-3}
benchtime=${BENCHTIME:-300ms}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
cleanup() {
	for c in "${names[@]:-}"; do
		[ -n "$c" ] && git -C "$root" worktree remove --force "$work/src-$c" 2>/dev/null || true
	done
	rm -rf "$work"
}
names=()
trap cleanup EXIT

(cd "$here" && go build -o "$work/benchstat" golang.org/x/perf/cmd/benchstat)
for c in "$@"; do
	name=$(git -C "$root" rev-parse --short "$c^{commit}")
	names+=("$name")
	src=$work/src-$name
	git -C "$root" worktree add --detach "$src" "$name" >/dev/null
	for l in $(seq 1 "$layouts"); do
		flags=-ldflags=-randlayout=$l
		b=$work/$name-$l
		(cd "$src" && go test -c "$flags" -o "$b.ms" ./memstore &&
			go test -c "$flags" -o "$b.hl" ./httplimit &&
			go test -c "$flags" -o "$b.srv" ./internal/service/server &&
			go test -c "$flags" -o "$b.rls" ./internal/service/rls &&
			cd bench && go test -c "$flags" -o "$b.peers" .)
	done
	: >"$out/$name.txt"
done

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commits: ${names[*]}"
	echo "go: $(go version)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "rounds: $rounds, layouts: $layouts, benchtime: $benchtime"
} >"$out/machine.txt"
cat "$out/machine.txt"

run() { "$@" -test.run '^$' -test.benchtime "$benchtime" -test.benchmem; }
for i in $(seq 1 "$rounds"); do
	echo "round $i/$rounds (load $(cut -d' ' -f1 /proc/loadavg))" >&2
	for l in $(seq 1 "$layouts"); do
		for name in "${names[@]}"; do
			b=$work/$name-$l
			src=$work/src-$name
			{
				(cd "$src/memstore" && run "$b.ms" -test.bench 'OneKey/.*/serial|Algorithm|AllowAll/3-policies')
				(cd "$src/bench" && run "$b.peers" -test.bench 'OneKeySerial/lib=(sluice|xrate)$|KeysParallel/keys=100000/lib=sluice$')
				(cd "$src/httplimit" && run "$b.hl" -test.bench 'Middleware/PerIP')
				(cd "$src/internal/service/server" && run "$b.srv" -test.bench 'Check/single$')
				(cd "$src/internal/service/rls" && run "$b.rls" -test.bench 'ShouldRateLimit$')
			} >>"$out/$name.txt"
		done
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

(cd "$out" && "$work/benchstat" "${names[@]/%/.txt}") >"$out/compare.txt"
cat "$out/compare.txt"
