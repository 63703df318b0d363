package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/buildinfo"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/internal/service/tlsauth"
	"github.com/sluicehq/sluice/internal/service/tracing"
)

const serveUsage = `Usage: sluice serve [--config FILE] [flags]

Runs the Sluice service: the decision API (POST /v1/check), forward-auth
(/v1/forward-auth), the rate-limiting reverse proxy, /healthz, /readyz and
the admin endpoints (/metrics, the status page) on listen.http (the admin
endpoints on listen.admin when it is set), and Envoy's rate limit service
(gRPC) on listen.grpc. docs/configuration.md describes the file, docs/operations.md
running the service.

Flags:
  --config FILE        the configuration file; without it, the built-in
                       default: the memory store, one limit "demo" and the
                       HTTP API on 127.0.0.1:8080
  --http ADDR          listen on ADDR (host:port) instead of listen.http;
                       port 0 picks a free port
  --grpc ADDR          serve Envoy's rate limit service on ADDR instead of
                       listen.grpc
  --admin ADDR         serve the admin endpoints (status page, /v1/status,
                       /v1/explain, /metrics) on ADDR instead of
                       listen.admin; listen.http then serves only the
                       decision API, forward-auth, the proxy and the probes
  --log-format text|json
                       the format of the log on standard error (default text)
  --log-level LEVEL    debug, info, warn or error (default info); debug logs
                       one line per denial
  --watch DUR          how often to look for a changed configuration file,
                       and for changed listen.tls files (default 1s; 0
                       reloads on SIGHUP only)
  --shutdown-timeout DUR
                       how long requests in flight may take to finish once
                       shutdown starts (default 10s); those still running
                       then are cut, and serve exits with status 1
  --drain-delay DUR    on shutdown, keep serving this long with /readyz
                       answering 503 before closing the listeners, so that
                       load balancers stop sending first (default 0)
  --read-timeout DUR   the longest time to read one request, body included
                       (default 1m; 0 means no limit): the bound of the
                       proxy's uploads
  --check-read-timeout DUR
                       the longest time to read the body of a POST
                       /v1/check, at most 64 KiB (default 10s; 0 means
                       --read-timeout alone); one that has not arrived by
                       then is answered 408
  --read-header-timeout DUR
                       the longest time to read one request's headers
                       (default 10s), so that slow clients cannot hold
                       connections open
  --idle-timeout DUR   close a keep-alive connection idle this long
                       (default 2m)
  --max-keys N         memory store (and on_error: local): the most
                       (limit, key) pairs kept (default 1000000; 0: no cap)
  --decision-log FILE  write each decision of /v1/check, forward-auth, the
                       proxy and Envoy's rate limit service to FILE as a
                       JSON line, for sluice simulate --replay
                       (docs/operations.md, "Decision log"); off by
                       default. The file's decision_log section sets the
                       same; each of these flags wins over its key
  --decision-log-sample R
                       the share of keys whose decisions are written, in
                       (0, 1] (default 1): by key, so a key's whole
                       sequence is kept
  --decision-log-key-file FILE
                       write keys as HMAC-SHA-256 hashes under the secret
                       in FILE (at least 16 bytes) instead of as they are
  --decision-log-max-size MiB
                       rotate the log at this size, 1 to 1048576 (default
                       100); FILE.1 is the newest rotated file
  --decision-log-files N
                       rotated files kept, 1 to 1000 (default 5)
  --trace-keys         with tracing on, record keys in spans as they are
                       (sluice.key) instead of a hash of each (sluice.key_hash)
  --ready-file FILE    once listening, write the bound addresses to FILE as
                       JSON, {"http":"127.0.0.1:8080","grpc":"","admin":"",
                       "pid":1234} ("" for a listener that is off); removed
                       on exit
  --envoy-env          configure the service as envoyproxy/ratelimit is, from
                       its environment variables (PORT, GRPC_PORT,
                       REDIS_URL, RUNTIME_ROOT, CONFIG_TYPE, ...), instead
                       of --config; docs/envoy.md lists every variable and
                       what Sluice does with it

Signals:
  SIGHUP               reload the configuration file, and read the
                       listen.tls files again
  SIGTERM, SIGINT      shut down gracefully; a second one ends at once
`

// HTTP server limits; see serveUsage.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultCheckReadTimeout  = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	maxHeaderBytes           = 64 << 10
)

