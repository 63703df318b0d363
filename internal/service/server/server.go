// Package server is the HTTP side of the Sluice service (sluice serve): the
// decision API (POST /v1/check), forward-auth for reverse proxies
// (/v1/forward-auth), a rate-limiting reverse proxy (every other path, when
// the configuration names an upstream), health and readiness probes,
// Prometheus metrics, and for operators a live status page (/, with its
// data at /v1/status) and explanations of one key's state (/v1/explain).
// Handler serves them all; Public and Admin split them for a separate
// admin listener (see admin.go).
//
// A Handler is built from a validated config.Config and a sluice.Store. It
// holds its configuration in an atomic pointer: Reload swaps in a new one
// while requests are being served, and every request is answered entirely
// under the configuration it started with. Limits whose policy is unchanged
// keep their state across a reload, because stores keep state by policy
// (name, algorithm and numbers) and key; a limit whose numbers change
// starts afresh.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/buildinfo"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/service/overrides"
	"github.com/sluicehq/sluice/internal/service/tracing"
	"github.com/sluicehq/sluice/plans"
)

// Options configure a Handler. The zero value is valid: the defaults are
// given with each field.
type Options struct {
	// Logger receives store failures (Warn), reloads (Info) and, at Debug,
	// one line per denial. Keys are never logged. Nil discards logs.
	Logger *slog.Logger
	// Registry is served at /metrics. Nil means a new registry with the
	// Go runtime and process collectors added.
	Registry *prometheus.Registry
	// Metrics counts the decisions, the HTTP requests and the reloads,
	// and must be registered on Registry (cmd/sluice builds it once for
	// every front door). Nil means a new metrics.Metrics on Registry: a
	// registry then serves one Handler, and a second New on it fails.
	// The store's own series (sluice_store_duration_seconds,
	// sluice_store_errors_total) count the calls of the store given to
	// New when it is Metrics.Store of another: the Handler does not
	// decorate its store.
	Metrics *metrics.Metrics
	// CircuitState, when set, reports the state of the store's circuit
	// breaker: "closed", "open" or "half-open" (as redisstore's
	// BreakerState().String() does), for the sluice_store_circuit_state
	// metric and /readyz. Nil means the store has no breaker.
	CircuitState func() string
	// StoreHealth, when set, tells /readyz and the status page whether the
	// store's backend can decide now, master by master (as redisstore's
	// Check does). Nil means the store's own Ping(ctx) error, if it has
	// one, for a backend of one master; a store with neither is in
	// process and always ready.
	StoreHealth func(ctx context.Context) StoreHealth
	// LocalRefusals, when set, reports the Redis store's local refusals,
	// for the status page's share of decisions that never reached Redis
	// (and the sluice_store_local_refusal* metrics when Metrics is nil).
	// Nil means the store has none.
	LocalRefusals func() metrics.LocalRefusals
	// Now returns the current time, for reload timestamps and header
	// fields that carry a time, and the expiry of overrides; default
	// time.Now. Decisions use the store's clock.
	Now func() time.Time
	// Overrides keeps the runtime overrides of the admin API
	// (/v1/overrides). Nil means a new overrides.Memory: this instance's
	// own. Give every instance an overrides.Redis on the same Redis to
	// share them.
	Overrides overrides.Store
	// Resolver gives each (limit, key) its policy: an override in force,
	// else the limit's own (engine.Resolver). cmd/sluice builds one over
	// Overrides for every front door. Nil means one over Overrides, by
	// Now.
	Resolver *engine.Resolver
	// OtherPolicies, when set, returns the policies of the limits that are
	// not in the configuration's limits section (Envoy's descriptors,
	// rls.Config.Policies), for the usage metrics. Nil means none.
	OtherPolicies func() []sluice.Policy
	// OtherLimits, when set, returns the policy of a limit that is not in
	// the configuration's limits section but that overrides may name
	// (Envoy's descriptors, rls.Config.Limit), and false for a name it
	// does not know. Nil means none.
	OtherLimits func(name string) (sluice.Policy, bool)
	// OpenTable opens a plan table of the configuration
	// (plan_tables.NAME), given the names of the configuration's plans;
	// it is called for every table each time a configuration is applied.
	// cmd/sluice opens table files (plans.OpenFile, reloaded when they
	// change) and Redis hashes (plans/redisplans behind plans.NewCache,
	// over its own Redis connection). A configuration with plan tables
	// needs OpenTable set.
	OpenTable func(t config.PlanTable, planNames []string) (plans.Table, error)
	// ReadTimeout is the http.Server's ReadTimeout, which the proxy gives
	// back to the rest of a request body once a body key source has read
	// its start under proxy.body.timeout, and POST /v1/check once it has
	// read its body. Zero means no limit.
	ReadTimeout time.Duration
	// CheckReadTimeout bounds the time to read the body of a POST
	// /v1/check (at most MaxCheckBody bytes), from when its handler
	// starts: a body that has not arrived by then is answered 408 and
	// the connection closed. It applies when it is shorter than
	// ReadTimeout, which otherwise bounds the body alone; zero means
	// ReadTimeout alone. The proxy's and forward-auth's bodies stay under
	// ReadTimeout.
	CheckReadTimeout time.Duration
	// Build is the running build, which GET /v1/status reports. The zero
	// value reports nothing of it.
	Build buildinfo.Info
	// DecisionLog, when set, receives the decisions of /v1/check,
	// forward-auth and the proxy. The store given to New must then date
	// each decision, so that each line carries the time the store decided
	// at: decorated by decisionlog.Store beneath any metrics decorator (a
	// store with a clock, memstore), or telling decisionlog.Saw the time
	// it decided at (redisstore's Options.OnDecided).
	DecisionLog *decisionlog.Log
	// Tracing, when set, records each decision on the span of its request
	// (which the caller starts: tracing.HTTP). Nil traces nothing.
	Tracing *tracing.Tracing
}

