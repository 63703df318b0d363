package rls

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the .want files of testdata/bad")

// envoyNode returns the node of the envoy key of a YAML document.
func envoyNode(t *testing.T, data []byte) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "envoy" {
			return root.Content[i+1]
		}
	}
	t.Fatal("no envoy key")
	return nil
}

func problemLines(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestDecodeBad decodes one fixture per configuration mistake and compares
// the problems with the fixture's .want file.
func TestDecodeBad(t *testing.T) {
	testkit.EachFile(t, "testdata/bad/*.yaml", func(t *testing.T, f string) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, ps := Decode(envoyNode(t, data), "envoy")
		got := problemLines(ps)
		wantFile := strings.TrimSuffix(f, ".yaml") + ".want"
		if *update {
			if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(wantFile)
		if err != nil {
			t.Fatal(err)
		}
		if got == "" {
			t.Fatalf("Decode(%s) found no problem", f)
		}
		if got != string(want) {
			t.Errorf("Decode(%s) problems:\n%s\nwant:\n%s", f, got, want)
		}
		for _, p := range ps {
			if p.Line == 0 || !strings.HasPrefix(p.Path, "envoy") {
				t.Errorf("problem %q has no line or no path in the envoy section", p)
			}
		}
	})
}

func TestDecodeGood(t *testing.T) {
	testkit.EachFile(t, "testdata/good/*.yaml", func(t *testing.T, f string) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		domains, ps := Decode(envoyNode(t, data), "envoy")
		if len(ps) > 0 {
			t.Fatalf("Decode(%s) = problems\n%s", f, problemLines(ps))
		}
		if _, err := Compile(domains); err != nil {
			t.Fatalf("Compile(%s) = %v", f, err)
		}
	})
}

// TestDecodeFields checks that every field reaches the Go types.
func TestDecodeFields(t *testing.T) {
	data := []byte(`envoy:
  - domain: edge
    descriptors:
      - key: k
        value: 7
        algorithm: gcra
        shadow_mode: on
        usage: yes
        detailed_metric: true
        value_to_metric: true
        rate_limits:
          - {unit: Minute, requests_per_unit: 3, unit_multiplier: 2, name: a, burst: 6}
          - {unit: day, requests_per_unit: 9, algorithm: sliding_log, replaces: [{name: b}]}
        descriptors:
          - key: sub
            value: "x*"
            share_threshold: true
            rate_limit: {unit: hour, requests_per_unit: 0, name: b}
          - key: free
            rate_limit: {unlimited: true}
`)
	domains, ps := Decode(envoyNode(t, data), "envoy")
	if len(ps) > 0 {
		t.Fatalf("Decode = problems\n%s", problemLines(ps))
	}
	d := domains[0].Descriptors[0]
	if d.Key != "k" || d.Value != "7" || d.Algorithm != "gcra" || !d.ShadowMode || !d.Usage || !d.DetailedMetric || !d.ValueToMetric {
		t.Errorf("descriptor = %+v", d)
	}
	want0 := RateLimit{Unit: "Minute", RequestsPerUnit: 3, UnitMultiplier: 2, Name: "a", Burst: 6}
	if got := d.RateLimits[0]; got.Unit != want0.Unit || got.RequestsPerUnit != 3 || got.UnitMultiplier != 2 || got.Name != "a" || got.Burst != 6 {
		t.Errorf("rate_limits[0] = %+v, want %+v", got, want0)
	}
	if got := d.RateLimits[1]; got.Algorithm != "sliding_log" || len(got.Replaces) != 1 || got.Replaces[0].Name != "b" {
		t.Errorf("rate_limits[1] = %+v", got)
	}
	sub := d.Descriptors[0]
	if !sub.ShareThreshold || sub.RateLimit == nil || sub.RateLimit.RequestsPerUnit != 0 || sub.RateLimit.Name != "b" {
		t.Errorf("sub = %+v", sub)
	}
	if free := d.Descriptors[1]; free.RateLimit == nil || !free.RateLimit.Unlimited {
		t.Errorf("free = %+v", free)
	}
}

func TestValidateGoValues(t *testing.T) {
	tests := []struct {
		name    string
		domains []Domain
		want    string
	}{
		{"ok", []Domain{{Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: 1}}}}}, ""},
		{"bad unit", []Domain{{Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: &RateLimit{Unit: "sec", RequestsPerUnit: 1}}}}},
			"x[0].descriptors[0].rate_limit.unit: unknown unit \"sec\" (want second, minute, hour, day, week, month or year)\n"},
		{"nested duplicate", []Domain{{Domain: "d", Descriptors: []Descriptor{{Key: "a", Descriptors: []Descriptor{{Key: "b"}, {Key: "b"}}}}}},
			"x[0].descriptors[0].descriptors[1]: duplicate descriptor key \"b\" without a value (first at x[0].descriptors[0].descriptors[0])\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := problemLines(Validate(tt.domains, "x")); got != tt.want {
				t.Errorf("Validate = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseUpstreamFile reads envoyproxy/ratelimit files as they are: one
// domain document each, several separated by "---".
func TestParseUpstreamFile(t *testing.T) {
	data := []byte(`domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
---
domain: b
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	domains, ps := Parse(data, "envoy")
	if len(ps) > 0 {
		t.Fatalf("Parse = problems\n%s", problemLines(ps))
	}
	if len(domains) != 2 || domains[0].Domain != "a" || domains[1].Domain != "b" {
		t.Fatalf("Parse = %+v", domains)
	}
	_, ps = Parse([]byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: parsec, requests_per_unit: 1}\n"), "file.yaml")
	if got, want := problemLines(ps), "4:18: file.yaml[0].descriptors[0].rate_limit.unit: unknown unit \"parsec\" (want second, minute, hour, day, week, month or year)\n"; got != want {
		t.Errorf("Parse problems = %q, want %q", got, want)
	}
}

func TestParseSyntaxError(t *testing.T) {
	_, ps := Parse([]byte("domain: a\ndescriptors:\n  - key: [unclosed\n"), "file.yaml")
	if len(ps) != 1 || ps[0].Line == 0 || !strings.HasPrefix(ps[0].Message, "invalid YAML: ") {
		t.Errorf("Parse(bad YAML) = %v, want one problem with a line", ps)
	}
}

func TestCompileRejectsProblems(t *testing.T) {
	_, err := Compile([]Domain{{Domain: "", Descriptors: nil}})
	if err == nil || !strings.Contains(err.Error(), "envoy[0].domain: domain is required") {
		t.Errorf("Compile = %v, want the missing domain", err)
	}
}

func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
			return
		}
		section, ps := DecodeSection(doc.Content[0], "envoy")
		if len(ps) == 0 {
			if _, err := CompileSection(section); err != nil {
				t.Fatalf("Decode found no problem but Compile = %v", err)
			}
		}
	})
}
