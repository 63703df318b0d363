#!/usr/bin/env bash
# Runs every fuzz target of the repository (each Fuzz* function that
# `go test -list` reports, in every module) for FUZZTIME each.
#
#   scripts/fuzz.sh                 30s per target (make fuzz)
#   FUZZTIME=4s scripts/fuzz.sh     the short run CI does
#   scripts/fuzz.sh ./httplimit     only the targets of these packages
#
# A failing input is written by `go test` to the package's
# testdata/fuzz/<Target>/ folder; commit it with the fix, so that plain
# `go test` replays it from then on. Every target should also have a
# committed seed corpus in that folder; the script lists those that have
# none, and fails for them when SLUICE_FUZZ_REQUIRE_CORPUS=1.
#
# Environment:
#   FUZZTIME                    per target, Go duration or Nx (default 30s)
#   SLUICE_FUZZ_REQUIRE_CORPUS  1: a target without a committed corpus fails
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-30s}

# The packages to look in: the arguments, or every package of every module
# that has a test file declaring a fuzz function (the grep only narrows the
# list; `go test -list` decides what is a target).
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  while IFS= read -r dir; do
    pkgs+=("./$dir")
  done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
failed=() nocorpus=() ran=0
for pkg in "${pkgs[@]}"; do
  # The module that holds pkg: go test must run inside it.
  mod=. rel=$pkg
  if [[ $pkg == ./bench/* || $pkg == ./bench ]]; then mod=bench rel=./${pkg#./bench/}; fi
  if ! targets=$(cd "$mod" && go test -list '^Fuzz' "$rel" | grep '^Fuzz'); then
    continue
  fi
  for name in $targets; do
    dir="${pkg#./}/testdata/fuzz/$name"
    if [ -z "$(git ls-files "$dir" | head -1)" ]; then
      nocorpus+=("$pkg $name")
    fi
    echo "== $pkg $name ($fuzztime)"
    t0=$SECONDS
    before=$(ls "$dir" 2>/dev/null || true)
    if (cd "$mod" && go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$rel") >"$log" 2>&1; then
      tail -n 3 "$log"
      if grep '^fuzz: elapsed' "$log" | tail -n 1 | grep -q 'gathering baseline coverage'; then
        # The seed corpus and the inputs cached by earlier runs are all
        # replayed first; on a busy machine that can take the whole time.
        echo "   ok ($((SECONDS - t0))s), but the time ran out while replaying the corpus: no new input was tried"
      else
        echo "   ok ($((SECONDS - t0))s)"
      fi
    elif [ "$(ls "$dir" 2>/dev/null || true)" = "$before" ] &&
      grep -A1 "^--- FAIL: $name " "$log" | tail -n 1 | grep -qx '    context deadline exceeded'; then
      # Go's fuzzing coordinator can report its own -fuzztime deadline as
      # a failure when a worker is still busy as it expires
      # (golang/go#75804, fixed in Go 1.27): no input failed and none was
      # written. The target did fuzz for the whole time.
      tail -n 6 "$log"
      echo "   ok ($((SECONDS - t0))s): the run ended with Go's own deadline race (golang/go#75804), no failing input"
    else
      cat "$log"
      echo "   FAILED ($((SECONDS - t0))s): a failing input, if any, is in $dir"
      failed+=("$pkg $name")
    fi
    ran=$((ran + 1))
  done
done

echo
echo "fuzz: $ran targets, ${fuzztime} each, $((SECONDS - start))s in all"
if [ "$ran" -eq 0 ]; then
  echo "fuzz: no fuzz target found"; exit 1
fi
status=0
if [ ${#nocorpus[@]} -gt 0 ]; then
  printf 'fuzz: no committed seed corpus (testdata/fuzz/<Target>/): %s\n' "${nocorpus[@]}"
  if [ "${SLUICE_FUZZ_REQUIRE_CORPUS:-0}" = 1 ]; then status=1; fi
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}"
  status=1
fi
exit $status
