#!/bin/bash
# irpkg.sh BIN BENCH: instructions per op of BENCH (a -test.bench pattern) in the
# test binary BIN (go test -c) by cachegrind, as ir.sh: runs of N2 and N1 ops
# (25,000 and 5,000) differenced, one P, GOGC=off, no async preemption.
ir() {
  GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "$1" -test.cpu 1 -test.run '^$' -test.bench "$2" -test.benchtime "${3}x" 2>&1 | sed -n 's/.*I *refs: *//p' | tr -d ,
}
n1=${N1:-5000}; n2=${N2:-25000}
a=$(ir "$1" "$2" "$n1"); b=$(ir "$1" "$2" "$n2")
echo "$1 $2 $(( (b - a) / (n2 - n1) )) Ir/op"