// Handler serves the Sluice HTTP API. Build one with New; it is safe for
// concurrent use, including Reload while it serves.
type Handler struct {
	// store decides; raw is the store beneath its decorators (metrics),
	// for what it offers beyond sluice.Store.
	store  sluice.Store
	raw    sluice.Store
	logger *slog.Logger
	// storeErrLog limits the log lines of store failures in /v1/check.
	storeErrLog logLimiter
	reg         *prometheus.Registry
	metrics     *metrics.Metrics
	ownMetrics  bool // metrics were built by New, on reg
	now         func() time.Time
	circuit     func() string
	health      func(ctx context.Context) StoreHealth
	// localRefusals reports the Redis store's local refusals; nil without.
	localRefusals func() metrics.LocalRefusals
	// mux serves every endpoint; public and admin split them for
	// separate listeners (admin.go).
	mux, public, admin *http.ServeMux
	board              *board // recent decisions, for the status page
	// transport is shared by the proxies of every configuration, so that
	// upstream connections outlive reloads.
	transport *http.Transport

	state    atomic.Pointer[state]
	reloadMu sync.Mutex // serialises Reload
	draining atomic.Bool

	// Plans and overrides (plans.go, overrides.go).
	overrides   overrides.Store
	resolver    *engine.Resolver
	otherLimits func(name string) (sluice.Policy, bool)
	// otherPolicies is Options.OtherPolicies.
	otherPolicies func() []sluice.Policy
	openTable     func(config.PlanTable, []string) (plans.Table, error)
	readTimeout   time.Duration
	// checkReadTimeout is Options.CheckReadTimeout when it is shorter
	// than readTimeout, and 0 otherwise.
	checkReadTimeout time.Duration
	buildInfo        buildinfo.Info
	dlog             *decisionlog.Log
	tracing          *tracing.Tracing
}

// state is everything a request needs from the configuration, built once
// per configuration.
type state struct {
	cfg    *config.Config
	names  []string // limit names, sorted
	rules  []*rule
	byName map[string]*rule
	// trusted are the proxies whose X-Forwarded-* headers are believed.
	trusted []netip.Prefix
	// proxy forwards requests upstream; nil without proxy.upstream.
	proxy *httputil.ReverseProxy
	// tables are the plan tables, by name.
	tables map[string]*planTable
	// untrustedPeers are the peers whose ignored X-Forwarded-* fields
	// have been logged (forwardauth.go).
	untrustedPeers peerSet
}

// maxBody is the largest request body /v1/check reads.
const maxBody = MaxCheckBody

// MaxCheckBody is the largest request body POST /v1/check accepts, in
// bytes; a key must fit in it with the rest of the request.
const MaxCheckBody = 64 << 10

// maxChecks is the most checks one /v1/check request may hold.
const maxChecks = 128

