package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// gatewayDocs holds what docs/configuration.md shows for gateways in its
// /v1/forward-auth section: the Sluice configuration the examples ask, and
// each gateway's snippet. The gateway tests run these texts, so the page
// cannot drift from what was tested.
type gatewayDocs struct {
	config  string // the ```yaml block with no marker: a Sluice configuration
	caddy   string // the ```caddyfile block
	nginx   string // the ```nginx block
	traefik string // the ```yaml block marked <!-- other: Traefik... -->
}

// configurationDoc is the page the gateway snippets come from.
const configurationDoc = "../../docs/configuration.md"

// loadGatewayDocs reads the forward-auth section of
// docs/configuration.md and returns its blocks; it fails the test unless
// the section has exactly one block of each kind.
func loadGatewayDocs(t *testing.T) gatewayDocs {
	t.Helper()
	b, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### `/v1/forward-auth`\n"
	_, sec, ok := strings.Cut(string(b), heading)
	if !ok {
		t.Fatalf("%s has no heading %q", configurationDoc, strings.TrimSpace(heading))
	}
	if end := strings.Index(sec, "\n### "); end >= 0 {
		sec = sec[:end]
	}
	var d gatewayDocs
	set := func(dst *string, what string, text string) {
		if *dst != "" {
			t.Fatalf("%s: the forward-auth section has two %s blocks; the gateway tests run exactly one", configurationDoc, what)
		}
		*dst = text
	}
	for _, f := range testkit.Blocks(sec) {
		switch {
		case f.Lang == "yaml" && f.Marker == "":
			set(&d.config, "Sluice configuration", f.Text)
		case f.Lang == "yaml" && strings.HasPrefix(f.Marker, "<!-- other: Traefik"):
			set(&d.traefik, "Traefik", f.Text)
		case f.Lang == "caddyfile":
			set(&d.caddy, "caddyfile", f.Text)
		case f.Lang == "nginx":
			set(&d.nginx, "nginx", f.Text)
		}
	}
	for what, s := range map[string]string{"Sluice configuration": d.config, "caddyfile": d.caddy, "nginx": d.nginx, "Traefik": d.traefik} {
		if s == "" {
			t.Fatalf("%s: the forward-auth section has no %s block", configurationDoc, what)
		}
	}
	return d
}

// replace returns s with every old replaced by new, failing the test
// when s has no old: a documented address or line the test relies on has
// changed, and the test must change with it.
func replace(t *testing.T, what, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("the documented %s no longer contains %q:\n%s", what, old, s)
	}
	return strings.ReplaceAll(s, old, new)
}

// Addresses in the documented gateway examples, which the tests replace
// with free loopback ports.
const (
	docSluiceAddr   = "127.0.0.1:8080"
	docUpstreamAddr = "127.0.0.1:9000"
)

// docConfig returns the documented Sluice configuration of the gateway
// examples, listening on a free port.
func docConfig(t *testing.T, d gatewayDocs) string {
	t.Helper()
	return replace(t, "Sluice configuration", d.config, "http: "+docSluiceAddr, `http: "127.0.0.1:0"`)
}