// serveFlags are the flags of sluice serve.
type serveFlags struct {
	config          string
	http, grpc      string
	admin           string
	logFormat       string
	logLevel        string
	watch           time.Duration
	shutdownTimeout time.Duration
	drainDelay      time.Duration
	readTimeout     time.Duration
	checkReadTime   time.Duration
	readHeaderTime  time.Duration
	idleTimeout     time.Duration
	maxKeys         int
	readyFile       string
	decisionLog     string
	dlogSample      float64
	dlogKeyFile     string
	dlogMaxSize     int64
	dlogFiles       int
	traceKeys       bool
	// getenv, when set, is the environment tracing reads (--envoy-env's),
	// and traceService the traces' service.name; else os.Getenv, sluice.
	getenv       func(string) string
	traceService string
	envoyEnv     bool
	// logLevelSet and logFormatSet report flags given on the command
	// line, which win over LOG_LEVEL and LOG_FORMAT with --envoy-env.
	logLevelSet, logFormatSet bool
	// dlogSet names the --decision-log flags given on the command line,
	// which win over the decision_log section.
	dlogSet map[string]bool
}

func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := &serveFlags{}
	fs.StringVar(&f.config, "config", "", "the configuration file")
	fs.StringVar(&f.http, "http", "", "HTTP listen address")
	fs.StringVar(&f.grpc, "grpc", "", "gRPC listen address")
	fs.StringVar(&f.admin, "admin", "", "admin listen address")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.watch, "watch", time.Second, "configuration file polling interval")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "graceful shutdown deadline")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "time to answer /readyz 503 before closing listeners")
	fs.DurationVar(&f.readTimeout, "read-timeout", time.Minute, "time to read a whole request")
	fs.DurationVar(&f.checkReadTime, "check-read-timeout", defaultCheckReadTimeout, "time to read the body of a POST /v1/check")
	fs.DurationVar(&f.readHeaderTime, "read-header-timeout", defaultReadHeaderTimeout, "time to read a request's headers")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", defaultIdleTimeout, "time a keep-alive connection may stay idle")
	fs.IntVar(&f.maxKeys, "max-keys", defaultMaxKeys, "memory store key cap")
	fs.StringVar(&f.readyFile, "ready-file", "", "file to write the bound addresses to")
	fs.StringVar(&f.decisionLog, "decision-log", "", "file to write decisions to")
	fs.Float64Var(&f.dlogSample, "decision-log-sample", 1, "share of keys logged")
	fs.StringVar(&f.dlogKeyFile, "decision-log-key-file", "", "secret for hashing keys")
	fs.Int64Var(&f.dlogMaxSize, "decision-log-max-size", 100, "rotation size in MiB")
	fs.IntVar(&f.dlogFiles, "decision-log-files", 5, "rotated files kept")
	fs.BoolVar(&f.traceKeys, "trace-keys", false, "record keys in clear in trace spans")
	fs.BoolVar(&f.envoyEnv, "envoy-env", false, "configure from envoyproxy/ratelimit's environment variables")
	if err := parseFlags(fs, "serve", "serve", serveUsage, args); err != nil {
		return nil, err
	}
	f.dlogSet = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		f.logLevelSet = f.logLevelSet || fl.Name == "log-level"
		f.logFormatSet = f.logFormatSet || fl.Name == "log-format"
		if strings.HasPrefix(fl.Name, "decision-log") {
			f.dlogSet[fl.Name] = true
		}
	})
	if f.envoyEnv && f.config != "" {
		return nil, usageErrorf("serve", "serve: --envoy-env and --config exclude each other: the environment describes the whole service")
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("serve", "serve: unexpected argument %q (flags only; the file is --config FILE)", fs.Arg(0))
	}
	switch f.logFormat {
	case "text", "json":
	default:
		return nil, usageErrorf("serve", "serve: --log-format must be text or json, got %q", f.logFormat)
	}
	if _, err := parseLevel(f.logLevel); err != nil {
		return nil, usageErrorf("serve", "serve: --log-level: %v", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"watch", f.watch}, {"shutdown-timeout", f.shutdownTimeout}, {"drain-delay", f.drainDelay}, {"read-timeout", f.readTimeout}, {"check-read-timeout", f.checkReadTime}, {"read-header-timeout", f.readHeaderTime}, {"idle-timeout", f.idleTimeout}} {
		if d.v < 0 {
			return nil, usageErrorf("serve", "serve: --%s must not be negative, got %v", d.name, d.v)
		}
	}
	// net/http reads 0 as "no limit" (or as ReadTimeout's), which would let
	// slow clients hold connections forever.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", f.readHeaderTime}, {"idle-timeout", f.idleTimeout}} {
		if d.v == 0 {
			return nil, usageErrorf("serve", "serve: --%s must be positive: without it slow clients could hold connections open", d.name)
		}
	}
	if !(f.dlogSample > 0 && f.dlogSample <= 1) {
		return nil, usageErrorf("serve", "serve: --decision-log-sample must be in (0, 1], got %v", f.dlogSample)
	}
	// The bounds of decision_log's max_size_mib and files.
	if f.dlogMaxSize < 1 || f.dlogMaxSize > 1<<20 {
		return nil, usageErrorf("serve", "serve: --decision-log-max-size must be 1 to 1048576 (MiB), got %d", f.dlogMaxSize)
	}
	if f.dlogFiles < 1 || f.dlogFiles > 1000 {
		return nil, usageErrorf("serve", "serve: --decision-log-files must be 1 to 1000, got %d", f.dlogFiles)
	}
	if f.maxKeys < 0 {
		return nil, usageErrorf("serve", "serve: --max-keys must not be negative, got %d", f.maxKeys)
	}
	for _, a := range []struct{ name, v string }{{"http", f.http}, {"grpc", f.grpc}, {"admin", f.admin}} {
		if a.v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" {
			return nil, usageErrorf("serve", "serve: --%s: %q is not an address host:port, like 127.0.0.1:8080 or :8080", a.name, a.v)
		}
	}
	return f, nil
}

