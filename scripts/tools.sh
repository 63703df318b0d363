#!/usr/bin/env bash
# Installs the pinned analysis tools Sluice's lint step uses, and builds the
# Go vulnerability database that govulncheck reads, when they are missing.
#
#   scripts/tools.sh            install (if needed) and print the tools dir
#
# Everything goes under SLUICE_TOOLS (default ~/.cache/sluice-tools), keyed
# by version, so a fresh clone on the same machine (as in CI) reuses what an
# earlier run built, and changing a version below installs the new one
# beside the old. Only the Go module proxy is used: `go install` for the
# tools, and `go mod download` for golang.org/x/vulndb, whose data/osv folder
# holds the database's OSV entries; indexdb (from the same repository) turns
# that folder into the file layout `govulncheck -db file://...` reads. The
# public database server is not reachable from this project's machines.
#
# Environment:
#   SLUICE_TOOLS           where tools and databases go
#   SLUICE_VULNDB_VERSION  golang.org/x/vulndb version whose data to use;
#                          default: the newest the module proxy serves, so
#                          that the check knows of recent vulnerabilities
set -euo pipefail

# Pinned tool versions. staticcheck 2026.2.2 is v0.8.2 of honnef.co/go/tools
# and supports Go 1.26.
STATICCHECK_VERSION=v0.8.2
GOVULNCHECK_VERSION=v1.9.0
INDEXDB_VERSION=v0.0.0-20261105234957-e22db6528018

tools=${SLUICE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools}
mkdir -p "$tools"

# install NAME PACKAGE VERSION: go install PACKAGE@VERSION into
# $tools/NAME-VERSION/ unless it is there already.
install() {
  local name=$1 pkg=$2 version=$3 dir="$tools/$1-$3"
  if [ -x "$dir/$name" ]; then return; fi
  echo "tools: installing $pkg@$version" >&2
  mkdir -p "$dir.tmp"
  GOBIN="$dir.tmp" go install "$pkg@$version"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

install staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION"
install govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION"
install indexdb golang.org/x/vulndb/cmd/indexdb "$INDEXDB_VERSION"

# The vulnerability database.
version=${SLUICE_VULNDB_VERSION:-}
if [ -z "$version" ]; then
  if ! version=$(cd "$tools" && go list -m -f '{{.Version}}' golang.org/x/vulndb@latest); then
    echo "tools: cannot ask the module proxy for the newest golang.org/x/vulndb" >&2
    exit 1
  fi
fi
db="$tools/vulndb-$version"
if [ ! -f "$db/index/modules.json" ]; then
  echo "tools: building the vulnerability database from golang.org/x/vulndb@$version" >&2
  src=$(cd "$tools" && go mod download -json "golang.org/x/vulndb@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$src" ] || [ ! -d "$src/data/osv" ]; then
    echo "tools: golang.org/x/vulndb@$version has no data/osv folder; cannot build the database" >&2
    exit 1
  fi
  rm -rf "$db.tmp"
  "$tools/indexdb-$INDEXDB_VERSION/indexdb" -vulns "$src/data/osv" -out "$db.tmp"
  rm -rf "$db"
  mv "$db.tmp" "$db"
fi

# What the lint script reads.
cat >"$tools/env" <<EOF
STATICCHECK=$tools/staticcheck-$STATICCHECK_VERSION/staticcheck
GOVULNCHECK=$tools/govulncheck-$GOVULNCHECK_VERSION/govulncheck
VULNDB=$db
VULNDB_VERSION=$version
EOF
echo "$tools"
