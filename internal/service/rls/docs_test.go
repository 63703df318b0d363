package rls

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// yamlBlocks returns the ```yaml blocks of a Markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(data), "```yaml\n")[1:] {
		end := strings.Index(part, "```")
		if end < 0 {
			t.Fatalf("%s: unterminated code block", path)
		}
		blocks = append(blocks, part[:end])
	}
	return blocks
}

// yamlJSON returns the YAML text y as JSON, for protojson.
func yamlJSON(t *testing.T, y string) []byte {
	t.Helper()
	var tree any
	if err := yaml.Unmarshal([]byte(y), &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// validateAll runs the generated validation of m and of every message
// packed in an Any inside it.
func validateAll(t *testing.T, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	var walk func(protoreflect.Message)
	walk = func(msg protoreflect.Message) {
		if a, ok := msg.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				t.Errorf("%s: %v", a.GetTypeUrl(), err)
				return
			}
			validateAll(t, inner)
			return
		}
		msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
}

// loadLists loads each item of each of blocks, YAML lists of Envoy
// configuration, into a message of newMsg's and validates it; kind names
// the items ("route") and typ the message ("a Route") in messages.
func loadLists(t *testing.T, blocks []string, kind, typ string, newMsg func() proto.Message) {
	t.Helper()
	for i, block := range blocks {
		var items []any
		if err := yaml.Unmarshal([]byte(block), &items); err != nil {
			t.Fatal(err)
		}
		for j, item := range items {
			js, err := json.Marshal(item)
			if err != nil {
				t.Fatal(err)
			}
			m := newMsg()
			if err := protojson.Unmarshal(js, m); err != nil {
				t.Fatalf("%s %d of Envoy %s block %d does not load as %s: %v", kind, j+1, kind, i+1, typ, err)
			}
			validateAll(t, m)
		}
	}
}

// TestEnvoyBootstrapInDocs loads each Envoy block of docs/envoy.md (the
// bootstrap, and the cluster over mutual TLS) into
// go-control-plane's Bootstrap, each list of HTTP filters (the rate
// limit filter with a token) into its HttpFilter and each list of routes
// (the usage report's) into its Route, and validates them, so the
// documented field names and types are Envoy's; and checks that the
// documented Sluice configurations decode.
func TestEnvoyBootstrapInDocs(t *testing.T) {
	var envoyYAMLs, filterYAMLs, routeYAMLs, sluiceYAMLs []string
	for _, b := range yamlBlocks(t, "../../../docs/envoy.md") {
		switch {
		case strings.HasPrefix(b, "static_resources:"):
			envoyYAMLs = append(envoyYAMLs, b)
		case strings.HasPrefix(b, "- name: envoy.filters.http."):
			filterYAMLs = append(filterYAMLs, b)
		case strings.HasPrefix(b, "- match:"):
			routeYAMLs = append(routeYAMLs, b)
		case strings.HasPrefix(b, "listen:"):
			sluiceYAMLs = append(sluiceYAMLs, b)
		}
	}
	if len(envoyYAMLs) < 2 || len(filterYAMLs) < 1 || len(routeYAMLs) < 1 || len(sluiceYAMLs) < 3 {
		t.Fatal("docs/envoy.md has no envoy.yaml, no TLS cluster, no filter with a token, no usage route or not the sluice.yaml blocks")
	}
	loadLists(t, routeYAMLs, "route", "a Route", func() proto.Message { return new(routev3.Route) })
	for i, envoyYAML := range envoyYAMLs {
		var boot bootstrapv3.Bootstrap
		if err := protojson.Unmarshal(yamlJSON(t, envoyYAML), &boot); err != nil {
			t.Fatalf("Envoy block %d does not load as a Bootstrap: %v", i+1, err)
		}
		validateAll(t, &boot)
	}
	loadLists(t, filterYAMLs, "filter", "an HttpFilter", func() proto.Message { return new(hcmv3.HttpFilter) })

	for i, sluiceYAML := range sluiceYAMLs {
		if _, ps := DecodeSection(envoyNode(t, []byte(sluiceYAML)), "envoy"); len(ps) > 0 {
			t.Errorf("the documented envoy section %d has problems:\n%s", i+1, problemLines(ps))
		}
	}
}
