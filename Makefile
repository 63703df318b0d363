# Sluice's make targets. `make test` runs every test (the README's test command).
GO ?= go

.PHONY: test test-short bench fuzz release

# Every test, with the race detector. Redis tests start private redis-server
# processes; they skip when redis-server is missing unless SLUICE_REQUIRE_REDIS=1.
# test/faults (Redis killed, slowed and failed over under load, with
# bounds on how long a call may take) runs last and alone, without the race
# detector, so that its timing checks measure Sluice rather than a CPU
# shared with every other package's tests.
#
# The allocation tests then run once more without the race detector, whose
# instrumentation allocates: under -race they skip (internal/service/rls) or
# measure the detector, so this is where they check Sluice.
test:
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/test/faults$$')
	$(GO) test -count=1 -p 1 -timeout 10m ./test/faults
	$(GO) test -count=1 -run 'Allocs$$' ./internal/service/rls ./internal/service/server ./memstore

test-short:
	$(GO) test -count=1 ./...

# The release binary, dist/sluice: static, -trimpath, stamped with the
# commit (sluice version); two builds of one commit are the same bytes.
release:
	bash scripts/release.sh dist/sluice

# In-repo benchmarks (see docs/BENCHMARKS.md for the peer comparison in bench/).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The chart of the boundary example that the README shows, in docs/images/
# (the same flags give the same bytes, so a rerun changes nothing).
.PHONY: chart
chart:
	mkdir -p docs/images
	$(GO) run ./cmd/sluice simulate --algorithm all --limit 100 --period 1m \
		--trace examples/traces/boundary.csv --chart docs/images/boundary.png
	$(GO) run ./cmd/sluice simulate --algorithm all --limit 100 --period 1m \
		--trace examples/traces/boundary.csv --chart docs/images/boundary.svg >/dev/null

# Screenshots of the status page that docs/operations.md shows, in
# docs/images/status.png and status-dark.png: five minutes of made-up
# traffic played through a real handler, drawn by headless Chromium.
.PHONY: screenshot
screenshot:
	SLUICE_SCREENSHOT=$(CURDIR)/docs/images/status.png SLUICE_REQUIRE_BROWSER=1 \
		$(GO) test -count=1 -run 'TestStatusPageBrowser$$' -v ./internal/service/server

# Static analysis: staticcheck and govulncheck, pinned and installed by
# scripts/tools.sh, on this module and on bench/.
.PHONY: lint
lint:
	bash scripts/lint.sh

# Every fuzz target of the repository for FUZZTIME each (CI runs them for a
# few seconds each). A failing input lands in the package's testdata/fuzz/.
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# The long flood runs recorded in docs/reliability.md: 10 million distinct
# keys through a memory store capped at 1 million (and, to compare, one with
# no cap), then one hot key against 100,000 keys from every core.
.PHONY: flood
flood:
	SLUICE_FLOOD_KEYS=10000000 $(GO) test -count=1 -v -timeout 60m -run 'TestKeyFlood$$' ./test/flood
	$(GO) test -count=1 -v -run 'TestHotKeyContention' ./test/flood
	$(GO) test -count=1 -run '^$$' -bench HotKey -benchtime 2s -count 3 -cpu 2 ./test/flood

# The long fault runs recorded in docs/reliability.md: 200 callers for 10 s
# while Redis is killed at 3 s and restarted at 6 s (library and service,
# each failure policy), slow and cut Redis replies, a cluster failover,
# restarts of sluice serve and 1,000 slow clients. CI runs a short variant
# of the same tests (go test ./test/faults).
.PHONY: faults
faults:
	SLUICE_FAULTS_LONG=1 $(GO) test -count=1 -v -timeout 30m ./test/faults
