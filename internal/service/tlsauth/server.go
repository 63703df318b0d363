package tlsauth

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/ctxsleep"
)

// MinVersion is the lowest TLS version the listeners accept. TLS 1.2
// rather than 1.3 alone: Envoy, gateways and client libraries that still
// stop at 1.2 are common in the deployments Sluice serves, and Go offers
// only forward-secret AEAD cipher suites for 1.2 by default, so 1.2 adds
// no weak option. Versions below 1.2 are refused (RFC 8996).
const MinVersion = tls.VersionTLS12

// Server holds the TLS material of sluice serve's listeners and rotates it
// live: Config returns a *tls.Config that gives every new connection the
// material current at its handshake, and Check, Watch and Apply replace
// it. Connections already open keep the material they started with. A
// Server is safe for concurrent use.
type Server struct {
	logger   *slog.Logger
	now      func() time.Time
	onLoad   func(*Material)
	onRefuse func()

	cur atomic.Pointer[current]

	mu      sync.Mutex // serialises Check and Apply, and guards below
	pending [32]byte   // contents seen changed on the last Check, settling
	refused [32]byte   // contents last refused, not logged again
	readErr string     // the last error reading the files, not logged again

	refusals atomic.Int64
}

// current is the material in use, the names allowed with it, and the
// configuration built from them.
type current struct {
	mat   *Material
	names *Names
	base  *tls.Config
}

// Options configure a Server. The zero value is valid.
type Options struct {
	// Logger receives rotations (Info) and refused files (Error); nil
	// discards them.
	Logger *slog.Logger
	// Now returns the current time, for expiry checks; default time.Now.
	Now func() time.Time
	// OnLoad, when set, is called with each material put in use after
	// the first (a rotation), and OnRefuse for each replacement refused,
	// for metrics. They are called one at a time.
	OnLoad   func(*Material)
	OnRefuse func()
}

// NewServer loads the files and returns a Server serving them to clients
// whose certificates, when a client CA is set, carry one of names.
func NewServer(f Files, names *Names, opts Options) (*Server, error) {
	s := &Server{logger: opts.Logger, now: opts.Now, onLoad: opts.OnLoad, onRefuse: opts.OnRefuse}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	c, err := s.load(f, names)
	if err != nil {
		return nil, err
	}
	s.cur.Store(c)
	return s, nil
}

// load reads the files f, at s.now(), and builds their TLS configuration
// with names.
func (s *Server) load(f Files, names *Names) (*current, error) {
	m, err := Load(f, s.now())
	if err != nil {
		return nil, err
	}
	return newCurrent(m, names)
}

// newCurrent builds the TLS configuration of m and names.
func newCurrent(m *Material, names *Names) (*current, error) {
	base := &tls.Config{
		MinVersion:   MinVersion,
		Certificates: []tls.Certificate{m.Cert},
	}
	if m.ClientCAs != nil {
		base.ClientAuth = tls.RequireAndVerifyClientCert
		base.ClientCAs = m.ClientCAs
	}
	// Session tickets are encrypted with keys of this material alone, so
	// that a rotation (a CA removed, a client revoked by a new bundle)
	// cannot be bypassed by resuming a session made before it.
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("tlsauth: session ticket key: %w", err)
	}
	base.SetSessionTicketKeys([][32]byte{key})
	return &current{mat: m, names: names, base: base}, nil
}

// put makes c current and reports new material.
func (s *Server) put(c *current) {
	old := s.cur.Swap(c)
	if s.onLoad != nil && old.mat != c.mat {
		s.onLoad(c.mat)
	}
}

// Material returns the material in use.
func (s *Server) Material() *Material { return s.cur.Load().mat }

// Refusals returns how many replacements of the files were refused.
func (s *Server) Refusals() int64 { return s.refusals.Load() }

