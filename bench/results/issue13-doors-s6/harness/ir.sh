#!/bin/bash
# ir.sh NAME CASE: instructions per request of BenchmarkAB/CASE (PerIP,
# Three, AllHeaders, Denied) in /tmp/mw-NAME.test, counted by cachegrind,
# independent of the machine's load: the difference between runs of N2 and
# N1 requests (120,000 and 20,000), one P, no GC (GOGC=off: allocations are
# reported apart, by B/op and allocs/op), no async preemption.
ir() {
  GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "/tmp/mw-$1.test" -test.cpu 1 -test.run '^$' -test.bench "BenchmarkAB/^$2\$" -test.benchtime "${3}x" 2>&1 |
    sed -n 's/.*I *refs: *//p' | tr -d ,
}
n1=${N1:-20000}; n2=${N2:-120000}
a=$(ir "$1" "$2" "$n1"); b=$(ir "$1" "$2" "$n2")
echo "$1 $2 $(( (b - a) / (n2 - n1) )) Ir/op"
