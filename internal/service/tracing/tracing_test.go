package tracing

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4317"}, false},
	} {
		if got := Enabled(env(tc.env)); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestSetupRefusesUnknownProtocol(t *testing.T) {
	_, err := Setup(context.Background(), Options{Getenv: env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})})
	if err == nil || !strings.Contains(err.Error(), `"http/json"`) {
		t.Errorf("Setup with http/json = %v, want an error naming it", err)
	}
	tr, err := Setup(context.Background(), Options{Getenv: env(nil)})
	if tr != nil || err != nil {
		t.Errorf("Setup without an endpoint = %v, %v; want nil, nil", tr, err)
	}
	// A nil Tracing is safe everywhere.
	tr.Limit(context.Background(), "l", "k", 1, "allowed", sluice.Decision{})
	tr.Decision(context.Background(), "", "", sluice.Decision{})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestHTTPSpanNames(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/check": "sluice.check", "/v1/forward-auth": "sluice.forward_auth", "/v1/release": "sluice.release",
		"/api/items": "sluice.proxy", "/healthz": "", "/readyz": "", "/metrics": "", "/": "", "/v1/status": "", "/v1/overrides": "",
	} {
		if got := httpSpan(path); got != want {
			t.Errorf("httpSpan(%q) = %q, want %q", path, got, want)
		}
	}
}
