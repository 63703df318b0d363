// Package xdsconfig is the xDS client of sluice serve --envoy-env with
// CONFIG_TYPE=GRPC_XDS_SOTW: it subscribes to envoyproxy/ratelimit's
// RateLimitConfig resources on an xDS management server (Envoy Gateway's
// on port 18001), in the state-of-the-world protocol over the aggregated
// discovery service, as the reference does.
//
// Every response holds the whole set of resources. The client hands it to
// Options.Apply; a nil error is acknowledged (ACK: the response's
// version), an error is refused (NACK: the last accepted version and the
// error's text), and the management server keeps the previous
// configuration in mind as the service keeps serving it. A server that
// sends the refused version again (go-control-plane's does, the NACK
// naming an older version) gets the same refusal, after Backoff.Initial,
// so that the two do not spin. A stream that
// fails or ends is opened again after a wait that doubles from
// Backoff.Initial to Backoff.Max, reset by the next response.
//
// The package imports no other of the module: what a resource means is
// the caller's (cmd/sluice converts it to package rls's domains).
package xdsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Backoff is the wait between two attempts to open a stream: Initial,
// doubled after each failed attempt up to Max; with Jitter, each wait is
// varied at random by up to RandomFactor of itself (0.5: from half to
// one and a half times).
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// next returns the wait after a wait of d, before jitter.
func (b Backoff) next(d time.Duration) time.Duration {
	if d <= 0 {
		return b.Initial
	}
	return min(2*d, b.Max)
}

// jittered returns d varied as b says.
func (b Backoff) jittered(d time.Duration) time.Duration {
	if !b.Jitter || b.RandomFactor <= 0 {
		return d
	}
	delta := b.RandomFactor * float64(d)
	return time.Duration(float64(d) - delta + rand.Float64()*2*delta)
}

// Options configure Run. Conn, Node and Apply are required.
type Options struct {
	// Conn is the connection to the management server.
	Conn grpc.ClientConnInterface
	// Node identifies the client; the management server picks its
	// snapshot by Node.Id.
	Node *corev3.Node
	// Headers are sent with every stream (gRPC metadata).
	Headers map[string]string
	// Backoff is the wait between attempts to open a stream.
	Backoff Backoff
	// Apply receives each response's resources, the whole set, in the
	// order sent; it returns nil to accept them, an error to refuse them.
	// It is called from Run's goroutine, one response at a time.
	Apply func(version string, resources []*rlsconfv3.RateLimitConfig) error
	// Logger receives connections, failures and refusals; nil discards.
	Logger *slog.Logger
	// Sleep waits d or until ctx is done (nil: a timer); tests replace it.
	Sleep func(ctx context.Context, d time.Duration)
}

// Run subscribes until ctx is done, opening the stream again whenever it
// fails. It returns ctx's error.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sleep := opts.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	if len(opts.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(opts.Headers))
	}
	c := &client{opts: opts, log: log, sleep: sleep}
	var wait time.Duration
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got {
			wait = 0
		}
		wait = opts.Backoff.next(wait)
		d := opts.Backoff.jittered(wait)
		log.Warn("xDS stream failed; opening it again", "error", err, "in", d.Round(time.Millisecond).String())
		sleep(ctx, d)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// client is the state kept from stream to stream: the version last
// accepted, which a new stream sends so that an unchanged snapshot is not
// sent again.
type client struct {
	opts    Options
	log     *slog.Logger
	version string
	// refused is the version last refused and why. A management server
	// built on go-control-plane answers a NACK, whose version is the
	// last accepted one, by sending the refused version again; the
	// client then refuses it again without a second look, and only after
	// Backoff.Initial, so that the two do not spin.
	refused, why string
	sleep        func(ctx context.Context, d time.Duration)
}

// stream opens one stream and serves it until it fails; got reports
// whether a response arrived on it.
func (c *client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.opts.Conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	req := &discoveryv3.DiscoveryRequest{Node: c.opts.Node, TypeUrl: TypeURL, VersionInfo: c.version}
	if err := s.Send(req); err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			c.log.Info("xDS stream open", "node", c.opts.Node.GetId())
		}
		got = true
		next := &discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		if v := resp.GetVersionInfo(); c.refused != "" && v == c.refused {
			c.sleep(ctx, c.opts.Backoff.jittered(c.opts.Backoff.Initial))
			next.VersionInfo = c.version
			next.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: c.why}
		} else if resp.GetTypeUrl() != TypeURL {
			// Not what was asked for: refuse it, keep the rest.
			next.VersionInfo = c.version
			next.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("unexpected type %q, want %q", resp.GetTypeUrl(), TypeURL)}
		} else if err := c.apply(resp); err != nil {
			c.log.Error("xDS update refused (NACK); the running configuration stays", "version", resp.GetVersionInfo(), "error", err)
			c.refused, c.why = resp.GetVersionInfo(), err.Error()
			next.VersionInfo = c.version
			next.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			c.version, c.refused, c.why = resp.GetVersionInfo(), "", ""
			next.VersionInfo = c.version
		}
		if err := s.Send(next); err != nil {
			return got, err
		}
	}
}

// apply decodes the response's resources and hands them to Apply.
func (c *client) apply(resp *discoveryv3.DiscoveryResponse) error {
	out := make([]*rlsconfv3.RateLimitConfig, 0, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		if r.GetTypeUrl() != TypeURL {
			return fmt.Errorf("resource %d: type %q, want %q", i, r.GetTypeUrl(), TypeURL)
		}
		var m rlsconfv3.RateLimitConfig
		if err := proto.Unmarshal(r.GetValue(), &m); err != nil {
			return fmt.Errorf("resource %d: %w", i, err)
		}
		out = append(out, &m)
	}
	if c.opts.Apply == nil {
		return errors.New("xdsconfig: no Apply")
	}
	return c.opts.Apply(resp.GetVersionInfo(), out)
}
