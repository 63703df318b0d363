package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// serveTLS is the transport security of sluice serve's listeners
// (listen.tls): one tlsauth.Server whose material every listener uses and
// which rotates it live (its metrics are internal/service/metrics.TLS).
type serveTLS struct {
	srv *tlsauth.Server
	// grpcOnly leaves the HTTP listeners plain (GRPC_SERVER_USE_TLS with
	// --envoy-env, as envoyproxy/ratelimit does).
	grpcOnly bool
}

// newServeTLS loads listen.tls's files, or returns nil without TLS.
func (s *service) newServeTLS(cfg *config.Config) (*serveTLS, error) {
	t := cfg.Listen().TLS
	if t == nil {
		return nil, nil
	}
	tm, err := s.metrics.TLS()
	if err != nil {
		return nil, err
	}
	st := &serveTLS{}
	srv, err := tlsauth.NewServer(t.Files(), t.Names(), tlsauth.Options{
		Logger:   s.logger,
		OnLoad:   func(m *tlsauth.Material) { tm.Loaded(m.NotAfter()) },
		OnRefuse: tm.Refused,
	})
	if err != nil {
		return nil, fmt.Errorf("listen.tls: %w", err)
	}
	st.srv = srv
	m := srv.Material()
	if left := time.Until(m.NotAfter()); left < tlsauth.ExpiryWarning {
		s.logger.Warn("the TLS certificate expires soon", "serial", m.Serial(), "left", left.Round(time.Minute).String())
	}
	s.logger.Info("TLS on every listener", "serial", m.Serial(), "not_after", m.NotAfter().UTC().Format("2006-01-02T15:04:05Z"),
		"client_certificates", m.ClientCAs != nil, "client_names", t.Names().Len(), "min_version", "1.2")
	return st, nil
}

// httpServer puts an HTTP server of the listener named name behind TLS:
// its handler behind the client names check, and its TLS configuration
// (HTTP/2 and HTTP/1.1).
func (t *serveTLS) httpServer(name string, srv *http.Server) {
	if t == nil || t.grpcOnly {
		return
	}
	srv.Handler = t.srv.Guard("listen." + name).HTTP(srv.Handler)
	srv.TLSConfig = t.srv.Config("h2", "http/1.1")
}

// serve serves srv on l: over TLS when the server has a TLS configuration.
func serveHTTP(l *httpListener) error {
	if l.srv.TLSConfig != nil {
		return l.srv.ServeTLS(l.ln, "", "")
	}
	return l.srv.Serve(l.ln)
}

// grpcOptions returns the gRPC server options of TLS: the credentials and
// the client names check.
func (t *serveTLS) grpcOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	g := t.srv.Guard("listen.grpc")
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(t.srv.Config("h2"))),
		grpc.ChainUnaryInterceptor(g.Unary()),
		grpc.ChainStreamInterceptor(g.Stream()),
	}
}

// watch looks at the TLS files every interval until ctx is done.
func (t *serveTLS) watch(ctx context.Context, every time.Duration) {
	if t != nil {
		t.srv.Watch(ctx, every)
	}
}

// check reads the TLS files again at once (SIGHUP).
func (t *serveTLS) check() {
	if t != nil {
		t.srv.Check(true)
	}
}

// prepare loads the TLS files and names of a reloaded configuration, for
// commit once the rest of it applies. Turning TLS on or off needs a
// restart (config.RestartRequired says so); prepare then keeps the
// running setup.
func (t *serveTLS) prepare(cfg *config.Config) (*tlsauth.Prepared, error) {
	next := cfg.Listen().TLS
	if t == nil || next == nil {
		return nil, nil
	}
	p, err := t.srv.Prepare(next.Files(), next.Names())
	if err != nil {
		return nil, fmt.Errorf("listen.tls: %w", err)
	}
	return p, nil
}

// commit puts prepared TLS material in use.
func (t *serveTLS) commit(p *tlsauth.Prepared) {
	if t != nil && p != nil {
		t.srv.Apply(p)
	}
}
