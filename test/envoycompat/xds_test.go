package envoycompat

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/testkit"
)

// fixtureDoc is a domain document as far as RateLimitConfig can carry
// it: the fields of envoyproxy/ratelimit's ratelimit.config.ratelimit.v3
// (go-control-plane's module v0.1.0 and, as a newer control plane sends
// it, a descriptor's quota_mode). A descriptor's metadata does not fit:
// Sluice does not read it over xDS.
type fixtureDoc struct {
	Domain      string              `yaml:"domain"`
	Descriptors []fixtureDescriptor `yaml:"descriptors"`
}

type fixtureDescriptor struct {
	Key            string              `yaml:"key"`
	Value          string              `yaml:"value"`
	RateLimit      *fixtureLimit       `yaml:"rate_limit"`
	Descriptors    []fixtureDescriptor `yaml:"descriptors"`
	ShadowMode     bool                `yaml:"shadow_mode"`
	DetailedMetric bool                `yaml:"detailed_metric"`
	QuotaMode      bool                `yaml:"quota_mode"`
	Metadata       map[string]any      `yaml:"metadata"` // does not fit
}

type fixtureLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// xdsResource converts a domain document to a RateLimitConfig named
// name; false when the document uses what the resource cannot carry
// (units beyond a day, unit_multiplier, share_threshold, Sluice's
// extensions).
func xdsResource(name, doc string) (*rlsconfv3.RateLimitConfig, bool) {
	var d fixtureDoc
	dec := yaml.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return nil, false
	}
	descs, ok := xdsDescs(d.Descriptors)
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: d.Domain, Descriptors: descs}, ok
}

func xdsDescs(ds []fixtureDescriptor) ([]*rlsconfv3.RateLimitDescriptor, bool) {
	var out []*rlsconfv3.RateLimitDescriptor
	for _, d := range ds {
		nd := &rlsconfv3.RateLimitDescriptor{Key: d.Key, Value: d.Value, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric}
		if r := d.RateLimit; r != nil {
			p := &rlsconfv3.RateLimitPolicy{RequestsPerUnit: r.RequestsPerUnit, Unlimited: r.Unlimited, Name: r.Name}
			if r.Unit != "" {
				u, ok := rlsconfv3.RateLimitUnit_value[strings.ToUpper(r.Unit)]
				if !ok {
					return nil, false
				}
				p.Unit = rlsconfv3.RateLimitUnit(u)
			}
			for _, rp := range r.Replaces {
				p.Replaces = append(p.Replaces, &rlsconfv3.RateLimitReplace{Name: rp.Name})
			}
			nd.RateLimit = p
		}
		// The field that go-control-plane's ratelimit module v0.1.0
		// lacks is appended to the unknown fields, in the encoding of a
		// newer control plane's message: it reaches the service as it
		// would from one.
		if d.Metadata != nil {
			return nil, false
		}
		var extra []byte
		if d.QuotaMode {
			extra = protowire.AppendVarint(protowire.AppendTag(extra, 7, protowire.VarintType), 1)
		}
		nd.ProtoReflect().SetUnknown(extra)
		sub, ok := xdsDescs(d.Descriptors)
		if !ok {
			return nil, false
		}
		nd.Descriptors = sub
		out = append(out, nd)
	}
	return out, true
}

// TestCompatibilityXDS runs the suite against a service started with
// envoyproxy/ratelimit's environment variables alone in xDS mode
// (CONFIG_TYPE=GRPC_XDS_SOTW, as Envoy Gateway runs it), its domains
// RateLimitConfig resources of a go-control-plane management server.
// The cases whose domains a RateLimitConfig cannot carry are left out
// (and named in the log).
func TestCompatibilityXDS(t *testing.T) {
	const node = "envoy-ratelimit"
	x := testkit.StartXDS(t)
	var res []*rlsconfv3.RateLimitConfig
	var run []compatCase
	var skipped []string
	for _, c := range cases {
		if c.config == "" {
			run = append(run, c)
			continue
		}
		ok := true
		var rs []*rlsconfv3.RateLimitConfig
		for n := range copies {
			r, fits := xdsResource(fmt.Sprintf("%s-%d", c.name, n), strings.ReplaceAll(fixture(t, "domains", c.config), "DOMAIN", c.domain(n)))
			ok = ok && fits
			rs = append(rs, r)
		}
		if !ok {
			skipped = append(skipped, c.name)
			continue
		}
		res = append(res, rs...)
		run = append(run, c)
	}
	t.Logf("cases whose domains a RateLimitConfig cannot carry: %s", strings.Join(skipped, ", "))
	if len(run) < 40 {
		t.Fatalf("only %d cases can run over xDS", len(run))
	}
	x.Set(t, node, "1", res...)
	envStores(t, func(t *testing.T, storeEnv []string) {
		s := startEnvServer(t, "sluice serve --envoy-env (xDS)", append(xdsReferenceEnv(x.Addr, node), storeEnv...))
		for _, c := range run {
			t.Run(c.name, func(t *testing.T) { runCase(t, s, c) })
		}
	})
}

// xdsReferenceEnv is the environment of a service configured over xDS
// (CONFIG_TYPE=GRPC_XDS_SOTW, as Envoy Gateway runs it) from the
// management server at addr, as node.
func xdsReferenceEnv(addr, node string) []string {
	return []string{
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"LOG_LEVEL=info", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + addr,
		"CONFIG_GRPC_XDS_NODE_ID=" + node, "RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
	}
}
