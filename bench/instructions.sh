#!/usr/bin/env bash
# instructions.sh counts the instructions per operation of one benchmark,
# a measure that, unlike time, does not depend on the machine's load. It
# runs BENCH (a -test.bench pattern that selects one benchmark) in the test
# binary BIN (go test -c) under valgrind's cachegrind twice, for N1 and N2
# operations, and prints the difference divided by N2-N1, so that what the
# binary does once (start-up, the benchmark's set-up) cancels out. The runs
# use one P, no garbage collector (GOGC=off: allocations are reported by
# -benchmem instead) and no asynchronous preemption. Cache misses and time
# spent waiting are not counted.
#
# Usage: bench/instructions.sh BIN BENCH
# Environment: N1 (default 5000), N2 (default 25000).
# Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN BENCH" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
# ir prints the instructions cachegrind counted in BIN running BENCH N times.
ir() {
	local log
	log=$(mktemp)
	if ! GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
		"$1" -test.cpu 1 -test.run '^$' -test.bench "$2" -test.benchtime "${3}x" >"$log" 2>&1; then
		# On some machines valgrind does not emulate an instruction the
		# Go runtime executes (RDTSCP, in runtime.cputicks, when the
		# CPU reports it), and the binary dies of SIGILL.
		echo "instructions.sh: $1 failed under valgrind:" >&2
		grep -m 5 -E 'Unrecognised instruction|SIGILL|FAIL|panic' "$log" >&2 || tail -n 5 "$log" >&2
		rm -f "$log"
		return 1
	fi
	sed -n 's/.*I *refs: *//p' "$log" | tr -d ,
	rm -f "$log"
}
n1=${N1:-5000}
n2=${N2:-25000}
a=$(ir "$1" "$2" "$n1")
b=$(ir "$1" "$2" "$n2")
[ -n "$a" ] && [ -n "$b" ] || { echo "instructions.sh: cachegrind reported no count for $2 in $1" >&2; exit 1; }
echo "$1 $2 $(((b - a) / (n2 - n1))) instructions/op"
