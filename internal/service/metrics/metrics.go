// Package metrics holds the Prometheus metrics of sluice serve, in one
// place: the decisions by limit and outcome, the store calls (through
// Store, a decorator of any sluice.Store), the HTTP requests, the
// configuration's reloads, Redis errors, the decisions of Envoy's rate
// limit service and the forward-auth requests of untrusted peers.
// cmd/sluice builds one Metrics and hands it, with the store it
// decorates, to every front door and to the status page, so that each
// series counts the traffic of all of them.
//
// Labels are limit names, handler names, store operations and configured
// descriptors, never keys, so their number is bounded by the
// configuration. docs/operations.md lists the series.
package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/buildinfo"
)

// The outcomes of one limit's part of a decision, the values of the
// outcome label of sluice_decisions_total.
const (
	OutcomeAllowed      = "allowed"
	OutcomeDenied       = "denied"
	OutcomeShadowDenied = "shadow_denied"
	OutcomeDegraded     = "degraded"
)

// Outcomes are the outcome label values, in this order.
var Outcomes = [...]string{OutcomeAllowed, OutcomeDenied, OutcomeShadowDenied, OutcomeDegraded}

// Outcome classifies one limit's decision: degraded when the store's
// failure policy decided, else allowed, else shadow_denied for a dry-run
// limit and denied for the others.
func Outcome(d sluice.Decision, shadow bool) string {
	switch {
	case d.Degraded:
		return OutcomeDegraded
	case d.Allowed:
		return OutcomeAllowed
	case shadow:
		return OutcomeShadowDenied
	}
	return OutcomeDenied
}

// StoreGauges say what Metrics can read of the store, at each scrape. The
// zero value is valid: a store without a key count, a breaker or local
// refusals.
type StoreGauges struct {
	// Keys, when set, returns the (policy, key) pairs the in-memory store
	// tracks (sluice_store_keys).
	Keys func() int
	// CircuitState, when set, returns the state of the store's circuit
	// breaker: "closed", "open" or "half-open"
	// (sluice_store_circuit_state).
	CircuitState func() string
	// LocalRefusals, when set, returns the Redis store's local refusals
	// (the sluice_store_local_refusal* series).
	LocalRefusals func() LocalRefusals
}

// Metrics are the collectors of one sluice serve, registered on one
// registry. Their methods are safe for concurrent use.
type Metrics struct {
	decisions      *prometheus.CounterVec   // limit, outcome
	storeDuration  *prometheus.HistogramVec // operation
	storeErrors    *prometheus.CounterVec   // operation
	requests       *prometheus.CounterVec   // handler, code
	duration       *prometheus.HistogramVec // handler
	reloads        prometheus.Counter
	lastReload     prometheus.Gauge
	limits         prometheus.Gauge
	reloadFailures prometheus.Counter
	redisErrors    prometheus.Counter
	rlsDecisions   *prometheus.CounterVec // domain, descriptor, outcome
	penaltyBlocks  *prometheus.CounterVec // limit
	penaltyRefused *prometheus.CounterVec // limit
	descriptors    descriptorLabels
	// forwardAuthUntrusted counts forward-auth requests whose
	// X-Forwarded-* fields were ignored.
	forwardAuthUntrusted prometheus.Counter
	// leaseReleases counts POST /v1/release by whether it freed units;
	// leaseRenewals counts POST /v1/renew by outcome.
	leaseReleases, leaseRenewals *prometheus.CounterVec
	// usageSettled and usageUnits count the estimates settled by the
	// usage a response reported, by limit; usageUnsettled those left
	// standing, by limit and reason.
	usageSettled, usageUnits, usageUnsettled *prometheus.CounterVec
	// rlsCounters holds the counter of each label set of rlsDecisions
	// counted so far (rlsLabels -> prometheus.Counter): a lookup of the
	// vector hashes and checks the three values on every decision. Its
	// series are never deleted, so a counter once found stays the one
	// the registry reports.
	rlsCounters sync.Map
	// decisionCounters holds the counter of each label set of decisions
	// counted so far (decisionLabels -> prometheus.Counter), for the same
	// reason. SetLimits deletes series, so it starts a new map: a counter
	// found before it may be the deleted series', and a decision that
	// began before it counts there (as it would have without the cache)
	// and stores into the map that is no longer used.
	decisionCounters atomic.Pointer[sync.Map]

	reg        prometheus.Registerer
	registered []prometheus.Collector
}

