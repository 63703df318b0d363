package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/service/xdsconfig"
)

// xdsDomains converts RateLimitConfig resources to domain documents and
// checks each as a file of the runtime directory is checked; problems
// name the resource and the path in it.
func xdsDomains(resources []*rlsconfv3.RateLimitConfig) ([]namedDomains, error) {
	var out []namedDomains
	var problems []config.Problem
	for _, r := range resources {
		name := fmt.Sprintf("RateLimitConfig %q", r.GetName())
		add := func(path, format string, args ...any) {
			problems = append(problems, config.Problem{File: name, Path: path, Message: fmt.Sprintf(format, args...)})
		}
		unknownFields(r.ProtoReflect(), "", "RateLimitConfig", add)
		d := rls.Domain{Domain: r.GetDomain(), Descriptors: xdsDescriptors(r.GetDescriptors(), "descriptors", add)}
		for _, p := range rls.Validate([]rls.Domain{d}, "") {
			add(strings.TrimPrefix(p.Path, "[0]."), "%s", p.Message)
		}
		out = append(out, namedDomains{name: name, domains: []rls.Domain{d}})
	}
	if len(problems) > 0 {
		return nil, &config.Error{Problems: problems}
	}
	return out, nil
}

// xdsDescriptors converts the descriptors at path (descriptors, or
// descriptors[i].descriptors), with the fields that their Go type does
// not know (descriptorFields).
func xdsDescriptors(ds []*rlsconfv3.RateLimitDescriptor, path string, add problemFunc) []rls.Descriptor {
	var out []rls.Descriptor
	for i, d := range ds {
		p := fmt.Sprintf("%s[%d]", path, i)
		nd := rls.Descriptor{Key: d.GetKey(), Value: d.GetValue(), ShadowMode: d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(), Descriptors: xdsDescriptors(d.GetDescriptors(), p+".descriptors", add)}
		descriptorFields(d.ProtoReflect().GetUnknown(), &nd, p, add)
		if pol := d.GetRateLimit(); pol != nil {
			unknownFields(pol.ProtoReflect(), p+".rate_limit", "RateLimitPolicy", add)
			rl := &rls.RateLimit{RequestsPerUnit: pol.GetRequestsPerUnit(), Unlimited: pol.GetUnlimited(), Name: pol.GetName()}
			if pol.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
				rl.Unit = strings.ToLower(pol.GetUnit().String())
			}
			for j, r := range pol.GetReplaces() {
				unknownFields(r.ProtoReflect(), fmt.Sprintf("%s.rate_limit.replaces[%d]", p, j), "RateLimitReplace", add)
				rl.Replaces = append(rl.Replaces, rls.Replace{Name: r.GetName()})
			}
			nd.RateLimit = rl
		}
		out = append(out, nd)
	}
	return out
}

// problemsText returns the problems of err one per line, for a NACK.
func problemsText(err error) string {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	lines := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// applyXDS checks and applies the resources of one xDS response: the
// whole set, as a reload. An invalid set changes nothing and returns
// the problems, which the client sends back in its NACK.
func (s *service) applyXDS(version string, resources []*rlsconfv3.RateLimitConfig) error {
	sources, err := xdsDomains(resources)
	var cfg *rls.Config
	if err == nil {
		cfg, err = compileDomains(sources, s.env.opts)
	}
	if err != nil {
		s.metrics.ReloadFailed()
		s.logProblems("xDS update refused; the running configuration stays", err)
		return errors.New(problemsText(err))
	}
	s.setEnvoy(cfg, "xDS", "version "+version)
	return nil
}

// dialXDS returns the connection to the management server
// (CONFIG_GRPC_XDS_SERVER_URL, its TLS and message size). It connects
// lazily: a server that is down is retried by the subscription.
func dialXDS(x xdsSettings) (*grpc.ClientConn, error) {
	creds, err := xdsCredentials(x)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if x.maxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.maxMsgSize)))
	}
	conn, err := grpc.NewClient(x.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_URL: %w", err)
	}
	return conn, nil
}

// runXDS subscribes to the management server over conn until ctx is done.
func (s *service) runXDS(ctx context.Context, conn *grpc.ClientConn) {
	x := s.env.env.xdsClient
	node := &corev3.Node{Id: x.nodeID}
	if len(x.nodeMetadata) > 0 {
		fields := map[string]*structpb.Value{}
		for k, v := range x.nodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	s.logger.Info("xDS: subscribing to RateLimitConfig resources", "server", x.url, "node", x.nodeID, "tls", x.useTLS)
	xdsconfig.Run(ctx, xdsconfig.Options{
		Conn:    conn,
		Node:    node,
		Headers: x.headers,
		Backoff: xdsconfig.Backoff{Initial: x.backoffInitial, Max: x.backoffMax, RandomFactor: x.backoffRandom, Jitter: x.backoffJitter},
		Apply:   s.applyXDS,
		Logger:  s.logger,
	})
}

// xdsCredentials returns the transport credentials to the management
// server: TLS with CONFIG_GRPC_XDS_SERVER_USE_TLS (the server's CA,
// default the system's; a client certificate when both files are set;
// the name to check, default the URL's host), else none.
func xdsCredentials(x xdsSettings) (credentials.TransportCredentials, error) {
	if !x.useTLS {
		return insecure.NewCredentials(), nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.serverName}
	if x.caFile != "" {
		b, err := os.ReadFile(x.caFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %s holds no PEM certificate", x.caFile)
		}
		c.RootCAs = pool
	}
	if x.certFile != "" {
		cert, err := tls.LoadX509KeyPair(x.certFile, x.keyFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(c), nil
}

// gateUnary answers Unavailable to Envoy's rate limit calls before the
// first rate limit configuration (FORCE_START_WITHOUT_INITIAL_CONFIG), as
// the reference fails them with "no rate limit configuration loaded";
// Envoy then applies failure_mode_deny.
func (m *envoyMode) gateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !m.loaded.Load() && strings.HasPrefix(info.FullMethod, "/"+rls.ServiceName+"/") {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded yet")
	}
	return handler(ctx, req)
}