// parseLevel returns the slog level with the given name.
func parseLevel(name string) (slog.Level, error) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level %q (want debug, info, warn or error)", name)
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	lv, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// runServe runs the service until ctx is done, then shuts it down
// gracefully.
func runServe(ctx context.Context, s streams, args []string) error {
	f, err := parseServeFlags(args, s.stderr)
	if err != nil {
		return err
	}
	if f.envoyEnv {
		return runEnvoyEnv(ctx, s, f)
	}
	logger := newLogger(s.stderr, f.logFormat, f.logLevel)
	if gogc, fromEnv := setServeGC(os.Getenv); fromEnv {
		logger.Debug("garbage collector: GOGC from the environment", "gogc", gogc)
	}

	cfg, src, err := loadInitial(f.config)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(s.stderr, p.String())
			}
			return &exitError{code: 1, err: fmt.Errorf("serve: %s has %s; the service did not start", displayName(f.config), problemCount(len(ce.Problems)))}
		}
		return fmt.Errorf("serve: %w", err)
	}
	svc, err := newService(cfg, f, logger)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer svc.closeStore()
	return svc.run(ctx, src)
}

// displayName names the configuration file at path in messages.
func displayName(path string) string {
	if path == "" {
		return config.DefaultSource
	}
	return path
}