// New returns a Handler that decides with store under cfg.
func New(cfg *config.Config, store sluice.Store, opts Options) (*Handler, error) {
	if cfg == nil {
		return nil, errors.New("server: config is nil")
	}
	if store == nil {
		return nil, errors.New("server: store is nil")
	}
	h := &Handler{store: store, raw: metrics.Underlying(store), logger: opts.Logger, reg: opts.Registry, now: opts.Now, transport: newTransport(),
		overrides: opts.Overrides, openTable: opts.OpenTable, readTimeout: opts.ReadTimeout, buildInfo: opts.Build, dlog: opts.DecisionLog, tracing: opts.Tracing}
	if d := opts.CheckReadTimeout; d > 0 && (h.readTimeout == 0 || d < h.readTimeout) {
		h.checkReadTimeout = d
	}
	if h.overrides == nil {
		h.overrides = overrides.NewMemory()
	}
	h.otherLimits, h.otherPolicies = opts.OtherLimits, opts.OtherPolicies
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.resolver = opts.Resolver; h.resolver == nil {
		h.resolver = engine.NewResolver(h.overrides, h.now)
	}
	if h.reg == nil {
		h.reg = prometheus.NewRegistry()
		h.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	h.circuit = opts.CircuitState
	h.health = opts.StoreHealth
	h.board = newBoard(h.now)
	h.localRefusals = opts.LocalRefusals
	if err := h.initMetrics(opts); err != nil {
		return nil, err
	}
	st, err := h.build(cfg)
	if err != nil {
		if h.ownMetrics {
			h.metrics.Unregister()
		}
		return nil, err
	}
	h.state.Store(st)
	if _, ok := h.raw.(expiredCounter); ok {
		if err := h.reg.Register(newLeaseGauge(h)); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if _, ok := h.raw.(usageCounter); ok {
		if err := h.reg.Register(newUsageGauge(h)); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	h.metrics.SetLimits(nil, st.names)
	h.metrics.Applied(h.now(), false)

	// Public endpoints with handle, admin ones (behind the admin token)
	// with handleAdmin, probes with handleProbe; see admin.go.
	h.initRoutes()
	h.handle("/v1/check", "check", onlyMethod("POST", h.serveCheck))
	h.handle("/v1/release", "release", onlyMethod("POST", h.serveRelease))
	h.handle("/v1/renew", "renew", onlyMethod("POST", h.serveRenew))
	h.handle("/v1/charge", "charge", onlyMethod("POST", h.serveCharge))
	h.handle("/v1/refund", "refund", onlyMethod("POST", h.serveRefund))
	h.handle("/v1/forward-auth", "forward_auth", h.serveForwardAuth)
	h.handleProbe("/healthz", "healthz", onlyMethod("GET", h.serveHealthz))
	h.handleProbe("/readyz", "readyz", onlyMethod("GET", h.serveReadyz))
	h.handleAdmin("/metrics", "metrics", onlyMethod("GET", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}).ServeHTTP))
	h.handleAdmin("/v1/status", "status", onlyMethod("GET", h.serveStatus))
	h.handleExplain(onlyMethod("GET", h.serveExplain))
	h.registerOverrides()
	h.handleAdminKey("reset", h.serveReset)
	h.handleAdminKey("unblock", h.serveUnblock)
	h.handleRoot()
	return h, nil
}

// initMetrics takes the metrics of opts, or registers new ones on h.reg.
func (h *Handler) initMetrics(opts Options) error {
	if opts.Metrics != nil {
		if opts.Registry == nil {
			return errors.New("server: Options.Metrics is set without the Registry it is registered on")
		}
		h.metrics = opts.Metrics
		return nil
	}
	g := metrics.StoreGauges{CircuitState: opts.CircuitState, LocalRefusals: opts.LocalRefusals}
	if l, ok := h.raw.(interface{ Len() int }); ok {
		g.Keys = l.Len
	}
	m, err := metrics.New(h.reg)
	if err == nil {
		err = m.ReadStore(g)
	}
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	h.metrics, h.ownMetrics = m, true
	return nil
}

// onlyMethod answers 405 with a JSON error to requests of another method
// (and lets HEAD through where GET is allowed).
func onlyMethod(method string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "use "+method+" for "+r.URL.Path)
			return
		}
		next(w, r)
	}
}

// handle registers a public endpoint of the decision API, behind the
// tokens of listen.tokens_file when it is set.
func (h *Handler) handle(pattern, name string, fn http.HandlerFunc) {
	in := h.instrument(name, h.needClientToken(fn)) // guard.go
	h.mux.Handle(pattern, in)
	h.public.Handle(pattern, in)
}

