package rls

import (
	"context"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/memstore"
)

// This file derives, without an Envoy binary, the descriptors that the
// Envoy configuration of docs/envoy.md makes Envoy send, by the rules
// Envoy documents (route_components.proto, the rate limit filter's
// RateLimitPerRoute, and its filter's source):
//
//   - a request takes the first route whose match is a prefix of its path;
//   - the route's rate_limits come first; the virtual host's follow when
//     the route action has include_vh_rate_limits, else as the route's
//     RateLimitPerRoute (typed_per_filter_config under the filter's name)
//     says: INCLUDE always, IGNORE never, OVERRIDE (the default) only when
//     the route has no rate_limits of its own;
//   - a rate_limits entry of another stage than the filter's is skipped;
//   - each entry is one descriptor, each of its actions one entry:
//     remote_address ("remote_address", the client's address),
//     request_headers (descriptor_key, the header's value; a missing header
//     drops the descriptor, or only the entry with skip_if_absent),
//     generic_key (descriptor_key or "generic_key", descriptor_value).
//
// Anything else of Envoy's (other matches, actions, the filter's own
// rate_limits, per-route rate_limits) fails the test rather than being
// guessed.

// envoyRequest is a request as the rate limit filter sees it.
type envoyRequest struct {
	path, client string
	headers      map[string]string // lower-case names
}

// envoySetup is what the derivation needs of one HTTP connection manager.
type envoySetup struct {
	filter, domain string
	stage          uint32
	hosts          []*routev3.VirtualHost
}

// loadEnvoySetup returns the HTTP connection manager of the first
// listener of the bootstrap y, with its rate limit filter.
func loadEnvoySetup(t *testing.T, y string) envoySetup {
	t.Helper()
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(yamlJSON(t, y), &boot); err != nil {
		t.Fatal(err)
	}
	for _, l := range boot.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				var s envoySetup
				for _, hf := range hcm.GetHttpFilters() {
					var rl ratelimitv3.RateLimit
					if hf.GetTypedConfig().UnmarshalTo(&rl) != nil {
						continue
					}
					if len(rl.GetRateLimits()) > 0 {
						t.Fatalf("the rate limit filter %s has rate_limits of its own, which this test does not derive", hf.GetName())
					}
					s.filter, s.domain, s.stage = hf.GetName(), rl.GetDomain(), rl.GetStage()
				}
				if s.filter == "" {
					t.Fatal("the HTTP connection manager has no rate limit filter")
				}
				s.hosts = hcm.GetRouteConfig().GetVirtualHosts()
				return s
			}
		}
	}
	t.Fatal("the bootstrap has no HTTP connection manager")
	return envoySetup{}
}

// descriptors returns the domain and the descriptors the rate limit filter
// sends for r, each as its entries "(key, value)" joined by ", ".
func (s envoySetup) descriptors(t *testing.T, r envoyRequest) (domain string, out []string) {
	t.Helper()
	if len(s.hosts) != 1 || len(s.hosts[0].GetDomains()) != 1 || s.hosts[0].GetDomains()[0] != "*" {
		t.Fatal("this test derives one virtual host for every domain (\"*\") only")
	}
	vh := s.hosts[0]
	var route *routev3.Route
	for _, rt := range vh.GetRoutes() {
		prefix, ok := rt.GetMatch().GetPathSpecifier().(*routev3.RouteMatch_Prefix)
		if !ok || len(rt.GetMatch().GetHeaders()) > 0 || len(rt.GetMatch().GetQueryParameters()) > 0 {
			t.Fatalf("route %v: this test derives prefix matches only", rt.GetMatch())
		}
		if strings.HasPrefix(r.path, prefix.Prefix) {
			route = rt
			break
		}
	}
	if route == nil {
		return "", nil // no route: the filter sends nothing
	}
	action := route.GetRoute()
	vhOption := ratelimitv3.RateLimitPerRoute_OVERRIDE
	domain = s.domain
	if any, ok := route.GetTypedPerFilterConfig()[s.filter]; ok {
		var per ratelimitv3.RateLimitPerRoute
		if err := any.UnmarshalTo(&per); err != nil {
			t.Fatalf("route %s: typed_per_filter_config[%s]: %v", route.GetMatch(), s.filter, err)
		}
		if len(per.GetRateLimits()) > 0 {
			t.Fatalf("route %s: per-route rate_limits, which this test does not derive", route.GetMatch())
		}
		vhOption = per.GetVhRateLimits()
		if per.GetDomain() != "" {
			domain = per.GetDomain()
		}
	}
	// Envoy still reads the deprecated field, before the per-route option.
	//lint:ignore SA1019 the derivation follows what Envoy reads
	if action.GetIncludeVhRateLimits().GetValue() {
		vhOption = ratelimitv3.RateLimitPerRoute_INCLUDE
	}
	policies := action.GetRateLimits()
	switch {
	case vhOption == ratelimitv3.RateLimitPerRoute_INCLUDE,
		vhOption == ratelimitv3.RateLimitPerRoute_OVERRIDE && len(policies) == 0:
		policies = append(policies[:len(policies):len(policies)], vh.GetRateLimits()...)
	}
	for _, p := range policies {
		if p.GetStage().GetValue() != s.stage {
			continue
		}
		if p.GetLimit() != nil || p.GetHitsAddend() != nil || p.GetDisableKey() != "" {
			t.Fatalf("rate limit %v: limit, hits_addend or disable_key, which this test does not derive", p)
		}
		if d, ok := descriptorOf(t, p, r); ok {
			out = append(out, d)
		}
	}
	return domain, out
}

