// Package config reads, checks and holds the configuration of the Sluice
// service (sluice serve).
//
// A configuration is a YAML file with the sections listen, store, limits,
// plans, plan_tables, proxy, envoy and admin; docs/configuration.md
// describes every key, and docs/envoy.md the envoy section, whose format
// package rls owns. Decoding is strict and complete: an unknown key, a
// wrong type, a bad number, duration, address or reference is a Problem
// naming the file, the line, the path in the document (such as
// limits.api-key.burst) and what is wrong, and Parse reports every problem
// of a file at once, in an *Error.
//
// The package is the schema and nothing more: it produces plain data
// (names, numbers, durations, key sources as written, the envoy section as
// its YAML node) and builds nothing that serves requests. The values whose
// format another package owns are checked through Formats, which cmd/sluice
// provides; it imports the root package (policies and their bounds) and
// none of the adapters (docs/architecture.md).
//
// A Config is immutable once built: its accessors return copies, so one
// Config can be shared by every goroutine of a server, and a reload swaps
// in a whole new one.
package config

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// Backend names where the service keeps rate-limit state.
type Backend string

// The store backends.
const (
	// MemoryBackend keeps state in the process (package memstore): each
	// instance of the service counts on its own.
	MemoryBackend Backend = "memory"
	// RedisBackend keeps state in Redis (package redisstore), shared by
	// every instance that uses the same Redis and prefix.
	RedisBackend Backend = "redis"
)

// OnError names what a Redis-backed store decides when Redis cannot be
// reached in time.
type OnError string

// The failure policies.
const (
	// OnErrorAllow admits every request while Redis is unreachable.
	OnErrorAllow OnError = "allow"
	// OnErrorDeny refuses every request while Redis is unreachable.
	OnErrorDeny OnError = "deny"
	// OnErrorLocal decides with an in-process store while Redis is
	// unreachable, so each instance enforces the limits on its own.
	OnErrorLocal OnError = "local"
	// OnErrorFail decides nothing: the decision API and forward-auth
	// answer 503 Service Unavailable while Redis is unreachable.
	OnErrorFail OnError = "error"
)

// Defaults for keys that a configuration file leaves out.
const (
	// DefaultHTTPAddr is listen.http's default.
	DefaultHTTPAddr = "127.0.0.1:8080"
	// DefaultRedisPrefix is store.redis.prefix's default.
	DefaultRedisPrefix = "sluice:"
	// DefaultTimeout is store.timeout's default.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultOnError is store.on_error's default.
	DefaultOnError = OnErrorAllow
	// DefaultSettleWithin is a rule limit's settle_within default, the
	// middleware's (httplimit.DefaultSettleWithin): long enough for a
	// streamed answer of many minutes.
	DefaultSettleWithin = time.Hour
	// MaxSettleWithin is the longest settle_within.
	MaxSettleWithin = 24 * time.Hour
)

// MaxFileSize is the largest configuration file Load and Parse accept.
const MaxFileSize = 4 << 20

// Listen holds the addresses the service listens on, each host:port.
type Listen struct {
	// HTTP serves the decision API, forward-auth, the proxy, /metrics,
	// /healthz and /readyz. Never empty.
	HTTP string
	// GRPC serves Envoy's rate limit service; empty means off.
	GRPC string
	// Admin, when not empty, serves the admin endpoints (/metrics, the
	// status page, /v1/status, /v1/explain) apart from HTTP, which then
	// no longer serves them; /healthz and /readyz are served on both.
	Admin string
	// TLS, when set, puts every listener behind TLS (listentls.go).
	TLS *ListenTLS
	// TokensFile, when not empty, is listen.tokens_file, resolved against
	// the configuration file's directory; Tokens are the tokens it held
	// when the configuration was loaded.
	TokensFile string
	Tokens     *tlsauth.Tokens
}

// Admin configures the admin endpoints.
type Admin struct {
	// Token, when not empty, is the bearer token that every admin
	// endpoint requires (Authorization: Bearer TOKEN), read from the file
	// TokenFile or written in the configuration.
	Token string
	// TokenFile is the file Token was read from; empty when Token was
	// written in the configuration or there is none.
	TokenFile string
}

// Store configures the store backend.
type Store struct {
	// Backend is MemoryBackend or RedisBackend.
	Backend Backend
	// Redis is set only when Backend is RedisBackend.
	Redis Redis
	// Timeout bounds each call to the backend.
	Timeout time.Duration
	// OnError is the failure policy of a Redis-backed store.
	OnError OnError
}

