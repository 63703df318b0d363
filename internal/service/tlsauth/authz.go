package tlsauth

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// refusalLogEvery bounds the log lines about refused clients: one client
// in a retry loop must not flood the log.
const refusalLogEvery = time.Second

// refusalLog logs refused clients, at most one line per refusalLogEvery,
// with the number of refusals left out since the last line.
type refusalLog struct {
	logger  *slog.Logger
	next    atomic.Int64 // unix nanoseconds before which lines are skipped
	skipped atomic.Int64
}

func (l *refusalLog) log(listener, remote string, presented []string) {
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(refusalLogEvery)) {
		l.skipped.Add(1)
		return
	}
	if presented == nil {
		presented = []string{}
	}
	l.logger.Warn("client certificate refused: none of its names is in listen.tls.client_names",
		"listener", listener, "remote", remote, "presented", presented, "refusals_not_logged", l.skipped.Swap(0))
}

// Guard refuses the clients of one listener whose certificate names are
// not allowed (Server.Authorize): HTTP requests with 403 and a
// problem+json body, gRPC calls with PermissionDenied. Each refusal is
// logged with the names the client presented.
type Guard struct {
	s        *Server
	listener string
	log      *refusalLog
}

// Guard returns the guard of the listener named listener (listen.http,
// listen.grpc, listen.admin in log lines).
func (s *Server) Guard(listener string) *Guard {
	return &Guard{s: s, listener: listener, log: &refusalLog{logger: s.logger}}
}

// problem403 is the body of a refused HTTP request.
const problem403 = `{"type":"about:blank","title":"Forbidden","status":403,"detail":"The client certificate is valid but none of its names is allowed (listen.tls.client_names)."}` + "\n"

// HTTP returns next behind the guard.
func (g *Guard) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, presented := g.s.Authorize(r.TLS)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		g.log.log(g.listener, r.RemoteAddr, presented)
		h := w.Header()
		h.Set("Content-Type", "application/problem+json")
		h.Set("Content-Length", strconv.Itoa(len(problem403)))
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(problem403))
	})
}

// authorize checks the peer of a gRPC call.
func (g *Guard) authorize(ctx context.Context) error {
	var cs *tls.ConnectionState
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			remote = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	ok, presented := g.s.Authorize(cs)
	if ok {
		return nil
	}
	g.log.log(g.listener, remote, presented)
	return status.Error(codes.PermissionDenied, "the client certificate is valid but none of its names is allowed (listen.tls.client_names)")
}

// Unary is a gRPC interceptor that refuses unary calls of clients whose
// names are not allowed.
func (g *Guard) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := g.authorize(ctx); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is a gRPC interceptor that refuses streams (health Watch) of
// clients whose names are not allowed.
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := g.authorize(ss.Context()); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
