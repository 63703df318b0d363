package config

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/service/usage"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/redisstore"
)

// testFormats are the checks of the packages that own the formats, as
// cmd/sluice's formats.go passes them (its TestValidateConfigFixtures runs
// this package's fixtures through those).
var testFormats = Formats{
	KeySource: func(spec string) error {
		_, err := httplimit.ParseKey(spec, &httplimit.KeyOptions{Sources: httplimit.BodySources(nil)})
		return err
	},
	Envoy: func(section *yaml.Node, path string) []Problem {
		_, ps := rls.DecodeSection(section, path)
		out := make([]Problem, len(ps))
		for i, p := range ps {
			out[i] = Problem{Line: p.Line, Column: p.Column, Path: p.Path, Message: p.Message}
		}
		return out
	},
	PlanTable: func(file string, data []byte, names []string) error {
		if _, err := plans.ParseTable(file, data, names); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "plans: "))
		}
		return nil
	},
	RedisPrefix: redisstore.CheckPrefix,
	Usage: func(spec string) error {
		_, err := usage.Parse(spec)
		return err
	},
}

// TestDefaultsOfOtherPackages: the defaults this package writes down are
// those of the packages that apply them.
func TestDefaultsOfOtherPackages(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"DefaultPlanCacheTTL", int64(DefaultPlanCacheTTL), int64(plans.DefaultCacheTTL)},
		{"DefaultPlanCacheSize", DefaultPlanCacheSize, plans.DefaultCacheSize},
		{"DefaultBodyMaxBytes", DefaultBodyMaxBytes, httplimit.DefaultMaxBodyBytes},
		{"MaxTableFileSize", MaxTableFileSize, plans.MaxFileSize},
		{"DefaultSettleWithin", int64(DefaultSettleWithin), int64(httplimit.DefaultSettleWithin)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestFormatsUnset: without Formats, the values they check are taken as
// written; everything of the schema's own is still checked.
func TestFormatsUnset(t *testing.T) {
	data := []byte(`listen: {grpc: 127.0.0.1:8081}
store: {backend: redis, redis: {addrs: [127.0.0.1:6379], prefix: "a{b}"}}
limits: {a: {algorithm: gcra, limit: 1, period: 1s}}
proxy: {rules: [{limits: [{limit: a, key: "cookie:x"}]}]}
envoy: [{domain: edge, descriptors: [{key: k, rate_limit: {unit: seconds, requests_per_unit: 1}}]}]
`)
	c, err := Parse("x.yaml", data, Formats{})
	if err != nil {
		t.Fatalf("Parse without Formats: %v", err)
	}
	if p, _ := c.Proxy(); p.Rules[0].Limits[0].Key != "cookie:x" {
		t.Errorf("key = %q, want it as written", p.Rules[0].Limits[0].Key)
	}
	if _, err := Parse("x.yaml", data, testFormats); err == nil {
		t.Error("Parse with the formats accepted a bad key source, prefix and envoy section")
	} else if n := len(problems(err)); n != 3 {
		t.Errorf("Parse with the formats: %d problems, want 3:\n%v", n, err)
	}
}
