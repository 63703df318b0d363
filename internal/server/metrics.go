package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// The outcomes of one limit's part of a decision, the values of the
// outcome label of sluice_decisions_total.
const (
	outcomeAllowed      = "allowed"
	outcomeDenied       = "denied"
	outcomeShadowDenied = "shadow_denied"
	outcomeDegraded     = "degraded"
)

var outcomes = []string{outcomeAllowed, outcomeDenied, outcomeShadowDenied, outcomeDegraded}

// metrics holds the service's Prometheus collectors. Labels are limit
// names, endpoint names and store operations, never keys, so their number
// is bounded by the configuration.
type metrics struct {
	decisions     *prometheus.CounterVec   // limit, outcome
	storeDuration *prometheus.HistogramVec // operation
	storeErrors   *prometheus.CounterVec   // operation
	requests      *prometheus.CounterVec   // handler, code
	duration      *prometheus.HistogramVec // handler
	reloads       prometheus.Counter
	lastReload    prometheus.Gauge
	limits        prometheus.Gauge

	registered []prometheus.Collector
}

// storeBuckets spans an in-memory decision (a microsecond) to a Redis call
// at a generous timeout.
var storeBuckets = []float64{1e-6, 5e-6, 25e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

// circuitStates are the values of the state label of
// sluice_store_circuit_state.
var circuitStates = []string{"closed", "open", "half-open"}

func newMetrics(reg prometheus.Registerer, store sluice.Store, circuit func() string, local func() LocalRefusals) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Decisions by limit and outcome: allowed, denied, shadow_denied (a dry-run limit would have denied), degraded (the store's failure policy decided).",
		}, []string{"limit", "outcome"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Time taken by store calls, by operation (allow, allow_all, peek).",
			Buckets: storeBuckets,
		}, []string{"operation"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed (the backend could not decide and no failure policy did), by operation.",
		}, []string{"operation"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "HTTP requests served, by handler and status code.",
		}, []string{"handler", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "Time taken to answer HTTP requests, by handler.",
			Buckets: storeBuckets,
		}, []string{"handler"}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configurations applied by reloading, after the first.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_timestamp_seconds",
			Help: "Unix time at which the current configuration was applied.",
		}),
		limits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_limits",
			Help: "Limits in the current configuration.",
		}),
	}
	cs := []prometheus.Collector{m.decisions, m.storeDuration, m.storeErrors, m.requests, m.duration, m.reloads, m.lastReload, m.limits}
	if s, ok := store.(interface{ Len() int }); ok {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_store_keys",
			Help: "(policy, key) pairs the in-memory store tracks.",
		}, func() float64 { return float64(s.Len()) }))
	}
	if circuit != nil {
		for _, state := range circuitStates {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "sluice_store_circuit_state",
				Help:        "1 for the state the store's circuit breaker is in (closed, open, half-open), 0 for the others.",
				ConstLabels: prometheus.Labels{"state": state},
			}, func() float64 {
				if circuit() == state {
					return 1
				}
				return 0
			}))
		}
	}
	if local != nil {
		cs = append(cs, newLocalRefusalCollector(local))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			m.unregister(reg)
			return nil, err
		}
		m.registered = append(m.registered, c)
	}
	for _, op := range []string{opAllow, opAllowAll, opPeek} {
		m.storeDuration.WithLabelValues(op)
		m.storeErrors.WithLabelValues(op)
	}
	return m, nil
}

// unregister removes the collectors newMetrics registered.
func (m *metrics) unregister(reg prometheus.Registerer) {
	for _, c := range m.registered {
		reg.Unregister(c)
	}
	m.registered = nil
}

// setLimits makes the decision series of exactly these limits exist, so
// that every configured limit shows zeros before its first decision and a
// removed limit's series disappear.
func (m *metrics) setLimits(old, cur []string) {
	keep := make(map[string]bool, len(cur))
	for _, name := range cur {
		keep[name] = true
		for _, o := range outcomes {
			m.decisions.WithLabelValues(name, o)
		}
	}
	for _, name := range old {
		if !keep[name] {
			m.decisions.DeletePartialMatch(prometheus.Labels{"limit": name})
		}
	}
	m.limits.Set(float64(len(cur)))
}

// outcome classifies one limit's decision.
func outcome(d sluice.Decision, shadow bool) string {
	switch {
	case d.Degraded:
		return outcomeDegraded
	case d.Allowed:
		return outcomeAllowed
	case shadow:
		return outcomeShadowDenied
	}
	return outcomeDenied
}

// The store operations, values of the operation label.
const (
	opAllow    = "allow"
	opAllowAll = "allow_all"
	opPeek     = "peek"
)

// meteredStore is a sluice.Store that times every call and counts the
// calls that fail. Refusals of bad input (a cost above the capacity) are
// not failures.
type meteredStore struct {
	next sluice.Store
	// Observers resolved once, so that a call costs no label lookup.
	allowDur, allowAllDur, peekDur prometheus.Observer
	allowErr, allowAllErr, peekErr prometheus.Counter
}

var _ sluice.Store = (*meteredStore)(nil)

// Store returns the handler's store with its metrics (the
// sluice_store_* series): the store the service's other front doors,
// Envoy's rate limit service among them, must decide with, so that their
// traffic is measured with the HTTP API's.
func (h *Handler) Store() sluice.Store { return h.store }

func newMeteredStore(next sluice.Store, m *metrics) *meteredStore {
	return &meteredStore{
		next:        next,
		allowDur:    m.storeDuration.WithLabelValues(opAllow),
		allowAllDur: m.storeDuration.WithLabelValues(opAllowAll),
		peekDur:     m.storeDuration.WithLabelValues(opPeek),
		allowErr:    m.storeErrors.WithLabelValues(opAllow),
		allowAllErr: m.storeErrors.WithLabelValues(opAllowAll),
		peekErr:     m.storeErrors.WithLabelValues(opPeek),
	}
}

func observe(start time.Time, dur prometheus.Observer, errs prometheus.Counter, err error) {
	dur.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) && !errors.Is(err, sluice.ErrInvalidCost) {
		errs.Inc()
	}
}

func (s *meteredStore) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.next.Allow(ctx, now, req)
	observe(start, s.allowDur, s.allowErr, err)
	return d, err
}

func (s *meteredStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.next.AllowAll(ctx, now, reqs, out)
	observe(start, s.allowAllDur, s.allowAllErr, err)
	return d, err
}

func (s *meteredStore) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.next.Peek(ctx, now, req)
	observe(start, s.peekDur, s.peekErr, err)
	return d, err
}
