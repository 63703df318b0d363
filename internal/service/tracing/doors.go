package tracing

import (
	"context"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
)

// httpSpan names the span of an HTTP request by its path, and "" for the
// requests that are not decisions (probes, metrics, the status page).
func httpSpan(path string) string {
	switch path {
	case "/v1/check":
		return "sluice.check"
	case "/v1/forward-auth":
		return "sluice.forward_auth"
	case "/v1/release", "/v1/renew", "/v1/charge", "/v1/refund":
		return "sluice." + path[len("/v1/"):]
	case "/", "/healthz", "/readyz", "/metrics":
		return ""
	}
	if strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/static/") {
		return ""
	}
	return "sluice.proxy"
}

// HTTP returns next with a span around each decision request, continuing
// the trace of its traceparent field. A nil t returns next itself.
func (t *Tracing) HTTP(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := httpSpan(r.URL.Path)
		if name == "" {
			next.ServeHTTP(w, r)
			return
		}
		ctx, span := t.Start(r.Context(), name, propagation.HeaderCarrier(r.Header))
		defer span.End()
		if !span.IsRecording() {
			// Not sampled: nothing to record, so nothing more to pay.
			next.ServeHTTP(w, r)
			return
		}
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter remembers the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the writer beneath (flushes of
// streamed answers, hijacks of upgraded connections).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// metadataCarrier reads gRPC metadata for the propagator.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }
func (m metadataCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Unary returns a gRPC interceptor that traces Envoy's rate limit calls,
// continuing the trace of the call's traceparent metadata (as Envoy sends
// it), with the verdict of each descriptor. A nil t returns an
// interceptor that only calls the handler.
func (t *Tracing) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if t == nil {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		sctx, span := t.Start(ctx, "sluice.rls", metadataCarrier(md))
		defer span.End()
		if !span.IsRecording() {
			return handler(ctx, req) // not sampled: nothing to record
		}
		ctx = sctx
		span.SetAttributes(attribute.String("rpc.method", info.FullMethod))
		if r, ok := req.(*rlsv3.RateLimitRequest); ok {
			span.SetAttributes(attribute.String("sluice.rls.domain", r.GetDomain()), attribute.Int("sluice.rls.descriptors", len(r.GetDescriptors())))
		}
		resp, err := handler(ctx, req)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			return resp, err
		}
		if r, ok := resp.(*rlsv3.RateLimitResponse); ok {
			span.SetAttributes(attribute.String("sluice.rls.overall_code", r.GetOverallCode().String()),
				attribute.Bool("sluice.allowed", r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT))
			for i, st := range r.GetStatuses() {
				attrs := []attribute.KeyValue{attribute.Int("sluice.rls.descriptor", i), attribute.String("sluice.rls.code", st.GetCode().String()),
					attribute.Int64("sluice.remaining", int64(st.GetLimitRemaining()))}
				if cl := st.GetCurrentLimit(); cl != nil {
					attrs = append(attrs, attribute.String("sluice.limit", cl.GetName()), attribute.Int64("sluice.limit.requests_per_unit", int64(cl.GetRequestsPerUnit())))
				}
				if d := st.GetDurationUntilReset(); d != nil {
					attrs = append(attrs, attribute.Int64("sluice.reset_after_ms", d.AsDuration().Milliseconds()))
				}
				span.AddEvent("sluice.descriptor", trace.WithAttributes(attrs...))
			}
		}
		return resp, nil
	}
}

// Limit records one limit's part of the decision on the span of ctx, as
// an event sluice.limit: the limit, its key (or its hash), the cost, the
// outcome (allowed, denied, shadow_denied, degraded), what remains and
// the retry-after of a refusal. It does nothing without a recording span.
func (t *Tracing) Limit(ctx context.Context, limit, key string, cost int64, outcome string, d sluice.Decision) {
	if t == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("sluice.limit", limit), t.KeyAttr(key), attribute.Int64("sluice.cost", cost),
		attribute.String("sluice.outcome", outcome), attribute.Int64("sluice.remaining", d.Remaining)}
	if !d.Allowed {
		attrs = append(attrs, attribute.Int64("sluice.retry_after_ms", d.RetryAfter.Milliseconds()))
	}
	span.AddEvent("sluice.limit", trace.WithAttributes(attrs...))
}

// Decision records the decision on a request on the span of ctx: allowed
// or not, the limit that decided (refused, or with least left), what
// remains and the retry-after of a refusal; rule names the proxy rule
// ("" for none).
func (t *Tracing) Decision(ctx context.Context, rule, decidingLimit string, d sluice.Decision) {
	if t == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.Bool("sluice.allowed", d.Allowed), attribute.Int64("sluice.remaining", d.Remaining),
		attribute.Bool("sluice.degraded", d.Degraded)}
	if decidingLimit != "" {
		attrs = append(attrs, attribute.String("sluice.limit", decidingLimit))
	}
	if rule != "" {
		attrs = append(attrs, attribute.String("sluice.rule", rule))
	}
	if !d.Allowed {
		attrs = append(attrs, attribute.Int64("sluice.retry_after_ms", d.RetryAfter.Milliseconds()))
	}
	span.SetAttributes(attrs...)
}

// Rule names the proxy rule that matched on the span of ctx.
func (t *Tracing) Rule(ctx context.Context, rule string) {
	if t == nil || rule == "" {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("sluice.rule", rule))
	}
}