// instrument counts and times the requests of one handler.
func (h *Handler) instrument(name string, next http.Handler) http.Handler {
	return h.metrics.Handler(name, next)
}

// ServeHTTP routes a request to the endpoint its path names.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// Config returns the configuration in use.
func (h *Handler) Config() *config.Config {
	return h.state.Load().cfg
}

// Reload makes cfg the configuration in use, for every request that starts
// after it returns; requests already being served finish under the old
// one. Limits whose policy is unchanged keep their state. It changes
// nothing and returns an error when cfg cannot be applied.
//
// Reload applies the limits and rules; the listen addresses and the store
// are the caller's (config.RestartRequired lists the differences that a
// reload does not apply).
func (h *Handler) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("server: config is nil")
	}
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	st, err := h.build(cfg)
	if err != nil {
		return err
	}
	old := h.state.Swap(st)
	h.metrics.SetLimits(old.names, st.names)
	h.metrics.Applied(h.now(), true)
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "configuration reloaded",
		slog.String("source", cfg.Source()), slog.Int("limits", len(st.names)), slog.Int("rules", len(st.rules)))
	return nil
}

// Drain makes /readyz answer 503, so that load balancers stop sending new
// requests while the server shuts down; every other endpoint keeps
// working.
func (h *Handler) Drain() {
	h.draining.Store(true)
}

// build compiles a configuration into the state requests use.
func (h *Handler) build(cfg *config.Config) (*state, error) {
	st := &state{cfg: cfg, byName: make(map[string]*rule)}
	for _, l := range cfg.Limits() {
		st.names = append(st.names, l.Name())
	}
	tables, err := h.buildTables(cfg)
	if err != nil {
		return nil, err
	}
	st.tables = tables
	p, ok := cfg.Proxy()
	if !ok {
		return st, nil
	}
	st.trusted = p.TrustedProxies
	if p.Upstream != nil {
		st.proxy = h.newProxy(st, p.Upstream)
	}
	clientIP := &httplimit.ClientIP{TrustedProxies: p.TrustedProxies}
	opts := &httplimit.Options{
		ClientIP:   clientIP,
		OnDecision: h.countEvent,
		OnSettle:   h.countSettlement,
		OnDenied:   deny,
		Logger:     h.logger,
		Now:        h.now,
	}
	for i, rc := range p.Rules {
		r, err := h.buildRule(st, cfg, i, rc, opts, p.Body)
		if err != nil {
			return nil, err
		}
		st.rules = append(st.rules, r)
		if rc.Name != "" {
			st.byName[rc.Name] = r
		}
	}
	return st, nil
}

// countEvent records a rule's decision in the metrics.
func (h *Handler) countEvent(ev *httplimit.Event) {
	now := h.now()
	if h.dlog != nil {
		h.logEvent(ev, now)
	}
	if h.tracing != nil {
		h.traceEvent(ev)
	}
	for i := range ev.Results {
		r := &ev.Results[i]
		if !r.Applied || (r.Err != nil && r.Decision == (sluice.Decision{})) {
			continue
		}
		h.record(now, r.Policy.Name, r.Key, r.Decision, r.Shadow)
	}
}

// match returns the first rule that selects a request with the given
// method and path, or nil.
func (st *state) match(method, path string) *rule {
	for _, r := range st.rules {
		if r.cfg.Match.Matches(method, path) {
			return r
		}
	}
	return nil
}

func (h *Handler) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// pinger is a store that can check that its backend answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// StoreHealth is what a check of the store's backend found.
type StoreHealth struct {
	// Masters is how many Redis masters hold the store's keys: 1 for a
	// single Redis, the masters that own hash slots on Redis Cluster.
	Masters int
	// Down names the masters that cannot decide now.
	Down []string
	// Err is the first failure; nil exactly when Down is empty.
	Err error
}

// checkStore checks the store's backend; ok is false for a store that has
// none (in process).
func (h *Handler) checkStore(ctx context.Context, timeout time.Duration) (sh StoreHealth, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if h.health != nil {
		return h.health(ctx), true
	}
	if p, ok := h.raw.(pinger); ok {
		sh = StoreHealth{Masters: 1}
		if sh.Err = p.Ping(ctx); sh.Err != nil {
			sh.Down = []string{"the store"}
		}
		return sh, true
	}
	return StoreHealth{}, false
}