// Redis configures the Redis backend.
type Redis struct {
	// Addrs are host:port addresses: one for a single Redis, several for
	// a cluster.
	Addrs []string
	// Prefix starts every key Sluice writes.
	Prefix string
	// MaxBatch is the most requests one script call decides when calls
	// queue for Redis (redisstore.Options.MaxBatch); 1 turns batching off,
	// 0 (unset) means the store's default, 64.
	MaxBatch int
	// Username and Password authenticate to Redis (AUTH); Username only
	// with ACLs. PasswordFile is the file Password was read from.
	Username, Password, PasswordFile string
	// TLS, when set, makes the connection use TLS.
	TLS *RedisTLS
	// Sentinel, when set, makes Addrs the addresses of Redis Sentinels,
	// which name the master of the set to use.
	Sentinel *RedisSentinel
	// LocalRefusals is store.redis.local_refusals.
	LocalRefusals LocalRefusals
}

// LocalRefusals is store.redis.local_refusals: the cache of refused keys'
// states with which the Redis store refuses, without calling Redis, what
// Redis would refuse (redisstore.LocalRefusals). The zero value is on,
// with the store's default sizes.
type LocalRefusals struct {
	// Off turns local refusals off (enabled: false).
	Off bool
	// MaxEntries and MaxBytes bound the cache; 0 means the store's
	// defaults (65,536 entries, 16 MiB).
	MaxEntries int
	MaxBytes   int64
}

// RedisSentinel is store.redis.sentinel.
type RedisSentinel struct {
	// MasterSet is the name the sentinels monitor the master under.
	MasterSet string
	// Username and Password authenticate to the sentinels (not to the
	// data nodes, whose credentials are the Redis ones).
	Username, Password string
}

// Limit is a named rate limit.
type Limit struct {
	// Policy is the limit's policy; Policy.Name is the limit's name.
	Policy sluice.Policy
	// Shadow makes the limit a dry run: it decides and counts, and the
	// service reports what it decided, but it never denies a request.
	Shadow bool
	// SettleWithin, for a rate limit, is how long after a decision that
	// asked for a lease (POST /v1/check with "lease": true) its cost may
	// still be settled with the usage the client reports (POST
	// /v1/release): settle_within, or zero for DefaultSettleWithin.
	SettleWithin time.Duration
}

// Settle returns how long the cost of an admitted check of the rate limit
// l may be settled: SettleWithin, or DefaultSettleWithin.
func (l Limit) Settle() time.Duration {
	if l.SettleWithin > 0 {
		return l.SettleWithin
	}
	return DefaultSettleWithin
}

// Name returns the limit's name.
func (l Limit) Name() string { return l.Policy.Name }

// Proxy configures the rules that limit proxied and forward-auth requests,
// and the reverse proxy.
type Proxy struct {
	// Upstream is where admitted requests are forwarded; nil when the
	// rules serve forward-auth only.
	Upstream *url.URL
	// TrustedProxies are the networks whose X-Forwarded-For and
	// X-Forwarded-* headers are believed.
	TrustedProxies []netip.Prefix
	// Rules are tried in order; the first that matches a request applies.
	Rules []Rule
	// Body bounds the reading of request bodies by the form: and json: key
	// sources.
	Body Body
}

// Rule says which requests a set of limits applies to.
type Rule struct {
	// Name identifies the rule for forward-auth (?rule=NAME); may be
	// empty.
	Name string
	// Match selects requests.
	Match Match
	// Limits are charged together, all-or-nothing.
	Limits []RuleLimit
	// Plan, when not nil, adds the limits of each request's plan.
	Plan *RulePlan
	// Line is the rule's line in the configuration file, for messages.
	Line int
}

// Match selects requests by path prefix and method. The zero Match
// matches every request.
type Match struct {
	// PathPrefix, when not empty, must prefix the request's path.
	PathPrefix string
	// Methods, when not empty, lists the methods that match, upper case.
	Methods []string
}

// Matches reports whether a request with the given method and path is
// selected.
func (m Match) Matches(method, path string) bool {
	if m.PathPrefix != "" && !hasPrefix(path, m.PathPrefix) {
		return false
	}
	return len(m.Methods) == 0 || slices.Contains(m.Methods, method)
}

func hasPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == prefix
}

