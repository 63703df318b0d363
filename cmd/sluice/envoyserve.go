package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// envoyMode is what sluice serve --envoy-env adds to the service: where
// the rate limit configuration comes from (the runtime directory, or
// xDS), the reference's HTTP endpoints and its metrics listener.
type envoyMode struct {
	env  *envoyEnv
	opts envoyOptions
	// loaded reports that a rate limit configuration is in use; first is
	// closed when the first one is applied.
	loaded    atomic.Bool
	first     chan struct{}
	firstOnce sync.Once
	// draining is set when shutdown starts: /healthcheck then fails.
	draining atomic.Bool
	// sum is the digest of the runtime directory last read (FILE mode).
	sum [32]byte
}

// runEnvoyEnv is sluice serve --envoy-env: the service configured by
// envoyproxy/ratelimit's environment variables.
func runEnvoyEnv(ctx context.Context, s streams, f *serveFlags) error {
	env, warnings, err := parseEnvoyEnv(os.LookupEnv)
	var ee *envError
	if errors.As(err, &ee) {
		for _, p := range ee.problems {
			fmt.Fprintln(s.stderr, "sluice: "+p)
		}
		return &exitError{code: 1, err: fmt.Errorf("serve --envoy-env: %s in the environment; the service did not start", problemCount(len(ee.problems)))}
	}
	if err != nil {
		return fmt.Errorf("serve --envoy-env: %w", err)
	}
	if !f.logLevelSet {
		f.logLevel = env.logLevel
	}
	if !f.logFormatSet {
		f.logFormat = env.logFormat
	}
	logger := newLogger(s.stderr, f.logFormat, f.logLevel)
	for _, w := range warnings {
		logger.Warn(w)
	}
	data, err := env.sluiceYAML()
	if err != nil {
		return fmt.Errorf("serve --envoy-env: %w", err)
	}
	cfg, err := config.Parse(envoyEnvSource, data, formats)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(s.stderr, p.String())
			}
			return &exitError{code: 1, err: fmt.Errorf("serve --envoy-env: the environment has %s; the service did not start", problemCount(len(ce.Problems)))}
		}
		return fmt.Errorf("serve --envoy-env: %w", err)
	}
	m := &envoyMode{env: env, first: make(chan struct{}), opts: envoyOptions{headers: env.headers, headerNames: env.headerNames,
		countRefused: env.countRefused, shadowAll: env.shadowAll, quotaAll: env.quotaAll, dynamicMetadata: env.dynamicMetadata, merge: env.mergeDomains}}
	var initial *rls.Config
	if !env.xds {
		// FILE mode: the reference does not start with a configuration
		// it cannot load, nor does Sluice.
		c, sum, err := loadRuntimeDir(env.runtimeDir, env.ignoreDot, m.opts)
		if err != nil {
			var ce *config.Error
			if errors.As(err, &ce) {
				for _, p := range ce.Problems {
					fmt.Fprintln(s.stderr, p.String())
				}
				return &exitError{code: 1, err: fmt.Errorf("serve --envoy-env: the rate limit configuration under %s has %s; the service did not start", env.runtimeDir, problemCount(len(ce.Problems)))}
			}
			return &exitError{code: 1, err: fmt.Errorf("serve --envoy-env: %w", err)}
		}
		initial, m.sum = c, sum
	}
	var xdsConn *grpc.ClientConn
	if env.xds {
		if xdsConn, err = dialXDS(env.xdsClient); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("serve --envoy-env: %w", err)}
		}
		defer xdsConn.Close()
	}
	f.getenv, f.traceService = env.getenv, env.tracingService
	svc, err := newService(cfg, f, logger)
	if err != nil {
		return fmt.Errorf("serve --envoy-env: %w", err)
	}
	defer svc.closeStore()
	svc.env = m
	if env.grpcTLS != nil {
		if svc.tls, err = svc.newGRPCTLS(env.grpcTLS); err != nil {
			return fmt.Errorf("serve --envoy-env: %w", err)
		}
	}
	if initial != nil {
		svc.setEnvoy(initial, "runtime directory", env.runtimeDir)
	}
	if env.xds {
		// The subscription starts before the service listens: without
		// FORCE_START_WITHOUT_INITIAL_CONFIG, run waits for its first
		// configuration.
		xctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { svc.runXDS(xctx, xdsConn) })
		defer func() {
			cancel()
			wg.Wait()
		}()
	}
	return svc.run(ctx, nil)
}

// setEnvoy puts a rate limit configuration in use (from where, for the
// log).
func (s *service) setEnvoy(cfg *rls.Config, origin, where string) {
	s.rls.SetConfig(cfg)
	s.metrics.Applied(time.Now(), s.env.loaded.Load())
	s.env.loaded.Store(true)
	s.env.firstOnce.Do(func() { close(s.env.first) })
	s.logger.Info("rate limit configuration applied", "from", origin, "where", where, "domains", len(cfg.Domains()))
}

// newGRPCTLS puts the gRPC listener alone behind TLS
// (GRPC_SERVER_USE_TLS): the reference's HTTP port stays plain, as
// Envoy Gateway's probes expect.
func (s *service) newGRPCTLS(t *grpcServerTLS) (*serveTLS, error) {
	var names *tlsauth.Names
	if t.clientSAN != "" {
		n, err := tlsauth.ParseNames([]string{t.clientSAN})
		if err != nil {
			return nil, fmt.Errorf("GRPC_CLIENT_TLS_SAN: %w", err)
		}
		names = n
	}
	tm, err := s.metrics.TLS()
	if err != nil {
		return nil, err
	}
	srv, err := tlsauth.NewServer(tlsauth.Files{CertFile: t.cert, KeyFile: t.key, ClientCAFile: t.clientCA}, names, tlsauth.Options{
		Logger:   s.logger,
		OnLoad:   func(m *tlsauth.Material) { tm.Loaded(m.NotAfter()) },
		OnRefuse: tm.Refused,
	})
	if err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: %w", err)
	}
	m := srv.Material()
	s.logger.Info("TLS on the gRPC listener", "serial", m.Serial(), "not_after", m.NotAfter().UTC().Format(time.RFC3339),
		"client_certificates", m.ClientCAs != nil)
	return &serveTLS{srv: srv, grpcOnly: true}, nil
}

