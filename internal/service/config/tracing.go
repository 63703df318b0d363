package config

import (
	"net/url"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Tracing is the tracing section: OpenTelemetry traces exported over
// OTLP. Its presence turns tracing on, as OTEL_EXPORTER_OTLP_ENDPOINT
// does; what it leaves out comes from the OTEL_* environment.
type Tracing struct {
	// Endpoint is the OTLP receiver's URL (http://collector:4317 for gRPC,
	// http://collector:4318 for HTTP, to which /v1/traces is added); empty
	// means OTEL_EXPORTER_OTLP_*ENDPOINT, or the exporter's default.
	Endpoint string
	// Protocol is grpc or http/protobuf; empty means
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
	Protocol string
	// SampleRatio, when SampleSet, samples that share of the traces that
	// start here, and follows the caller's decision for the others
	// (parent-based); otherwise OTEL_TRACES_SAMPLER decides.
	SampleRatio float64
	SampleSet   bool
	// Keys records keys in spans as they are instead of a hash.
	Keys bool
}

// Tracing returns the tracing section, or nil when the file has none.
func (c *Config) Tracing() *Tracing { return copyOf(c.tracing) }

// tracingSection decodes the tracing section.
func (d *decoder) tracingSection(at, n *yaml.Node) *Tracing {
	t := &Tracing{}
	if deref(n).ShortTag() == "!!null" {
		return t // "tracing:" alone: on, configured by the environment
	}
	o, ok := d.mapping(at, n, "tracing", "endpoint", "protocol", "sample_ratio", "keys")
	if !ok {
		return t
	}
	if v := o.get("endpoint"); v != nil {
		if s, ok := d.nonEmpty(v, "tracing.endpoint"); ok {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.add(deref(v), "tracing.endpoint", "must be an http:// or https:// URL, like http://otel-collector:4317, got %q", s)
			} else {
				t.Endpoint = s
			}
		}
	}
	if v := o.get("protocol"); v != nil {
		if s, ok := d.str(v, "tracing.protocol"); ok {
			switch s {
			case "grpc", "http/protobuf":
				t.Protocol = s
			default:
				d.add(deref(v), "tracing.protocol", "must be grpc or http/protobuf, got %q", s)
			}
		}
	}
	if v := o.get("sample_ratio"); v != nil {
		v = deref(v)
		r, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") || err != nil || r < 0 || r > 1 {
			d.add(v, "tracing.sample_ratio", "must be a number from 0 to 1 (0.01 samples 1%% of new traces), got %s", v.Value)
		} else {
			t.SampleRatio, t.SampleSet = r, true
		}
	}
	if v := o.get("keys"); v != nil {
		t.Keys, _ = d.boolean(v, "tracing.keys")
	}
	return t
}
