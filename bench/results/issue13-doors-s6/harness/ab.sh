#!/bin/bash
# ab.sh OUTDIR ROUNDS NAME...: interleaved rounds of /tmp/mw-NAME.test
# (build.sh), the order reversed every other round; one file per NAME in
# OUTDIR for benchstat. BENCH and BT override the benchmarks and the time.
out=$1; rounds=$2; shift 2
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  bins=("$@")
  if (( r % 2 == 0 )); then bins=($(printf '%s\n' "$@" | tac)); fi
  for b in "${bins[@]}"; do
    "/tmp/mw-$b.test" -test.run '^$' -test.bench "${BENCH:-BenchmarkMiddleware|BenchmarkDenied}" \
      -test.benchtime "${BT:-1s}" -test.count 1 | grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >> "$out/$b.txt"
  done
done