// descriptorOf returns the descriptor of the rate limit p for r, or false
// when an action drops it.
func descriptorOf(t *testing.T, p *routev3.RateLimit, r envoyRequest) (string, bool) {
	t.Helper()
	var entries []string
	for _, a := range p.GetActions() {
		switch a := a.GetActionSpecifier().(type) {
		case *routev3.RateLimit_Action_RemoteAddress_:
			entries = append(entries, "(remote_address, "+r.client+")")
		case *routev3.RateLimit_Action_RequestHeaders_:
			v, ok := r.headers[strings.ToLower(a.RequestHeaders.GetHeaderName())]
			switch {
			case ok:
				entries = append(entries, "("+a.RequestHeaders.GetDescriptorKey()+", "+v+")")
			case !a.RequestHeaders.GetSkipIfAbsent():
				return "", false
			}
		case *routev3.RateLimit_Action_GenericKey_:
			key := a.GenericKey.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			if strings.Contains(a.GenericKey.GetDescriptorValue(), "%") || a.GenericKey.GetDefaultValue() != "" {
				t.Fatalf("generic_key %v: a format or default value, which this test does not derive", a.GenericKey)
			}
			entries = append(entries, "("+key+", "+a.GenericKey.GetDescriptorValue()+")")
		default:
			t.Fatalf("action %T: this test derives remote_address, request_headers and generic_key only", a)
		}
	}
	if len(entries) == 0 {
		return "", false
	}
	return strings.Join(entries, ", "), true
}

// parseDescriptor turns "(k1, v1), (k2, v2)" back into a descriptor.
func parseDescriptor(s string) *rlscommon.RateLimitDescriptor {
	var kv []string
	for _, e := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(s, "("), ")"), "), (") {
		k, v, _ := strings.Cut(e, ", ")
		kv = append(kv, k, v)
	}
	return desc(kv...)
}