// RuleLimit charges one limit for a request, with a key taken from it.
type RuleLimit struct {
	// Limit names an entry of the limits section.
	Limit string
	// Key is the key source, such as "ip", "header:X-API-Key" or
	// "ip+path", as Formats.KeySource accepted it; package server builds
	// its key function (httplimit.ParseKey), with the proxy's trusted
	// proxies for "ip" and its body bounds for form: and json:.
	Key string
	// Cost is what one request costs, at least 1; with Usage, the
	// estimate charged before forwarding, at least 0 (0: admitted while
	// a unit is left, charged only what the response reports).
	Cost int64
	// ChargeOn, when not empty, lists the upstream response statuses for
	// which the limit is charged, after the response; before forwarding,
	// the limit is only checked (failed logins: [401, 403]). Never set
	// with Usage.
	ChargeOn []int
	// Usage, when not empty, says where the upstream's response reports
	// what the request cost, as Formats.Usage accepted it (such as
	// "openai" or "header:X-Tokens-Used"): Cost is charged as an estimate
	// before forwarding and settled to the reported usage when the
	// response ends; a response that reports none keeps the estimate.
	Usage string
	// SettleWithin is how long after the decision the reported usage may
	// settle the estimate: the rule limit's settle_within, else the
	// limit's (Limit.Settle); set exactly when Usage is.
	SettleWithin time.Duration
}

// Config is a validated configuration. It is immutable: its accessors
// return copies. The zero Config is not valid; get one from Load, Parse or
// Default.
type Config struct {
	source string
	listen Listen
	store  Store
	limits map[string]Limit
	names  []string // limit names, sorted
	proxy  *Proxy
	envoy  *yaml.Node // the envoy section's value, as Formats.Envoy checked it
	admin  Admin
	// tracing is the tracing section; nil without one.
	tracing *Tracing
	// decisionLog is the decision_log section; nil without one.
	decisionLog *DecisionLog
	// plans and planTables are the plans and plan_tables sections
	// (plans.go).
	plans      map[string]Plan
	planTables map[string]PlanTable
}

// Source returns the name of the file the configuration was read from, or
// DefaultSource for the built-in default.
func (c *Config) Source() string { return c.source }

// Listen returns the listen addresses.
func (c *Config) Listen() Listen { return cloneListen(c.listen) }

// Admin returns the admin section.
func (c *Config) Admin() Admin { return c.admin }

// Store returns the store configuration.
func (c *Config) Store() Store {
	s := c.store
	s.Redis.Addrs = slices.Clone(s.Redis.Addrs)
	return s
}

// Limit returns the limit with the given name.
func (c *Config) Limit(name string) (Limit, bool) {
	l, ok := c.limits[name]
	return l, ok
}

// Limits returns every limit, sorted by name.
func (c *Config) Limits() []Limit {
	out := make([]Limit, len(c.names))
	for i, n := range c.names {
		out[i] = c.limits[n]
	}
	return out
}

// Proxy returns the proxy section, and false when the configuration has
// none.
func (c *Config) Proxy() (Proxy, bool) {
	if c.proxy == nil {
		return Proxy{}, false
	}
	p := *c.proxy
	if p.Upstream != nil {
		u := *p.Upstream
		if u.User != nil {
			ui := *u.User
			u.User = &ui
		}
		p.Upstream = &u
	}
	p.TrustedProxies = slices.Clone(p.TrustedProxies)
	p.Rules = make([]Rule, len(c.proxy.Rules))
	for i, r := range c.proxy.Rules {
		r.Match.Methods = slices.Clone(r.Match.Methods)
		r.Limits = slices.Clone(r.Limits)
		for j := range r.Limits {
			r.Limits[j].ChargeOn = slices.Clone(r.Limits[j].ChargeOn)
		}
		if r.Plan != nil {
			rp := *r.Plan
			r.Plan = &rp
		}
		p.Rules[i] = r
	}
	return p, true
}

// Envoy returns the envoy section, the descriptors of Envoy's rate limit
// service (docs/envoy.md), as the YAML node of its value, with the lines
// and columns of the file, and false when the configuration has none.
// Package rls owns its format: rls.DecodeSection reads it and
// rls.CompileSection builds the descriptor trees. The node is a copy.
func (c *Config) Envoy() (*yaml.Node, bool) {
	if c.envoy == nil {
		return nil, false
	}
	return cloneNode(c.envoy, make(map[*yaml.Node]*yaml.Node)), true
}

