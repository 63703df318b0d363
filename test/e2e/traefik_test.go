package e2e

import (
	"bytes"
	"net/url"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// traefikDynamic is the part of Traefik v3's dynamic configuration (file
// provider) that the Traefik snippet of docs/configuration.md uses, with
// every option of the ForwardAuth middleware as Traefik v3.7 names it
// (pkg/config/dynamic.ForwardAuth; doc.traefik.io, "ForwardAuth"), so that
// a misspelt or invented option fails to decode.
//
// Traefik itself cannot be built here (see TestTraefikSnippetSchema), so
// this test checks the snippet against the documented schema instead of
// running it.
type traefikDynamic struct {
	HTTP struct {
		Middlewares map[string]struct {
			ForwardAuth *traefikForwardAuth `yaml:"forwardAuth"`
		} `yaml:"middlewares"`
	} `yaml:"http"`
}

// traefikForwardAuth lists the options of Traefik v3.7's ForwardAuth
// middleware.
type traefikForwardAuth struct {
	Address                  string    `yaml:"address"`
	TLS                      yaml.Node `yaml:"tls"`
	TrustForwardHeader       *bool     `yaml:"trustForwardHeader"`
	AuthResponseHeaders      []string  `yaml:"authResponseHeaders"`
	AuthResponseHeadersRegex string    `yaml:"authResponseHeadersRegex"`
	AuthRequestHeaders       []string  `yaml:"authRequestHeaders"`
	MaxResponseBodySize      *int64    `yaml:"maxResponseBodySize"`
	AddAuthCookiesToResponse []string  `yaml:"addAuthCookiesToResponse"`
	HeaderField              string    `yaml:"headerField"`
	ForwardBody              bool      `yaml:"forwardBody"`
	MaxBodySize              *int64    `yaml:"maxBodySize"`
	PreserveLocationHeader   bool      `yaml:"preserveLocationHeader"`
	PreserveRequestMethod    bool      `yaml:"preserveRequestMethod"`
	AuthSigninURL            string    `yaml:"authSigninURL"`
}

// TestTraefikSnippetSchema checks the Traefik snippet of
// docs/configuration.md against Traefik v3.7's documented ForwardAuth
// options: it decodes with no unknown key, asks Sluice's forward-auth for
// the documented rule, copies both RateLimit fields, and does not trust
// the client's X-Forwarded-For.
//
// It is not run in a real Traefik: `go install
// github.com/traefik/traefik/v3/cmd/traefik@v3.7.13` refuses to build a
// module whose go.mod has replace directives, and building it inside its
// own module fails because the module proxy this project uses refuses 15
// of Traefik's dependencies (among them github.com/containous/go-http-auth,
// the fork its auth middlewares, ForwardAuth included, are built on).
func TestTraefikSnippetSchema(t *testing.T) {
	t.Parallel()
	docs := loadGatewayDocs(t)
	var dyn traefikDynamic
	dec := yaml.NewDecoder(bytes.NewReader([]byte(docs.traefik)))
	dec.KnownFields(true)
	if err := dec.Decode(&dyn); err != nil {
		t.Fatalf("the Traefik snippet does not decode as Traefik's dynamic configuration: %v\n%s", err, docs.traefik)
	}
	if len(dyn.HTTP.Middlewares) != 1 {
		t.Fatalf("the Traefik snippet has %d middlewares, want 1", len(dyn.HTTP.Middlewares))
	}
	for name, m := range dyn.HTTP.Middlewares {
		fa := m.ForwardAuth
		if fa == nil {
			t.Fatalf("middleware %q has no forwardAuth", name)
		}
		u, err := url.Parse(fa.Address)
		if err != nil || u.Scheme != "http" || u.Host != docSluiceAddr || u.Path != "/v1/forward-auth" || u.Query().Get("rule") != "api" {
			t.Errorf("forwardAuth.address = %q, want http://%s/v1/forward-auth?rule=api", fa.Address, docSluiceAddr)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy"} {
			if !slices.Contains(fa.AuthResponseHeaders, h) {
				t.Errorf("forwardAuth.authResponseHeaders = %q, want it to hold %s", fa.AuthResponseHeaders, h)
			}
		}
		if fa.TrustForwardHeader == nil || *fa.TrustForwardHeader {
			t.Errorf("forwardAuth.trustForwardHeader must be set to false: Traefik then sends the client's address in X-Forwarded-For, replacing the client's own")
		}
	}
}