// TestEnvoyExampleDescriptors derives the descriptors that the Envoy
// bootstrap of docs/envoy.md sends for the requests its text describes
// (see the rules above), checks that they are the ones the text names,
// that every route sends the per-address descriptor, and that the Sluice
// configuration at the top of the page has a limit for each of them.
func TestEnvoyExampleDescriptors(t *testing.T) {
	data, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(data)), " ")
	var boot, sluiceYAML string
	for _, b := range yamlBlocks(t, "../../../docs/envoy.md") {
		switch {
		case boot == "" && strings.HasPrefix(b, "static_resources:\n  listeners:"):
			boot = b
		case sluiceYAML == "" && strings.HasPrefix(b, "listen:"):
			sluiceYAML = b
		}
	}
	if boot == "" || sluiceYAML == "" {
		t.Fatal("docs/envoy.md has no Envoy bootstrap with a listener, or no Sluice configuration")
	}
	setup := loadEnvoySetup(t, boot)
	s, ps := DecodeSection(envoyNode(t, []byte(sluiceYAML)), "envoy")
	if len(ps) > 0 {
		t.Fatalf("the Sluice configuration has problems:\n%s", problemLines(ps))
	}
	cfg, err := CompileSection(s)
	if err != nil {
		t.Fatal(err)
	}
	svc := New(memstore.New(memstore.Options{}), cfg, Options{})

	const client = "203.0.113.7"
	both := map[string]string{"x-api-key": "k1", "x-op": "get"}
	tests := []struct {
		name string
		req  envoyRequest
		want []string
		// text is how docs/envoy.md names the descriptors, "" for a
		// request it does not describe.
		text string
	}{
		{"api with both headers", envoyRequest{"/api/users", client, both},
			[]string{"(api_key, k1)", "(database, users), (op, get)", "(remote_address, 203.0.113.7)"},
			"sends three descriptors: `(api_key, k1)`, `(database, users), (op, get)` and `(remote_address, 203.0.113.7)`"},
		{"api without X-Op", envoyRequest{"/api/users", client, map[string]string{"x-api-key": "k1"}},
			[]string{"(api_key, k1)", "(remote_address, 203.0.113.7)"}, "without `X-Op`, the second is dropped"},
		{"api without headers", envoyRequest{"/api/", client, nil}, []string{"(remote_address, 203.0.113.7)"}, ""},
		{"root", envoyRequest{"/", client, both}, []string{"(remote_address, 203.0.113.7)"}, "a request to `/` sends `(remote_address, 203.0.113.7)` alone"},
		{"other path", envoyRequest{"/static/app.js", client, nil}, []string{"(remote_address, 203.0.113.7)"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain, got := setup.descriptors(t, tt.req)
			if domain != "edge" || strings.Join(got, " | ") != strings.Join(tt.want, " | ") {
				t.Fatalf("Envoy sends to domain %q: %q; want %q: %q", domain, got, "edge", tt.want)
			}
			if tt.text != "" && !strings.Contains(doc, tt.text) {
				t.Errorf("docs/envoy.md does not say %q", tt.text)
			}
			perAddress := false
			req := &rlsv3.RateLimitRequest{Domain: domain}
			for _, d := range got {
				perAddress = perAddress || strings.HasPrefix(d, "(remote_address, ")
				req.Descriptors = append(req.Descriptors, parseDescriptor(d))
			}
			if !perAddress {
				t.Errorf("no remote_address descriptor: the per-address limit does not apply to %s", tt.req.path)
			}
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range resp.GetStatuses() {
				if st.GetCurrentLimit() == nil {
					t.Errorf("descriptor %s matches no limit of the Sluice configuration", got[i])
				}
			}
		})
	}
}

// TestEnvoyRouteRules checks the derivation's reading of the virtual
// host's rate_limits on a route with rate_limits of its own, on variants
// of the bootstrap of docs/envoy.md: without per-route configuration
// they are left out (the mistake the page once made), include_vh_rate_limits
// or vh_rate_limits INCLUDE adds them, IGNORE leaves them out.
func TestEnvoyRouteRules(t *testing.T) {
	var boot string
	for _, b := range yamlBlocks(t, "../../../docs/envoy.md") {
		if strings.HasPrefix(b, "static_resources:\n  listeners:") {
			boot = b
			break
		}
	}
	const include = "vh_rate_limits: INCLUDE"
	if !strings.Contains(boot, include) {
		t.Fatalf("the bootstrap of docs/envoy.md has no %q", include)
	}
	api := envoyRequest{"/api/users", "203.0.113.7", map[string]string{"x-api-key": "k1"}}
	for _, tt := range []struct {
		name, boot string
		want       []string
	}{
		{"INCLUDE", boot, []string{"(api_key, k1)", "(remote_address, 203.0.113.7)"}},
		{"no per-route configuration", withoutPerRoute(boot), []string{"(api_key, k1)"}},
		{"IGNORE", strings.Replace(boot, include, "vh_rate_limits: IGNORE", 1), []string{"(api_key, k1)"}},
		{"include_vh_rate_limits", strings.Replace(withoutPerRoute(boot),
			"                            cluster: backend\n                            rate_limits:",
			"                            cluster: backend\n                            include_vh_rate_limits: true\n                            rate_limits:", 1),
			[]string{"(api_key, k1)", "(remote_address, 203.0.113.7)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := loadEnvoySetup(t, tt.boot).descriptors(t, api); strings.Join(got, " | ") != strings.Join(tt.want, " | ") {
				t.Errorf("Envoy sends %q for %s, want %q", got, api.path, tt.want)
			}
		})
	}
}

// withoutPerRoute returns the YAML y without its typed_per_filter_config
// mappings: their key's line and the more indented lines after it.
func withoutPerRoute(y string) string {
	var b strings.Builder
	skip := -1 // the indentation of the key being left out
	for _, line := range strings.SplitAfter(y, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case skip >= 0 && indent > skip:
			continue
		case strings.TrimSpace(line) == "typed_per_filter_config:":
			skip = indent
			continue
		}
		skip = -1
		b.WriteString(line)
	}
	return b.String()
}