// readyTimeout bounds the store check of /readyz.
const readyTimeout = 2 * time.Second

// serveReadyz answers 200 when the service can decide: a configuration is
// loaded and the store answers, or its failure policy decides in its place,
// or some of the Redis Cluster masters answer (docs/operations.md, "Health
// and readiness").
func (h *Handler) serveReadyz(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	body := map[string]any{"config": st.cfg.Source(), "limits": len(st.names)}
	if h.draining.Load() {
		body["status"] = "draining"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"] = "ready"
	if h.circuit != nil {
		body["circuit"] = h.circuit()
	}
	sh, ok := h.checkStore(r.Context(), readyTimeout)
	if !ok {
		writeJSON(w, http.StatusOK, body)
		return
	}
	if sh.Masters > 1 {
		body["masters"] = sh.Masters
	}
	if sh.Err == nil {
		body["store"] = "ok"
		writeJSON(w, http.StatusOK, body)
		return
	}
	s := st.cfg.Store()
	body["on_error"] = string(s.OnError)
	if len(sh.Down) < sh.Masters {
		// Redis still decides the keys of the masters that answer; every
		// instance sees the same cluster, so taking this one out of
		// rotation would help none of the others' keys.
		body["status"] = "degraded"
		body["store"] = "partly unreachable"
		body["masters_down"] = sh.Down
		writeJSON(w, http.StatusOK, body)
		return
	}
	body["store"] = "unreachable"
	if s.OnError == config.OnErrorFail {
		body["status"] = "store unreachable"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"] = "degraded"
	writeJSON(w, http.StatusOK, body)
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeEncoded(w, status, "application/json", v, `{"error":"encoding the response failed"}`)
}

// writeEncoded writes v encoded as JSON, with status and contentType, not
// to be cached; when v cannot be encoded it writes fallback with status
// 500.
func writeEncoded(w http.ResponseWriter, status int, contentType string, v any, fallback string) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(fallback)
	}
	b = append(b, '\n')
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError writes {"error": msg} with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// logEvent writes a rule's decision (forward-auth or the proxy) to the
// decision log, when its request carries a decisionlog.Decision.
func (h *Handler) logEvent(ev *httplimit.Event, now time.Time) {
	dl := decisionlog.From(ev.Request.Context())
	if dl == nil {
		return
	}
	rec := decisionlog.Record{Time: dl.At, Order: dl.Order, Door: dl.Door, Rule: dl.Rule, Limits: make([]decisionlog.Entry, 0, len(ev.Results))}
	for i := range ev.Results {
		r := &ev.Results[i]
		if !r.Applied || r.Err != nil {
			continue
		}
		rec.Limits = append(rec.Limits, decisionlog.Entry{Limit: r.Policy.Name, Key: r.Key, Cost: r.Cost, Outcome: metrics.Outcome(r.Decision, r.Shadow), At: dl.AtOf(r.Policy.Name, r.Key), Order: dl.OrderOf(r.Policy.Name, r.Key)})
	}
	h.writeDecision(&rec, now)
}

// writeDecision writes rec to the decision log, at the time the store
// decided at (Record.Stamp), or now when no store call set it (every
// limit refused before the store: a cost above the capacity).
func (h *Handler) writeDecision(rec *decisionlog.Record, now time.Time) {
	if len(rec.Limits) == 0 {
		return
	}
	rec.Stamp(now)
	h.dlog.Write(rec)
}

// withDecision returns r carrying a decisionlog.Decision of door and rule
// when the decision log is on, and r itself otherwise.
func (h *Handler) withDecision(r *http.Request, door string, ru *rule) *http.Request {
	if h.dlog == nil {
		return r
	}
	return r.WithContext(decisionlog.With(r.Context(), &decisionlog.Decision{Door: door, Rule: ru.cfg.Name}))
}

// traceEvent records a rule's decision on its request's span.
func (h *Handler) traceEvent(ev *httplimit.Event) {
	ctx := ev.Request.Context()
	deciding := ""
	for i := range ev.Results {
		r := &ev.Results[i]
		if !r.Applied || r.Err != nil {
			continue
		}
		h.tracing.Limit(ctx, r.Policy.Name, r.Key, r.Cost, metrics.Outcome(r.Decision, r.Shadow), r.Decision)
		if deciding == "" && !r.Decision.Allowed && !r.Shadow {
			deciding = r.Policy.Name
		}
	}
	h.tracing.Decision(ctx, "", deciding, ev.Decision)
}
