#!/usr/bin/env bash
# Builds sluice as released: a static binary (no cgo), without the paths
# of the machine that built it (-trimpath), stamped with the commit it was
# built from (-buildvcs=true: module version, revision, commit time), and
# no other time. Two builds of one commit with one Go release are the same
# bytes (test/deploy checks it). The Dockerfile runs this script.
#
# Usage: scripts/release.sh [OUT]   (default dist/sluice; GOOS and GOARCH
# from the environment pick another platform)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist/sluice}
vcs=true
if ! git rev-parse --git-dir >/dev/null 2>&1 || [ -f .git ]; then
  # No repository (a source archive), or a git worktree, whose .git file
  # the go command does not read: the binary then says "(devel)" and no
  # revision rather than failing.
  echo "release.sh: no git repository here (or a git worktree): building without VCS information" >&2
  vcs=false
fi
CGO_ENABLED=0 go build -trimpath -buildvcs=$vcs -o "$out" ./cmd/sluice