// grpcOptions returns the gRPC server options of the environment:
// connection ages and concurrent streams.
func (m *envoyMode) grpcOptions() []grpc.ServerOption {
	if m == nil {
		return nil
	}
	e := m.env
	opts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: e.maxConnAge, MaxConnectionAgeGrace: e.maxConnAgeGrace,
	}), grpc.ChainUnaryInterceptor(m.gateUnary)}
	if e.maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(e.maxStreams))
	}
	return opts
}

// handler returns the reference's endpoints on PORT (/healthcheck and
// /json) in front of next, Sluice's own public endpoints.
func (s *service) envoyHandler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", s.serveHealthcheck)
	mux.HandleFunc("/json", s.serveJSON)
	mux.Handle("/", next)
	return mux
}

// serveHealthcheck answers 200 OK while the service serves, and 500 once
// shutdown has started, before the first rate limit configuration when
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks for one, and while Redis
// has no master reachable when REDIS_HEALTH_CHECK_ACTIVE_CONNECTION does.
func (s *service) serveHealthcheck(w http.ResponseWriter, r *http.Request) {
	m := s.env
	why := ""
	switch {
	case m.draining.Load():
		why = "shutting down"
	case m.env.healthyWithConfig && !m.loaded.Load():
		why = "no rate limit configuration loaded yet"
	case m.env.redisHealth && s.store.health != nil:
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		h := s.store.health(ctx)
		cancel()
		if h.Err != nil {
			why = "Redis is unreachable"
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why != "" {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, why+"\n")
		return
	}
	io.WriteString(w, "OK")
}

// maxJSONBody bounds the body of a request to /json.
const maxJSONBody = 1 << 20

// serveJSON is the reference's /json: a RateLimitRequest in protobuf's
// JSON form, decided as over gRPC, answered with the RateLimitResponse in
// the same form, 200 when OK and 429 when OVER_LIMIT.
func (s *service) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "/json takes POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !s.env.loaded.Load() {
		http.Error(w, "no rate limit configuration loaded yet", http.StatusServiceUnavailable)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "the body is not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.rls.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// metricsListener returns the listener of USE_PROMETHEUS (Sluice's
// series at PROMETHEUS_ADDR and PROMETHEUS_PATH), or nil.
func (s *service) metricsListener() *httpListener {
	if s.env == nil || s.env.env.promAddr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle(s.env.env.promPath, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return &httpListener{name: "metrics", addr: s.env.env.promAddr, srv: s.newHTTPServer(mux)}
}

// watchRuntime reloads the runtime directory (FILE mode) every --watch
// and on SIGHUP (reload), until ctx is done: a change is applied as a
// reload of the file is, and a directory with problems changes nothing.
func (s *service) watchRuntime(ctx context.Context, reload <-chan struct{}) {
	e := s.env.env
	var tick <-chan time.Time
	if s.flags.watch > 0 {
		t := time.NewTicker(s.flags.watch)
		defer t.Stop()
		tick = t.C
	}
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-reload:
			force = true
		}
		files, sum, err := readRuntimeDir(e.runtimeDir, e.ignoreDot)
		if err != nil {
			if sum != s.env.sum || force {
				s.logger.Error("reload failed: cannot read the runtime directory; the running configuration stays", "error", err)
				s.metrics.ReloadFailed()
			}
			s.env.sum = sum
			continue
		}
		if sum == s.env.sum && !force {
			continue
		}
		s.env.sum = sum
		sources, err := parseRuntimeFiles(files)
		var cfg *rls.Config
		if err == nil {
			cfg, err = compileDomains(sources, s.env.opts)
		}
		if err != nil {
			s.metrics.ReloadFailed()
			s.logProblems("reload refused; the running configuration stays", err)
			continue
		}
		s.setEnvoy(cfg, "runtime directory", e.runtimeDir)
	}
}

// logProblems logs each problem of err (a *config.Error), then msg.
func (s *service) logProblems(msg string, err error) {
	var ce *config.Error
	if !errors.As(err, &ce) {
		s.logger.Error(msg, "error", err)
		return
	}
	for _, p := range ce.Problems {
		s.logger.Error("configuration problem", "problem", p.String())
	}
	s.logger.Error(msg, "problems", len(ce.Problems))
}

// waitInitial waits, in xDS mode without
// FORCE_START_WITHOUT_INITIAL_CONFIG, for the first rate limit
// configuration before the service listens, as the reference does; it
// returns at once otherwise. It reports false when ctx ended first.
func (s *service) waitInitial(ctx context.Context) bool {
	if s.env == nil || !s.env.env.xds || s.env.env.forceStart {
		return true
	}
	s.logger.Info("waiting for the first rate limit configuration over xDS before listening", "server", s.env.env.xdsClient.url)
	select {
	case <-s.env.first:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchEnvoy is the watcher of --envoy-env: SIGHUP reads the TLS files
// again and, in FILE mode, the runtime directory, which is also looked at
// every --watch.
func (s *service) watchEnvoy(ctx context.Context, hup <-chan os.Signal) {
	reload := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	if !s.env.env.xds {
		wg.Go(func() { s.watchRuntime(ctx, reload) })
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.tls.check()
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}
}
