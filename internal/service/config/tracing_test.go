package config

import (
	"errors"
	"strings"
	"testing"
)

func TestTracingSection(t *testing.T) {
	c, err := Parse("t.yaml", []byte("limits: {}\n"), testFormats)
	if err != nil || c.Tracing() != nil {
		t.Fatalf("no section: Tracing() = %v (%v), want nil", c.Tracing(), err)
	}
	c, err = Parse("t.yaml", []byte("limits: {}\ntracing:\n"), testFormats)
	if err != nil || c.Tracing() == nil || *c.Tracing() != (Tracing{}) {
		t.Fatalf("tracing: alone = %+v (%v), want on with nothing set", c.Tracing(), err)
	}
	c, err = Parse("t.yaml", []byte("limits: {}\ntracing: {endpoint: \"http://collector:4317\", protocol: grpc, sample_ratio: 0.01, keys: true}\n"), testFormats)
	want := Tracing{Endpoint: "http://collector:4317", Protocol: "grpc", SampleRatio: 0.01, SampleSet: true, Keys: true}
	if err != nil || c.Tracing() == nil || *c.Tracing() != want {
		t.Fatalf("full section = %+v (%v), want %+v", c.Tracing(), err, want)
	}
	c.Tracing().Endpoint = "http://elsewhere:4317"
	if got := c.Tracing().Endpoint; got != want.Endpoint {
		t.Errorf("after a change to what Tracing() returned, Tracing().Endpoint = %q, want the file's %q", got, want.Endpoint)
	}
	old := c
	c, _ = Parse("t.yaml", []byte("limits: {}\ntracing: {endpoint: \"http://collector:4317\", protocol: grpc, sample_ratio: 0.5}\n"), testFormats)
	if got := RestartRequired(old, c); len(got) != 1 || got[0] != "tracing" {
		t.Errorf("RestartRequired after a tracing change = %v, want [tracing]", got)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"tracing: {endpoint: collector:4317}", "t.yaml:2: tracing.endpoint: must be an http:// or https:// URL"},
		{"tracing: {protocol: thrift}", `t.yaml:2: tracing.protocol: must be grpc or http/protobuf, got "thrift"`},
		{"tracing: {sample_ratio: 2}", "t.yaml:2: tracing.sample_ratio: must be a number from 0 to 1"},
		{"tracing: {sample_ratio: half}", "t.yaml:2: tracing.sample_ratio: must be a number from 0 to 1"},
		{"tracing: {exporter: zipkin}", "tracing.exporter"},
	} {
		_, err := Parse("t.yaml", []byte("limits: {}\n"+tc.yaml+"\n"), testFormats)
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) != 1 || !strings.Contains(ce.Problems[0].String(), tc.want) {
			t.Errorf("%s: %v, want one problem %q", tc.yaml, err, tc.want)
		}
	}
}