// Config returns the configuration of a listener that negotiates the
// given application protocols (ALPN), such as "h2" and "http/1.1" for
// HTTP or "h2" for gRPC. Each handshake gets the material current at
// that moment.
func (s *Server) Config(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	return &tls.Config{
		MinVersion: MinVersion,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := s.cur.Load().base.Clone()
			cfg.NextProtos = protos
			return cfg, nil
		},
	}
}

// Check reads the files again and puts them in use when their content
// changed and stayed the same since the previous Check (so that files
// being written are not read half-way), or at once when force is set (for
// SIGHUP). New files that are unreadable, do not parse, do not belong
// together or have expired are refused with an Error log line, once per
// content, and the material in use stays. It reports whether new material
// was put in use.
func (s *Server) Check(force bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	f := cur.mat.Files
	c, err := read(f)
	if err != nil {
		if msg := err.Error(); msg != s.readErr || force {
			s.readErr = msg
			s.logger.Warn("cannot read the TLS files; the certificate in use keeps serving", "error", msg)
		}
		return false
	}
	s.readErr = ""
	sum := c.sum()
	if sum == cur.mat.Sum {
		s.pending = [32]byte{}
		return false
	}
	if !force && sum != s.pending {
		s.pending = sum
		return false
	}
	s.pending = [32]byte{}
	if sum == s.refused && !force {
		return false
	}
	m, err := build(f, c, s.now())
	if err == nil {
		var next *current
		if next, err = newCurrent(m, cur.names); err == nil {
			s.put(next)
			s.refused = [32]byte{}
			s.logLoaded("TLS certificate rotated", m)
			return true
		}
	}
	s.refused = sum
	s.refusals.Add(1)
	if s.onRefuse != nil {
		s.onRefuse()
	}
	s.logger.Error("new TLS files refused; the certificate in use keeps serving", "error", err.Error(),
		"serial", cur.mat.Serial(), "not_after", cur.mat.NotAfter().UTC().Format(time.RFC3339))
	return false
}

// logLoaded logs material put in use, with a warning when it expires soon.
func (s *Server) logLoaded(msg string, m *Material) {
	attrs := []any{"serial", m.Serial(), "not_after", m.NotAfter().UTC().Format(time.RFC3339), "client_ca", m.ClientCAs != nil}
	s.logger.Info(msg, attrs...)
	if left := m.NotAfter().Sub(s.now()); left < ExpiryWarning {
		s.logger.Warn("the TLS certificate expires soon", append(attrs, "left", left.Round(time.Minute).String())...)
	}
}

// Watch calls Check every interval until ctx is done.
func (s *Server) Watch(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	ctxsleep.Every(ctx, every, func() bool {
		s.Check(false)
		return true
	})
}

// Prepared is material loaded for Apply, from a configuration being
// reloaded.
type Prepared struct {
	c *current
}

// Prepare loads the files and names of a reloaded configuration without
// putting them in use; Apply does, once the rest of the configuration is
// known to apply too, so that a reload is applied whole or not at all.
func (s *Server) Prepare(f Files, names *Names) (*Prepared, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	if f == cur.mat.Files {
		c := *cur
		c.names = names
		return &Prepared{c: &c}, nil
	}
	c, err := s.load(f, names)
	if err != nil {
		return nil, err
	}
	return &Prepared{c: c}, nil
}

// Apply puts prepared material in use.
func (s *Server) Apply(p *Prepared) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	s.put(p.c)
	if p.c.mat != old.mat {
		s.logLoaded("TLS files changed with the configuration", p.c.mat)
	}
}

// Authorize reports whether a connection's client may be served: true
// without a names list; with one, when the verified client certificate
// carries one of the names. It also returns the names the client
// presented, for a log line.
func (s *Server) Authorize(cs *tls.ConnectionState) (bool, []string) {
	names := s.cur.Load().names
	if names.Len() == 0 {
		return true, nil
	}
	var leaf *x509.Certificate
	if cs != nil && len(cs.PeerCertificates) > 0 {
		leaf = cs.PeerCertificates[0]
	}
	if leaf != nil && names.Allows(leaf) {
		return true, nil
	}
	return false, Presented(leaf)
}
