package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Memory store settings of sluice serve (docs/operations.md).
const (
	// defaultMaxKeys is --max-keys' default: a million (limit, key) pairs,
	// about 45 MB for the token-bucket family.
	defaultMaxKeys = 1_000_000
	// sweepInterval is how often the memory store drops keys whose state
	// is back to initial (it also does so a little on every insert).
	sweepInterval = time.Minute
	// redisErrorLogInterval is the least time between two log lines about
	// failed Redis calls; the calls in between are counted in the next.
	redisErrorLogInterval = 10 * time.Second
	// startupPingTimeout bounds the check that Redis answers at startup.
	startupPingTimeout = 2 * time.Second
)

// openedStore is the store sluice serve decides with, and how to close it.
type openedStore struct {
	store sluice.Store
	// circuit reports the Redis store's breaker state; nil for memory.
	circuit func() string
	// cluster is set once the Redis store is known to be on Redis
	// Cluster.
	cluster atomic.Bool
	// health checks the Redis masters, for /readyz; nil for memory.
	health func(ctx context.Context) server.StoreHealth
	redis  *redisstore.Store
	// local reports the Redis store's local refusals; nil without them.
	local   func() metrics.LocalRefusals
	closers []func() error
}

// gauges returns what the metrics read of the store at each scrape.
func (o *openedStore) gauges() metrics.StoreGauges {
	g := metrics.StoreGauges{CircuitState: o.circuit, LocalRefusals: o.local}
	if l, ok := o.store.(interface{ Len() int }); ok {
		g.Keys = l.Len
	}
	return g
}

// close releases the store, the Redis connection first.
func (o *openedStore) close() error {
	var errs []error
	for _, c := range o.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// newMemStore returns the memory store; decided, when not nil, is told
// the time and order of each decision (memstore.Options.OnDecided).
func newMemStore(maxKeys int, decided func(context.Context, sluice.Request, time.Time, uint64)) *memstore.Store {
	return memstore.New(memstore.Options{MaxKeys: maxKeys, SweepInterval: sweepInterval, OnDecided: decided})
}

// openStore builds the store that cfg describes. A Redis store does not
// wait for Redis: until it answers, the failure policy decides.
//
// observe, when not nil, is told of each Redis script call (tracing);
// decided, of the time and order of each decision (the decision log).
// The memory store that decides for Redis when it fails (on_error:
// local) tells nothing: its decisions are logged as degraded, which a
// replay does not decide.
func openStore(cfg config.Store, maxKeys int, logger *slog.Logger, m *metrics.Metrics, observe func(context.Context, redisstore.Call), decided func(context.Context, sluice.Request, time.Time, uint64)) (*openedStore, error) {
	if cfg.Backend != config.RedisBackend {
		ms := newMemStore(maxKeys, decided)
		return &openedStore{store: ms, closers: []func() error{ms.Close}}, nil
	}
	failure, err := redisstore.ParseFailurePolicy(string(cfg.OnError))
	if err != nil {
		return nil, err
	}
	o := &openedStore{}
	opts := redisstore.Options{
		ClientOption: redisClientOption(cfg.Redis),
		Addrs:        cfg.Redis.Addrs,
		Prefix:       cfg.Redis.Prefix,
		MaxBatch:     cfg.Redis.MaxBatch,
		LocalRefusals: redisstore.LocalRefusals{
			Off:        cfg.Redis.LocalRefusals.Off,
			MaxEntries: cfg.Redis.LocalRefusals.MaxEntries,
			MaxBytes:   cfg.Redis.LocalRefusals.MaxBytes,
		},
		Timeout: cfg.Timeout,
		Failure: failure,
		OnError: newErrorLog(logger, m).report,
		OnBreakerChange: func(from, to redisstore.BreakerState) {
			lv := slog.LevelWarn
			if to == redisstore.BreakerClosed {
				lv = slog.LevelInfo
			}
			logger.Log(context.Background(), lv, "redis circuit breaker changed state",
				"from", from.String(), "to", to.String(), "on_error", failure.String())
		},
		OnRecover: func(r redisstore.Recovery) { logRecovery(logger, r) },
		Observe:   observe,
		OnDecided: decided,
	}
	var local *memstore.Store
	if failure == redisstore.FailLocal {
		local = newMemStore(maxKeys, nil)
		opts.Local = local
	}
	rs, err := redisstore.New(opts)
	if err != nil {
		if local != nil {
			local.Close()
		}
		return nil, err
	}
	o.store, o.redis = rs, rs
	o.circuit = func() string { return rs.BreakerState().String() }
	if !cfg.Redis.LocalRefusals.Off {
		o.local = func() metrics.LocalRefusals {
			s := rs.LocalRefusalStats()
			return metrics.LocalRefusals{Decisions: s.Decisions, Local: s.Local, ByLimit: s.ByPolicy, Entries: s.Entries, Bytes: s.Bytes}
		}
	}
	o.health = func(ctx context.Context) server.StoreHealth {
		h := rs.Check(ctx)
		return server.StoreHealth{Masters: h.Masters, Down: h.Down, Err: h.Err}
	}
	o.closers = append(o.closers, rs.Close)
	if local != nil {
		o.closers = append(o.closers, local.Close)
	}
	return o, nil
}

// checkReachable logs whether Redis answers, so that an operator sees a
// wrong address at once rather than in degraded decisions. On Redis
// Cluster it also logs, as errors, the proxy rules of cfg that can never
// be decided there (splitRules), and remembers that the store is a
// cluster for the reloads.
func (o *openedStore) checkReachable(ctx context.Context, cfg *config.Config, logger *slog.Logger) {
	if o.redis == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, startupPingTimeout)
	defer cancel()
	h := o.redis.Check(ctx)
	switch {
	case h.Partial():
		logger.Warn("some redis masters do not answer; the failure policy decides their keys until they do", "masters", h.Masters, "masters_down", h.Down, "error", h.Err)
	case h.Err != nil:
		logger.Warn("redis does not answer yet; the failure policy decides until it does", "error", h.Err)
	default:
		logger.Info("redis answers", "masters", h.Masters)
	}
	if h.Cluster {
		o.cluster.Store(true)
		o.reportSplit(cfg, logger)
	}
}