// loadInitial loads the configuration file at path, or the built-in
// default when path is empty (its source is then nil).
func loadInitial(path string) (*config.Config, *source, error) {
	if path == "" {
		cfg, err := config.Default(formats)
		return cfg, nil, err
	}
	src, data, err := readSource(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Parse(path, data, formats)
	return cfg, src, err
}

// problemCount returns "1 problem" or "N problems".
func problemCount(n int) string {
	if n == 1 {
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", n)
}

// service is a running sluice serve: its servers, store and
// configuration.
type service struct {
	flags   *serveFlags
	logger  *slog.Logger
	started *config.Config // listen and store in use; a reload cannot change them
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	store   *openedStore
	// measured is the store with its metrics, the one every front door
	// decides with.
	measured sluice.Store
	handler  *server.Handler
	rls      *rls.Service   // nil without a gRPC listener
	health   *health.Server // nil without a gRPC listener
	tls      *serveTLS      // nil without listen.tls (tls.go)
	// tokens are listen.tokens_file's tokens in use (nil without the
	// file), which Envoy's rate limit service asks of its callers as the
	// decision API does; a reload replaces them.
	tokens atomic.Pointer[tlsauth.Tokens]
	// env is the envoyproxy/ratelimit mode (--envoy-env, envoyserve.go);
	// nil otherwise.
	env *envoyMode

	httpAddr, grpcAddr, adminAddr string // as configured or overridden
	build                         buildinfo.Info
	dlog                          *decisionlog.Log // nil without --decision-log
	tracing                       *tracing.Tracing // nil without OTEL_EXPORTER_OTLP_*ENDPOINT
	// running counts the HTTP handlers under way, so that a shutdown
	// that cuts some waits for them to end, and give back what they hold
	// (the proxy's concurrency leases), before the store closes.
	running handlers
	// requests is the base context of every HTTP request, ended once the
	// servers have shut down, so that handlers the servers no longer
	// track (the proxy's upgraded connections) end as well.
	requests    context.Context
	endRequests context.CancelFunc
}

func newService(cfg *config.Config, f *serveFlags, logger *slog.Logger) (*service, error) {
	envoy, err := buildEnvoy(cfg)
	if err != nil {
		return nil, err
	}
	s := &service{flags: f, logger: logger, started: cfg, reg: prometheus.NewRegistry()}
	s.requests, s.endRequests = context.WithCancel(context.Background())
	s.tokens.Store(cfg.Tokens())
	l := cfg.Listen()
	s.httpAddr, s.grpcAddr, s.adminAddr = l.HTTP, l.GRPC, l.Admin
	if f.admin != "" {
		s.adminAddr = f.admin
	}
	if f.http != "" {
		s.httpAddr = f.http
	}
	if f.grpc != "" {
		s.grpcAddr = f.grpc
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(s.reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.build = buildinfo.Read()
	build := s.build
	if err := m.Build(build); err != nil {
		return nil, err
	}
	// OpenTelemetry traces, when the environment or the configuration
	// asks for them (OTEL_EXPORTER_OTLP_ENDPOINT, tracing:): set up before
	// the store, whose Redis script calls it traces.
	getenv := f.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if s.tracing, err = tracing.Setup(context.Background(), tracing.Options{Getenv: getenv, Keys: f.traceKeys, Version: s.build.Version, ServiceName: f.traceService, Section: cfg.Tracing()}); err != nil {
		return nil, err
	}
	// With a decision log, the store tells the time of each decision, which
	// the log writes.
	dopts, dlogOn, err := decisionLogOptions(f, cfg)
	if err != nil {
		s.tracing.Shutdown(context.Background())
		return nil, err
	}
	var decided func(context.Context, sluice.Request, time.Time, uint64)
	if dlogOn {
		decided = decisionlog.Saw
	}
	st, err := openStore(cfg.Store(), f.maxKeys, logger, m, s.tracing.Redis(), decided)
	if err != nil {
		s.tracing.Shutdown(context.Background())
		return nil, err
	}
	s.store = st
	if err := m.ReadStore(st.gauges()); err != nil {
		st.close()
		return nil, err
	}
	// One measured store for every front door: the sluice_store_* series
	// count Envoy's decisions with the HTTP API's. With a decision log,
	// the store beneath records the time of each logged decision.
	base := st.store
	if dlogOn {
		if s.dlog, err = decisionlog.Open(dopts); err != nil {
			st.close()
			return nil, err
		}
		st.closers = append(st.closers, s.dlog.Close)
		if err := m.DecisionLog(s.dlog.Written, s.dlog.Dropped); err != nil {
			st.close()
			return nil, err
		}
		base = decisionlog.Store(base)
	}
	// The store calls get child spans.
	if s.tracing != nil {
		st.closers = append(st.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.tracing.Shutdown(ctx)
		})
		logger.Info("tracing: exporting OpenTelemetry traces over OTLP")
	}
	base = s.tracing.Store(base, string(cfg.Store().Backend))
	s.measured = m.Store(base)
	// Plans and overrides (dynamic.go), closed with the store.
	dyn := openDynamic(cfg.Store(), logger)
	st.closers = append(st.closers, dyn.close)
	// One resolver of (limit, key) to policy for every door: an override
	// in force, else the limit's own.
	resolver := engine.NewResolver(dyn.overrides, time.Now)
	h, err := server.New(cfg, s.measured, dyn.options(server.Options{
		Logger:           logger,
		Registry:         s.reg,
		Metrics:          m,
		Resolver:         resolver,
		OtherLimits:      s.envoyLimit,
		OtherPolicies:    s.envoyPolicies,
		CircuitState:     st.circuit,
		LocalRefusals:    st.local,
		StoreHealth:      st.health,
		ReadTimeout:      f.readTimeout,
		CheckReadTimeout: f.checkReadTime,
		Build:            build,
		DecisionLog:      s.dlog,
		Tracing:          s.tracing,
	}))
	if err != nil {
		st.close()
		return nil, err
	}
	s.handler = h
	if s.tls, err = s.newServeTLS(cfg); err != nil {
		st.close()
		return nil, err
	}
	if s.grpcAddr != "" {
		s.rls = rls.New(s.measured, envoy, rls.Options{OnDecision: s.rlsDecision, OnPenalty: s.metrics.Penalty, Resolver: resolver, DecisionLog: s.dlog})
		s.health = health.NewServer()
	}
	return s, nil
}

// envoyLimit returns the policy of the limit of Envoy's rate limit service
// that admin overrides name name (rls.Config.Limit); false without the
// service.
func (s *service) envoyLimit(name string) (sluice.Policy, bool) {
	if s.rls == nil {
		return sluice.Policy{}, false
	}
	return s.rls.Config().Limit(name)
}

// envoyPolicies returns the policies of the envoy section's limits, for
// the usage metrics.
func (s *service) envoyPolicies() []sluice.Policy {
	if s.rls == nil {
		return nil
	}
	return s.rls.Config().Policies()
}

// rlsDecision counts one decision of Envoy's rate limit service; it is
// the rls.Service's OnDecision.
func (s *service) rlsDecision(ev rls.Event) {
	outcome := ev.Outcome.String()
	if ev.Degraded {
		outcome = metrics.OutcomeDegraded
	}
	s.metrics.RLSDecision(ev.Domain, ev.Key, outcome)
}

func (s *service) closeStore() {
	if err := s.store.close(); err != nil {
		s.logger.Warn("closing the store failed", "error", err)
	}
}

// httpListener is one HTTP server of the service and where it listens.
type httpListener struct {
	name string // "http" or "admin", as in listen.*
	addr string
	srv  *http.Server
	ln   net.Listener
}

// listen opens the service's listeners: listen.http, and listen.admin and
// listen.grpc when set. With listen.admin, listen.http serves the public
// endpoints only and listen.admin the admin ones (package server).
func (s *service) listen() (hls []*httpListener, grpcLn net.Listener, err error) {
	defer func() {
		if err != nil {
			for _, l := range hls {
				if l.ln != nil {
					l.ln.Close()
				}
			}
		}
	}()
	hls = []*httpListener{{name: "http", addr: s.httpAddr}}
	hls[0].srv = s.newHTTPServer(s.handler)
	if s.adminAddr != "" {
		hls[0].srv.Handler = s.running.wrap(s.tracing.HTTP(s.handler.Public()))
		hls = append(hls, &httpListener{name: "admin", addr: s.adminAddr, srv: s.newHTTPServer(s.handler.Admin())})
	}
	if s.env != nil {
		hls[0].srv.Handler = s.envoyHandler(hls[0].srv.Handler)
		if ml := s.metricsListener(); ml != nil {
			hls = append(hls, ml)
		}
	}
	for _, l := range hls {
		s.tls.httpServer(l.name, l.srv)
		if l.ln, err = net.Listen("tcp", l.addr); err != nil {
			return hls, nil, fmt.Errorf("listen.%s: %w", l.name, err)
		}
	}
	if s.grpcAddr != "" {
		if grpcLn, err = net.Listen("tcp", s.grpcAddr); err != nil {
			return hls, nil, fmt.Errorf("listen.grpc: %w", err)
		}
	}
	return hls, grpcLn, nil
}

func (s *service) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           s.running.wrap(s.tracing.HTTP(h)),
		BaseContext:       func(net.Listener) context.Context { return s.requests },
		ReadHeaderTimeout: s.flags.readHeaderTime,
		ReadTimeout:       s.flags.readTimeout,
		IdleTimeout:       s.flags.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
}

// run serves until ctx is done or a listener fails, then shuts down.
func (s *service) run(ctx context.Context, src *source) error {
	cfg := s.started
	st := cfg.Store()
	s.logger.Info("starting", "version", s.build.Version, "revision", s.build.Revision, "go", s.build.GoVersion)
	s.logger.Info("configuration loaded", "source", cfg.Source(), "limits", len(cfg.Limits()), "store", string(st.Backend))
	if w, ok := cfg.LimitsNothing(); ok {
		s.logger.Warn(w.Message, "source", cfg.Source())
	}
	if st.Backend == config.RedisBackend {
		s.store.checkReachable(ctx, cfg, s.logger)
	}
	if !s.waitInitial(ctx) {
		s.logger.Info("stopped before the first rate limit configuration arrived")
		return nil
	}

	hls, grpcLn, err := s.listen()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var gs *grpc.Server
	if grpcLn != nil {
		opts := append(rls.ServerOptions(), s.tls.grpcOptions()...)
		opts = append(opts, s.env.grpcOptions()...)
		var chain []grpc.UnaryServerInterceptor
		if s.tracing != nil {
			chain = append(chain, s.tracing.Unary())
		}
		chain = append(chain, tlsauth.TokenUnary(rls.ServiceName, s.tokens.Load), recoverUnary(s.logger))
		opts = append(opts, grpc.ChainUnaryInterceptor(chain...))
		gs = grpc.NewServer(opts...)
		s.rls.Register(gs)
		healthpb.RegisterHealthServer(gs, s.health)
	}

	// Reloads are read from SIGHUP and the file from here on.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	errc := make(chan error, len(hls)+1)
	servers, ready := s.start(hls, gs, grpcLn, errc)
	if s.flags.readyFile != "" {
		if err := writeReadyFile(s.flags.readyFile, ready); err != nil {
			s.logger.Error("writing the ready file failed", "file", s.flags.readyFile, "error", err)
		} else {
			defer os.Remove(s.flags.readyFile)
		}
	}

	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if s.env != nil {
		wg.Go(func() { s.watchEnvoy(wctx, hup) })
	} else {
		wg.Go(func() { s.watch(wctx, src, hup) })
	}
	wg.Go(func() { s.tls.watch(wctx, s.flags.watch) })

	var failed error
	select {
	case <-ctx.Done():
		s.logger.Info("shutting down", "timeout", s.flags.shutdownTimeout, "drain_delay", s.flags.drainDelay)
	case failed = <-errc:
		servers--
		s.logger.Error("a server failed; shutting down", "error", failed)
	}
	stopWatch()
	wg.Wait()

	s.handler.Drain()
	if s.env != nil {
		s.env.draining.Store(true)
	}
	if s.health != nil {
		s.health.Shutdown()
	}
	if failed == nil && s.flags.drainDelay > 0 {
		t := time.NewTimer(s.flags.drainDelay)
		<-t.C
	}
	cut := s.shutdown(hls, gs)
	for range servers {
		<-errc
	}
	// Handlers still running (those cut at the deadline, upgraded
	// connections, which Shutdown does not wait for) see their contexts
	// end and return, releasing their leases with a bound of their own
	// (httplimit.ReleaseTimeout); wait for them before the store closes
	// under them.
	s.endRequests()
	wctx, cancel := context.WithTimeout(context.Background(), httplimit.ReleaseTimeout+time.Second)
	if !s.running.wait(wctx) {
		s.logger.Warn("handlers still running after shutdown; the store closes under them")
	}
	cancel()
	s.logger.Info("stopped")
	switch {
	case failed != nil:
		return fmt.Errorf("serve: %w", failed)
	case cut:
		return &exitError{code: 1, err: fmt.Errorf("serve: shutdown: requests still in flight after --shutdown-timeout %v were cut", s.flags.shutdownTimeout)}
	}
	return nil
}

// start serves the HTTP listeners and the gRPC server gs (nil without
// one), each on its own goroutine that sends its end to errc, and logs
// where they listen. It returns how many it started and the bound
// addresses.
func (s *service) start(hls []*httpListener, gs *grpc.Server, grpcLn net.Listener, errc chan<- error) (servers int, ready readyInfo) {
	ready.PID = os.Getpid()
	for _, l := range hls {
		servers++
		go func() { errc <- fmt.Errorf("%s server: %w", l.name, serveHTTP(l)) }()
		bound := l.ln.Addr().String()
		s.logger.Info("listening", "protocol", l.name, "addr", bound)
		switch l.name {
		case "admin":
			ready.Admin = bound
		case "metrics":
			ready.Metrics = bound
		default:
			ready.HTTP = bound
		}
	}
	if gs != nil {
		servers++
		go func() { errc <- fmt.Errorf("grpc server: %w", gs.Serve(grpcLn)) }()
		ready.GRPC = grpcLn.Addr().String()
		s.logger.Info("listening", "protocol", "grpc", "addr", ready.GRPC, "service", "envoy.service.ratelimit.v3.RateLimitService")
	}
	s.logger.Info("admin endpoints", "where", server.AdminEndpoints(s.handler.Config(), s.adminAddr != ""))
	return servers, ready
}

// shutdown stops the servers: they stop accepting, and requests in
// flight get until the shutdown timeout to finish. It reports whether
// some were still running and had to be cut.
func (s *service) shutdown(hls []*httpListener, gs *grpc.Server) (cut bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.flags.shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, l := range hls {
		wg.Go(func() {
			if err := l.srv.Shutdown(ctx); err != nil {
				l.srv.Close()
				mu.Lock()
				cut = true
				mu.Unlock()
				s.logger.Warn("requests still in flight at the shutdown deadline were cut", "listener", l.name, "error", err)
			}
		})
	}
	if gs != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				gs.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
			case <-ctx.Done():
				gs.Stop()
				<-done
				mu.Lock()
				cut = true
				mu.Unlock()
				s.logger.Warn("calls still in flight at the shutdown deadline were cut", "listener", "grpc")
			}
		})
	}
	wg.Wait()
	return cut
}

