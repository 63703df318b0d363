package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/service/config"
)

// TestHTTPFollowsSampling: with a ratio of 0 a request that starts its
// trace here is not recorded, and its handler sees no recording span; one
// whose caller sampled its trace is recorded, as a child of the caller's
// span (parent-based).
func TestHTTPFollowsSampling(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(recv.Close)
	tr, err := Setup(context.Background(), Options{Getenv: env(nil),
		Section: &config.Tracing{Endpoint: recv.URL, Protocol: "http/protobuf", SampleRatio: 0, SampleSet: true}})
	if err != nil || tr == nil {
		t.Fatalf("Setup = %v, %v", tr, err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	var seen trace.SpanContext
	var recording bool
	h := tr.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		seen, recording = span.SpanContext(), span.IsRecording()
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/check", nil))
	if recording {
		t.Error("a request without a sampled caller was recorded at a ratio of 0")
	}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("POST", "/v1/check", nil)
	req.Header.Set("traceparent", parent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !recording || seen.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("a request whose caller sampled it: recording %v, trace %v; want recorded in the caller's trace", recording, seen.TraceID())
	}
}