// storeBuckets spans an in-memory decision (a microsecond) to a Redis call
// at a generous timeout.
var storeBuckets = []float64{1e-6, 5e-6, 25e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

// circuitStates are the values of the state label of
// sluice_store_circuit_state.
var circuitStates = []string{"closed", "open", "half-open"}

// New registers the service's collectors on reg. It fails when reg holds
// collectors of the same names (a registry serves one Metrics), and then
// leaves reg as it was.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := newCollectors()
	m.reg = reg
	if err := m.register(m.decisions, m.storeDuration, m.storeErrors, m.requests, m.duration,
		m.reloads, m.lastReload, m.limits, m.reloadFailures, m.redisErrors, m.rlsDecisions, m.forwardAuthUntrusted,
		m.leaseReleases, m.leaseRenewals, m.usageSettled, m.usageUnits, m.usageUnsettled,
		m.penaltyBlocks, m.penaltyRefused); err != nil {
		return nil, err
	}
	for _, v := range []string{"true", "false"} {
		m.leaseReleases.WithLabelValues(v)
	}
	for _, v := range []string{"renewed", "expired"} {
		m.leaseRenewals.WithLabelValues(v)
	}
	for _, op := range []string{opAllow, opAllowAll, opPeek} {
		m.storeDuration.WithLabelValues(op)
		m.storeErrors.WithLabelValues(op)
	}
	return m, nil
}

// register registers cs, or none of them and none of m's collectors.
func (m *Metrics) register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			m.Unregister()
			return fmt.Errorf("metrics: %w", err)
		}
		m.registered = append(m.registered, c)
	}
	return nil
}

// ReadStore adds the gauges that g reads from the store
// (sluice_store_keys, sluice_store_circuit_state and the
// sluice_store_local_refusal* series). On failure it unregisters every
// collector of m.
func (m *Metrics) ReadStore(g StoreGauges) error {
	return m.register(storeCollectors(g)...)
}

// Build adds sluice_build_info: a gauge of 1 whose labels say which
// build is running (version, revision, vcs_time, modified, go_version,
// as `sluice version` prints them). On failure it unregisters every
// collector of m.
func (m *Metrics) Build(in buildinfo.Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "1, with the running build's module version, VCS revision and commit time, whether the work tree was modified, and Go release as labels.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.Revision, "vcs_time": in.Time,
			"modified": strconv.FormatBool(in.Modified), "go_version": in.GoVersion,
		},
	})
	g.Set(1)
	return m.register(g)
}

// DecisionLog adds sluice_decision_log_lines_total, whose result label
// counts the lines of the decision log written and those dropped (a full
// queue, or a file that could not be written), as written and dropped
// report them. On failure it unregisters every collector of m.
func (m *Metrics) DecisionLog(written, dropped func() uint64) error {
	var cs []prometheus.Collector
	for _, r := range []struct {
		name string
		n    func() uint64
	}{{"written", written}, {"dropped", dropped}} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_decision_log_lines_total",
			Help:        "Lines of the decision log, by result: written, or dropped (the writer's queue was full or the file could not be written); a dropped line never delayed or failed its decision.",
			ConstLabels: prometheus.Labels{"result": r.name},
		}, func() float64 { return float64(r.n()) }))
	}
	return m.register(cs...)
}

// Unregister removes the collectors New registered.
func (m *Metrics) Unregister() {
	for _, c := range m.registered {
		m.reg.Unregister(c)
	}
	m.registered = nil
}

