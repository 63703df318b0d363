// Package e2e holds end-to-end tests of the sluice binary: they build it
// once, run it as separate processes next to real components (a private
// redis-server, Caddy, nginx) and talk to it over the network, as an
// operator's tools would. The gateway tests take their Caddyfile and
// nginx snippets (and, for the documented examples, the Sluice
// configuration) from docs/configuration.md, so the page shows what was
// tested. It has no code of its own.
//
// The tests need redis-server, caddy and nginx on PATH; without them they
// skip and say how to install them, unless SLUICE_REQUIRE_REDIS=1,
// SLUICE_REQUIRE_CADDY=1 or SLUICE_REQUIRE_NGINX=1 (set by .ci/run) make
// that a failure.
package e2e
