#!/usr/bin/env bash
# Static analysis: staticcheck and govulncheck on the main module and on the
# bench/ module, with the pinned tools that scripts/tools.sh installs.
# Runs every check, then exits non-zero if any of them failed.
#
# govulncheck reads a local copy of the Go vulnerability database built from
# the golang.org/x/vulndb module (see scripts/tools.sh), not the public
# server. It reports the standard library of the Go toolchain that runs it,
# so its verdict holds for that toolchain version, which it prints.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=$(bash scripts/tools.sh)
# shellcheck source=/dev/null
. "$tools/env"

modules=(.)
if [ -f bench/go.mod ]; then modules+=(bench); fi

failed=()
run() {
  local what=$1; shift
  local t0=$SECONDS
  echo "-- $what"
  if "$@"; then
    echo "   ok ($((SECONDS - t0))s)"
  else
    echo "   FAILED ($((SECONDS - t0))s)"
    failed+=("$what")
  fi
}

echo "lint: $("$STATICCHECK" -version), $("$GOVULNCHECK" -version 2>/dev/null | sed -n 's/^Scanner: //p' | head -1), $(go version)"
echo "lint: vulnerability database golang.org/x/vulndb@$VULNDB_VERSION"
for m in "${modules[@]}"; do
  run "staticcheck ($m)" bash -c "cd '$m' && '$STATICCHECK' ./..."
done
# Vulnerabilities are checked in the code Sluice ships: the main module. The
# bench/ module only measures Sluice against its peers and is never built
# by users; its findings are the peers' own dependencies (gubernator's
# OpenTelemetry, for one); run govulncheck in bench/ by hand to see them.
# bench/service/ratelimitd is a module of its own, holding no code of
# Sluice's: it only pins envoyproxy/ratelimit and its dependencies, at their
# own versions, for the service benchmark. `./...` in bench/ stops at its
# go.mod, so neither this script nor CI's go vet builds or scans it.
run "govulncheck (.)" "$GOVULNCHECK" -db "file://$VULNDB" ./...

if [ ${#failed[@]} -gt 0 ]; then
  printf 'lint: failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "lint: all checks passed"