func newCollectors() *Metrics {
	m := &Metrics{
		decisions: counterVec("sluice_decisions_total",
			"Decisions by limit and outcome: allowed, denied, shadow_denied (a dry-run limit would have denied), degraded (the store's failure policy decided).",
			"limit", "outcome"),
		penaltyBlocks: counterVec("sluice_penalty_blocks_total",
			"Blocks started by a limit's penalty: offences, requests the limit itself refused while their key was not blocked.",
			"limit"),
		penaltyRefused: counterVec("sluice_penalty_blocked_total",
			"Requests refused because their key was blocked by a limit's penalty (not offences, not charged).",
			"limit"),
		storeDuration: histogramVec("sluice_store_duration_seconds",
			"Time taken by store calls, by operation (allow, allow_all, peek).",
			"operation"),
		storeErrors: counterVec("sluice_store_errors_total",
			"Store calls that failed (the backend could not decide and no failure policy did), by operation.",
			"operation"),
		requests: counterVec("sluice_http_requests_total",
			"HTTP requests served, by handler and status code.",
			"handler", "code"),
		duration: histogramVec("sluice_http_request_duration_seconds",
			"Time taken to answer HTTP requests, by handler.",
			"handler"),
		reloads: counter("sluice_config_reloads_total",
			"Configurations applied by reloading, after the first."),
		lastReload: gauge("sluice_config_last_reload_timestamp_seconds",
			"Unix time at which the current configuration was applied."),
		limits: gauge("sluice_config_limits",
			"Limits in the current configuration."),
		reloadFailures: counter("sluice_config_reload_failures_total",
			"Reloads refused because the configuration file could not be read or was not valid; the running configuration stayed."),
		redisErrors: counter("sluice_redis_errors_total",
			"Calls to Redis that failed or timed out, including those the failure policy then decided."),
		rlsDecisions: counterVec("sluice_rls_decisions_total",
			"Envoy rate limit service: descriptors that matched a limit, by domain, configured descriptor (as envoyproxy/ratelimit names its stats) and outcome: allowed, denied, shadow_denied, unlimited, degraded.",
			"domain", "descriptor", "outcome"),
		forwardAuthUntrusted: counter("sluice_forward_auth_untrusted_total",
			"Forward-auth requests whose X-Forwarded-* fields were ignored because the peer is not in proxy.trusted_proxies: rules matched the forward-auth request itself, and ip keys were the peer's address."),
		leaseReleases: counterVec("sluice_lease_releases_total",
			"Releases of concurrency leases (POST /v1/release), by whether they freed units (freed=true) or found the lease released already or expired (freed=false).",
			"freed"),
		leaseRenewals: counterVec("sluice_lease_renewals_total",
			"Renewals of concurrency leases (POST /v1/renew), by outcome: renewed, or expired (the lease held nothing any more).",
			"outcome"),
		usageSettled: counterVec("sluice_usage_settled_total",
			"Proxied requests whose estimated cost was settled to the usage their response reported, by limit.",
			"limit"),
		usageUnits: counterVec("sluice_usage_units_total",
			"Units (tokens) that responses reported and that settled their requests' estimates, by limit.",
			"limit"),
		usageUnsettled: counterVec("sluice_usage_unsettled_total",
			"Proxied requests whose estimated cost stayed charged because no usage settled it, by limit and reason: "+
				"no_response (the upstream did not answer), no_usage (the response reported none), unreadable (it reported something else, or a body Sluice cannot read), "+
				"cut_off (the body ended before its usage: the client went away or the upstream broke off), too_large (the usage lay beyond what Sluice inspects), "+
				"expired (the response ended after settle_within), store_error (the store failed to settle).",
			"limit", "reason"),
	}
	m.decisionCounters.Store(new(sync.Map))
	return m
}

// counter, gauge, counterVec and histogramVec build the collectors of
// Metrics and TLS from a name, a help text and labels; histograms use
// storeBuckets.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: storeBuckets}, labels)
}

// storeCollectors are the gauges read from the store at each scrape.
func storeCollectors(opts StoreGauges) []prometheus.Collector {
	var cs []prometheus.Collector
	if keys := opts.Keys; keys != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_store_keys",
			Help: "(policy, key) pairs the in-memory store tracks.",
		}, func() float64 { return float64(keys()) }))
	}
	if circuit := opts.CircuitState; circuit != nil {
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
	if opts.LocalRefusals != nil {
		cs = append(cs, newLocalRefusalCollector(opts.LocalRefusals))
	}
	return cs
}

// SetLimits makes the decision series of exactly the limits cur exist, so
// that every configured limit shows zeros before its first decision and
// the series of a limit of old that cur no longer has disappear.
func (m *Metrics) SetLimits(old, cur []string) {
	keep := make(map[string]bool, len(cur))
	for _, name := range cur {
		keep[name] = true
		for _, o := range Outcomes {
			m.decisions.WithLabelValues(name, o)
		}
	}
	for _, name := range old {
		if !keep[name] {
			for _, v := range []*prometheus.CounterVec{m.decisions, m.usageSettled, m.usageUnits, m.usageUnsettled, m.penaltyBlocks, m.penaltyRefused} {
				v.DeletePartialMatch(prometheus.Labels{"limit": name})
			}
		}
	}
	m.decisionCounters.Store(new(sync.Map))
	m.limits.Set(float64(len(cur)))
}

// Decision counts one limit's decision under an outcome (see Outcome).
func (m *Metrics) Decision(limit, outcome string) {
	cache := m.decisionCounters.Load()
	k := decisionLabels{limit, outcome}
	if c, ok := cache.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.decisions.WithLabelValues(limit, outcome)
	cache.Store(k, c)
	c.Inc()
}

// Penalty counts what a limit's penalty did to one decision: a block
// started (an offence), or a request refused by a block in force.
func (m *Metrics) Penalty(limit string, d sluice.Decision) {
	switch {
	case d.Offence:
		m.penaltyBlocks.WithLabelValues(limit).Inc()
	case d.Blocked:
		m.penaltyRefused.WithLabelValues(limit).Inc()
	}
}