// reportSplit logs, when the store is known to be a Redis Cluster, every
// proxy rule of cfg whose limits can never be decided together there.
func (o *openedStore) reportSplit(cfg *config.Config, logger *slog.Logger) {
	if !o.cluster.Load() {
		return
	}
	for _, msg := range splitRules(cfg) {
		logger.Error("a rule can never be decided on this Redis Cluster", "problem", msg)
	}
}

// splitRules returns a message for each proxy rule whose enforced limits
// (dry runs are decided apart) are keyed by more than one key source, its
// plan's included: on Redis Cluster their keys lie in different hash slots,
// so the rule's all-or-nothing decision fails for (almost) every request.
func splitRules(cfg *config.Config) []string {
	p, ok := cfg.Proxy()
	if !ok {
		return nil
	}
	var out []string
	for i, r := range p.Rules {
		var keys []string
		add := func(limit, key string) {
			if l, ok := cfg.Limit(limit); ok && !l.Shadow && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		for _, rl := range r.Limits {
			add(rl.Limit, rl.Key)
		}
		if r.Plan != nil {
			for _, pl := range cfg.Plans() {
				for _, name := range pl.Limits {
					add(name, r.Plan.Key)
				}
			}
		}
		if len(keys) > 1 {
			out = append(out, fmt.Sprintf("%s:%d: proxy.rules[%d]: its limits are keyed by %s, which lie in different Redis Cluster hash slots: "+
				"they can never be decided all or nothing, and its requests are answered 500; key its enforced limits alike (one key shares one slot), "+
				"or keep the counters on a single Redis or Sentinel", cfg.Source(), r.Line, i, strings.Join(keys, " and ")))
		}
	}
	return out
}

// errorLog logs failed Redis calls, at most one line per
// redisErrorLogInterval, and counts every one of them.
type errorLog struct {
	logger *slog.Logger
	m      *metrics.Metrics

	mu         sync.Mutex
	last       time.Time // when the last line was logged
	suppressed int       // failures since then
}

func newErrorLog(logger *slog.Logger, m *metrics.Metrics) *errorLog {
	return &errorLog{logger: logger, m: m}
}

func (e *errorLog) report(err error) {
	e.m.RedisError()
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < redisErrorLogInterval {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.logger.Warn("redis call failed", "error", err, "failures_not_logged", n)
}

// logRecovery logs that Redis answers again after failed calls, so that
// the warnings of failed calls have an end in the log.
func logRecovery(logger *slog.Logger, r redisstore.Recovery) {
	attrs := []slog.Attr{slog.Duration("down_for", r.Down.Round(time.Millisecond)), slog.Int64("failures", r.Failures)}
	if r.Addr != "" {
		attrs = append(attrs, slog.String("master", r.Addr))
	}
	logger.LogAttrs(context.Background(), slog.LevelInfo, "redis answers again", attrs...)
}

// redisClientOption is how the service connects to Redis, for the store and
// for the overrides and plan tables alike: the addresses, the credentials,
// TLS and Sentinel of store.redis.
func redisClientOption(r config.Redis) rueidis.ClientOption {
	opt := rueidis.ClientOption{InitAddress: r.Addrs, Username: r.Username, Password: r.Password, DisableCache: true}
	if r.TLS != nil {
		opt.TLSConfig = r.TLS.Config.Clone()
	}
	if r.Sentinel != nil {
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: r.Sentinel.MasterSet,
			Username:  r.Sentinel.Username,
			Password:  r.Sentinel.Password,
			// Catch a missed +switch-master event within seconds.
			TopologyRefreshInterval: 5 * time.Second,
		}
		if r.TLS != nil {
			opt.Sentinel.TLSConfig = r.TLS.Config.Clone()
		}
	}
	return opt
}
