#!/bin/bash
# build.sh TREE NAME: builds /tmp/mw-NAME.test from the checkout TREE (a
# worktree at any commit: git worktree add --detach /tmp/x COMMIT) with one
# benchmark file for every commit (bench_test.go.txt: httplimit's at
# b604267, with cpu-ns/op) and BenchmarkAB (zz_ab_test.go.txt: the same
# cases under names that select one each); a tree without internal/cputime
# gets this checkout's. The tree's files are restored afterwards.
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
cp "$here/bench_test.go.txt" "$1/httplimit/bench_test.go"
cp "$here/zz_ab_test.go.txt" "$1/httplimit/zz_ab_test.go"
[ -d "$1/internal/cputime" ] || cp -r "$repo/internal/cputime" "$1/internal/"
(cd "$1" && go test -c -o "/tmp/mw-$2.test" ./httplimit)
rm "$1/httplimit/zz_ab_test.go"
(cd "$1" && git checkout -q httplimit/bench_test.go)
