package main

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/rls"
)

// maxRLSDescriptors bounds the descriptor label values of
// sluice_rls_decisions_total. Configured descriptor paths are bounded by
// the configuration, but a descriptor with detailed_metric names its
// series after the request's values; past this many distinct values the
// series is labelled "_other".
const maxRLSDescriptors = 1000

// serveMetrics are the metrics sluice serve adds to those of package
// server.
type serveMetrics struct {
	reloadFailures prometheus.Counter
	redisErrors    prometheus.Counter
	rlsDecisions   *prometheus.CounterVec // domain, descriptor, outcome

	known sync.Map   // descriptor label values in use: string -> bool
	mu    sync.Mutex // serialises additions to known
	count int        // entries of known; guarded by mu
}

func newServeMetrics(reg prometheus.Registerer) (*serveMetrics, error) {
	m := &serveMetrics{
		reloadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_config_reload_failures_total",
			Help: "Reloads refused because the configuration file could not be read or was not valid; the running configuration stayed.",
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_errors_total",
			Help: "Calls to Redis that failed or timed out, including those the failure policy then decided.",
		}),
		rlsDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_decisions_total",
			Help: "Envoy rate limit service: descriptors that matched a limit, by domain, configured descriptor (as envoyproxy/ratelimit names its stats) and outcome: allowed, denied, shadow_denied, unlimited, degraded.",
		}, []string{"domain", "descriptor", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.reloadFailures, m.redisErrors, m.rlsDecisions} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// rlsDecision counts one descriptor's decision; it is the rls.Service's
// OnDecision.
func (m *serveMetrics) rlsDecision(ev rls.Event) {
	outcome := ev.Outcome.String()
	if ev.Degraded {
		outcome = "degraded"
	}
	m.rlsDecisions.WithLabelValues(ev.Domain, m.descriptorLabel(ev.Key), outcome).Inc()
}

// descriptorLabel returns the label value for an event's descriptor key:
// "override" for Envoy's limit overrides (named after the request's own
// keys), the key itself for the first maxRLSDescriptors distinct keys, and
// "_other" after them.
func (m *serveMetrics) descriptorLabel(key string) string {
	if strings.HasPrefix(key, "override:") {
		return "override"
	}
	if _, ok := m.known.Load(key); ok {
		return key
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.known.Load(key); ok {
		return key
	}
	if m.count >= maxRLSDescriptors {
		return "_other"
	}
	m.known.Store(key, true)
	m.count++
	return key
}