// decisionLabels are the label values of one series of
// sluice_decisions_total.
type decisionLabels struct{ limit, outcome string }

// Applied records that a configuration was applied at t: the first one,
// or a reload when reload is set.
func (m *Metrics) Applied(t time.Time, reload bool) {
	if reload {
		m.reloads.Inc()
	}
	m.lastReload.Set(float64(t.UnixNano()) / 1e9)
}

// ReloadFailed counts a reload refused because the configuration could
// not be read or was not valid.
func (m *Metrics) ReloadFailed() { m.reloadFailures.Inc() }

// RedisError counts a failed call to Redis.
func (m *Metrics) RedisError() { m.redisErrors.Inc() }

// ForwardAuthUntrusted counts a forward-auth request whose X-Forwarded-*
// fields were ignored because its peer is not a trusted proxy.
func (m *Metrics) ForwardAuthUntrusted() { m.forwardAuthUntrusted.Inc() }

// Handler counts and times the requests next serves under the handler
// label name.
func (m *Metrics) Handler(name string, next http.Handler) http.Handler {
	dur := m.duration.WithLabelValues(name)
	codes := m.requests.MustCurryWith(prometheus.Labels{"handler": name})
	var byCode sync.Map // int -> prometheus.Counter, to skip the label lookup
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Since(epoch)
		sw := statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(&sw, r)
		dur.Observe((time.Since(epoch) - start).Seconds())
		c, ok := byCode.Load(sw.status)
		if !ok {
			c, _ = byCode.LoadOrStore(sw.status, codes.WithLabelValues(strconv.Itoa(sw.status)))
		}
		c.(prometheus.Counter).Inc()
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxRLSDescriptors bounds the descriptor label values of
// sluice_rls_decisions_total. Configured descriptor paths are bounded by
// the configuration, but a descriptor with detailed_metric names its
// series after the request's values; past this many distinct values the
// series is labelled "_other".
const maxRLSDescriptors = 1000

// RLSDecision counts the decision of Envoy's rate limit service on one
// descriptor: its domain, the descriptor as the service names it (see
// rls.Event.Key) and its outcome (allowed, denied, shadow_denied,
// unlimited or degraded).
func (m *Metrics) RLSDecision(domain, descriptor, outcome string) {
	k := rlsLabels{domain, m.descriptors.label(descriptor), outcome}
	if c, ok := m.rlsCounters.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.rlsDecisions.WithLabelValues(k.domain, k.descriptor, k.outcome)
	m.rlsCounters.Store(k, c)
	c.Inc()
}

// rlsLabels are the label values of one series of
// sluice_rls_decisions_total.
type rlsLabels struct{ domain, descriptor, outcome string }

// descriptorLabels bounds the descriptor label values in use.
type descriptorLabels struct {
	known sync.Map   // label values in use: string -> bool
	mu    sync.Mutex // serialises additions to known
	count int        // entries of known; guarded by mu
}

// label returns the label value for a descriptor key: "override" for
// Envoy's limit overrides (named after the request's own keys), the key
// itself for the first maxRLSDescriptors distinct keys, and "_other"
// after them.
func (d *descriptorLabels) label(key string) string {
	if strings.HasPrefix(key, "override:") {
		return "override"
	}
	if _, ok := d.known.Load(key); ok {
		return key
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.known.Load(key); ok {
		return key
	}
	if d.count >= maxRLSDescriptors {
		return "_other"
	}
	d.known.Store(key, true)
	d.count++
	return key
}

// LeaseReleased counts a release of a lease, by whether it freed units.
func (m *Metrics) LeaseReleased(freed bool) {
	m.leaseReleases.WithLabelValues(strconv.FormatBool(freed)).Inc()
}

// LeaseRenewed counts a renewal of a lease: renewed, or expired when the
// lease held nothing any more.
func (m *Metrics) LeaseRenewed(renewed bool) {
	outcome := "renewed"
	if !renewed {
		outcome = "expired"
	}
	m.leaseRenewals.WithLabelValues(outcome).Inc()
}

// UsageSettled counts a request whose estimate under limit was settled
// to the units its response reported.
func (m *Metrics) UsageSettled(limit string, units int64) {
	m.usageSettled.WithLabelValues(limit).Inc()
	m.usageUnits.WithLabelValues(limit).Add(float64(units))
}

// UsageUnsettled counts a request whose estimate under limit stayed
// charged, for reason (see sluice_usage_unsettled_total's help).
func (m *Metrics) UsageUnsettled(limit, reason string) {
	m.usageUnsettled.WithLabelValues(limit, reason).Inc()
}