// cloneNode returns a deep copy of n; seen maps the nodes copied so far
// to their copies, so that an alias points into the copy and a node
// shared by several aliases is copied once.
func cloneNode(n *yaml.Node, seen map[*yaml.Node]*yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if c, ok := seen[n]; ok {
		return c
	}
	c := *n
	seen[n] = &c
	c.Alias = cloneNode(n.Alias, seen)
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		c.Content[i] = cloneNode(e, seen)
	}
	return &c
}

// RestartRequired lists the settings that differ between old and new and
// that a running service cannot change by reloading: the listen
// addresses and the store. Limits, proxy rules and the envoy section
// reload in place.
func RestartRequired(old, new *Config) []string {
	o, n := old.store, new.store
	tlsFiles := func(t *RedisTLS) [4]string { return [4]string{t.CAFile, t.CertFile, t.KeyFile, t.ServerName} }
	settings := []struct {
		changed bool
		name    string
	}{
		{old.listen.HTTP != new.listen.HTTP, "listen.http"},
		{old.listen.GRPC != new.listen.GRPC, "listen.grpc"},
		{old.listen.Admin != new.listen.Admin, "listen.admin"},
		{(old.listen.TLS == nil) != (new.listen.TLS == nil), "listen.tls (turning TLS on or off)"},
		{o.Backend != n.Backend, "store.backend"},
		{!slices.Equal(o.Redis.Addrs, n.Redis.Addrs), "store.redis.addrs"},
		{o.Redis.Prefix != n.Redis.Prefix, "store.redis.prefix"},
		{o.Redis.MaxBatch != n.Redis.MaxBatch, "store.redis.max_batch"},
		{o.Redis.LocalRefusals != n.Redis.LocalRefusals, "store.redis.local_refusals"},
		{o.Redis.Username != n.Redis.Username || o.Redis.Password != n.Redis.Password, "store.redis credentials"},
		{!same(o.Redis.Sentinel, n.Redis.Sentinel, func(s *RedisSentinel) RedisSentinel { return *s }), "store.redis.sentinel"},
		{!same(o.Redis.TLS, n.Redis.TLS, tlsFiles), "store.redis.tls"},
		{o.Timeout != n.Timeout, "store.timeout"},
		{o.OnError != n.OnError, "store.on_error"},
		{!same(old.tracing, new.tracing, func(t *Tracing) Tracing { return *t }), "tracing"},
		{!same(old.decisionLog, new.decisionLog, decisionLogKey), "decision_log"},
	}
	var out []string
	for _, s := range settings {
		if s.changed {
			out = append(out, s.name)
		}
	}
	return out
}

// copyOf returns a copy of *p, nil for nil: a section as its accessor
// hands it out, which the caller may change without changing the Config.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// same reports whether a and b are both nil, or both set with equal keys.
func same[T any, K comparable](a, b *T, key func(*T) K) bool {
	if a == nil || b == nil {
		return a == b
	}
	return key(a) == key(b)
}

// DefaultSource is the Source of the built-in default configuration.
const DefaultSource = "<built-in default>"

// DefaultYAML is the built-in configuration that sluice serve uses when it
// is given no file: the memory store, one demo limit, and the HTTP API on
// 127.0.0.1:8080.
//
//go:embed default.yaml
var DefaultYAML string

// Default returns the built-in configuration, DefaultYAML, checked with
// formats. Its error is never non-nil in a tested build; it is returned
// rather than hidden.
func Default(formats Formats) (*Config, error) {
	return Parse(DefaultSource, []byte(DefaultYAML), formats)
}

// Load reads and validates the configuration file at path, as Parse does.
func Load(path string, formats Formats) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return Parse(path, data, formats)
}

// Parse validates the configuration in data; name is the file name used in
// messages, and formats checks the values whose format another package
// owns. A configuration with problems returns an *Error listing all of
// them.
func Parse(name string, data []byte, formats Formats) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{Problems: []Problem{{File: name, Message: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}}}
	}
	d := &decoder{file: name, formats: formats, budget: maxVisits, declared: make(map[string]bool)}
	c := d.document(bytes.NewReader(data))
	d.placeSyntax(data)
	if len(d.problems) > 0 {
		d.sort()
		return nil, &Error{Problems: d.problems}
	}
	c.source = name
	return c, nil
}