// recoverUnary turns a panic in a gRPC method into an Internal error and
// an error log line, as net/http does for HTTP handlers, so that one bad
// request cannot end the process.
func recoverUnary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("grpc: a method panicked", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

// readyInfo is the content of the --ready-file: the bound addresses ("" for
// a listener that is off) and the process id.
type readyInfo struct {
	HTTP  string `json:"http"`
	GRPC  string `json:"grpc"`
	Admin string `json:"admin"`
	// Metrics is the listener of USE_PROMETHEUS with --envoy-env.
	Metrics string `json:"metrics,omitempty"`
	PID     int    `json:"pid"`
}

// writeReadyFile writes the bound addresses to path atomically: a reader
// sees no file or the whole of it.
func writeReadyFile(path string, ri readyInfo) error {
	b, err := json.Marshal(ri)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sluice-ready-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// handlers counts the HTTP handlers that are running. The zero value
// counts none.
type handlers struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

// wrap returns h counted by c.
func (c *handlers) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
		defer c.done()
		h.ServeHTTP(w, r)
	})
}

func (c *handlers) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// wait returns true once no handler runs, or false when ctx ends first.
func (c *handlers) wait(ctx context.Context) bool {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return true
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// decisionLogOptions returns the options of the decision log: cfg's
// decision_log section, with each --decision-log flag given on the
// command line in place of its key. on is false when neither names a
// file: the log is off.
func decisionLogOptions(f *serveFlags, cfg *config.Config) (opts decisionlog.Options, on bool, err error) {
	if l := cfg.DecisionLog(); l != nil {
		opts = decisionlog.Options{Path: l.Path, Sample: l.Sample, Secret: l.Key, MaxSize: l.MaxSizeMiB << 20, MaxFiles: l.Files}
	}
	set := f.dlogSet
	if set["decision-log"] {
		opts.Path = f.decisionLog
	}
	if set["decision-log-sample"] {
		opts.Sample = f.dlogSample
	}
	if set["decision-log-max-size"] {
		opts.MaxSize = f.dlogMaxSize << 20
	}
	if set["decision-log-files"] {
		opts.MaxFiles = f.dlogFiles
	}
	if opts.Path == "" {
		if f.dlogKeyFile != "" {
			return opts, false, usageErrorf("serve", "serve: --decision-log-key-file needs --decision-log FILE (or decision_log.path in the configuration)")
		}
		return opts, false, nil
	}
	if f.dlogKeyFile != "" {
		b, err := os.ReadFile(f.dlogKeyFile)
		if err != nil {
			return opts, false, fmt.Errorf("--decision-log-key-file: %w", err)
		}
		if opts.Secret = []byte(strings.TrimSpace(string(b))); len(opts.Secret) < 16 {
			return opts, false, fmt.Errorf("--decision-log-key-file %s: the secret is %d bytes, want at least 16", f.dlogKeyFile, len(opts.Secret))
		}
	}
	return opts, true, nil
}
