// Package tracing exports OpenTelemetry traces of sluice serve: a span per
// decision request on every front door (the decision API, forward-auth,
// the reverse proxy, Envoy's rate limit service), continuing the caller's
// trace (W3C traceparent on HTTP and in gRPC metadata), with a child span
// per store call and attributes that say why a request was refused.
//
// Only the service imports this package, and with it the OpenTelemetry
// SDK and its OTLP exporters: the library packages use neither (guard_test.go
// checks it), so a program that imports Sluice's library downloads no
// tracing code.
//
// Tracing is off unless the configuration's tracing section or the
// environment turns it on, as OpenTelemetry's SDKs read it:
// the section, or OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set (and OTEL_SDK_DISABLED not
// true). OTEL_EXPORTER_OTLP_PROTOCOL (or its _TRACES_ form) picks grpc or
// http/protobuf (the default, as in the specification); the exporters read
// the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates,
// insecure) themselves; OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// choose the sampler (default parentbased_always_on; parentbased_traceidratio
// with a ratio is the usual choice); OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the service. What the section sets
// (endpoint, protocol, sample_ratio) wins over the environment.
package tracing

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/service/config"
)

// ScopeName is the instrumentation scope of Sluice's spans.
const ScopeName = "github.com/sluicehq/sluice"

// Tracing is the tracer of a running service. A nil *Tracing traces
// nothing and costs nothing: every method of a nil one returns at once.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	// keys records keys as they are (sluice.key) instead of a hash
	// (sluice.key_hash).
	keys bool
}

// Options configure Setup.
type Options struct {
	// Getenv reads the environment (os.Getenv).
	Getenv func(string) string
	// Keys records keys in clear in sluice.key; by default spans carry
	// sluice.key_hash, the first 8 bytes of the key's SHA-256 in hex.
	Keys bool
	// Version is the service.version resource attribute.
	Version string
	// ServiceName is the service.name resource attribute; default
	// "sluice". OTEL_SERVICE_NAME wins.
	ServiceName string
	// Section is the configuration's tracing section, nil without one.
	// Its presence turns tracing on; what it sets wins over the
	// environment.
	Section *config.Tracing
}

// Enabled reports whether the environment turns tracing on.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup returns the service's Tracing, or nil when the environment does
// not turn tracing on. Shut it down to flush the spans still buffered.
func Setup(ctx context.Context, opts Options) (*Tracing, error) {
	sec := opts.Section
	if sec == nil && !Enabled(opts.Getenv) {
		return nil, nil
	}
	if sec == nil {
		sec = &config.Tracing{}
	}
	protocol := sec.Protocol
	if protocol == "" {
		protocol = opts.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	}
	if protocol == "" {
		protocol = opts.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var client otlptrace.Client
	switch protocol {
	case "grpc":
		var o []otlptracegrpc.Option
		if sec.Endpoint != "" {
			o = append(o, otlptracegrpc.WithEndpointURL(sec.Endpoint))
		}
		client = otlptracegrpc.NewClient(o...)
	case "", "http/protobuf":
		var o []otlptracehttp.Option
		if sec.Endpoint != "" {
			o = append(o, otlptracehttp.WithEndpointURL(strings.TrimSuffix(sec.Endpoint, "/")+"/v1/traces"))
		}
		client = otlptracehttp.NewClient(o...)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cmp.Or(opts.ServiceName, "sluice")), attribute.String("service.version", opts.Version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// The environment's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	// No sampler option: the SDK reads OTEL_TRACES_SAMPLER and its
	// argument, and defaults to parent-based, always on.
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if sec.SampleSet {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sec.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return &Tracing{
		provider: tp,
		tracer:   tp.Tracer(ScopeName),
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		keys:     opts.Keys || sec.Keys,
	}, nil
}

// Shutdown flushes the spans buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Start starts a server span named name under the trace that carrier
// continues (traceparent), and returns ctx carrying it.
func (t *Tracing) Start(ctx context.Context, name string, carrier propagation.TextMapCarrier, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx = t.prop.Extract(ctx, carrier)
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// KeyAttr returns the attribute that records key: sluice.key with
// Options.Keys, else sluice.key_hash.
func (t *Tracing) KeyAttr(key string) attribute.KeyValue {
	if t != nil && t.keys {
		return attribute.String("sluice.key", key)
	}
	sum := sha256.Sum256([]byte(key))
	return attribute.String("sluice.key_hash", hex.EncodeToString(sum[:8]))
}
