# Sluice's make targets. `make test` runs every test (the README's test command).
GO ?= go

.PHONY: test test-short bench fuzz

# Every test, with the race detector. Redis tests start private redis-server
# processes; they skip when redis-server is missing unless SLUICE_REQUIRE_REDIS=1.
test:
	$(GO) test -race -count=1 -timeout 15m ./...

test-short:
	$(GO) test -count=1 ./...

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
