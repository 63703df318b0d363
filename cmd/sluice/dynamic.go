package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/overrides"
	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/plans/redisplans"
)

// redisRetry is how often a Redis connection that could not be made is
// tried again.
const redisRetry = time.Second

// dynamic holds what plans and overrides need beyond the store
// (docs/plans.md): the override store, and with the Redis backend a
// connection of their own to the store's Redis, for the shared overrides
// and the plan tables in Redis hashes. Like the store, it does not wait
// for Redis: until the connection is made, overrides cannot be changed and
// plan lookups in Redis fail (clients get the default plan).
type dynamic struct {
	overrides overrides.Store
	client    atomic.Pointer[rueidis.Client]
	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOv   func() error
	logger    *slog.Logger
	// redisBackend is set with the Redis backend: plan tables may then
	// be Redis hashes.
	redisBackend bool
	// tableCheck is how often a plan table file is looked at for
	// changes (tableCheckEvery).
	tableCheck time.Duration
}

// tableCheckEvery is how often a plan table file is looked at for changes.
const tableCheckEvery = time.Second

// openDynamic returns the override store for cfg: this instance's own
// with the memory backend, one shared in Redis with the Redis backend.
func openDynamic(cfg config.Store, logger *slog.Logger) *dynamic {
	d := &dynamic{logger: logger, tableCheck: tableCheckEvery}
	if cfg.Backend != config.RedisBackend {
		d.overrides = overrides.NewMemory()
		return d
	}
	d.redisBackend = true
	opt := redisClientOption(cfg.Redis)
	opt.Dialer = net.Dialer{Timeout: startupPingTimeout}
	c, err := rueidis.NewClient(opt)
	var ov *overrides.Redis
	if err == nil {
		d.client.Store(&c)
		ov = overrides.NewRedis(c, overrides.RedisOptions{Prefix: cfg.Redis.Prefix, Logger: logger})
	} else {
		logger.Warn("overrides and plan tables: redis does not answer yet; retrying every second", "error", err)
		ov = overrides.NewRedis(nil, overrides.RedisOptions{Prefix: cfg.Redis.Prefix, Logger: logger})
		ctx, stop := context.WithCancel(context.Background())
		d.stop = stop
		d.wg.Go(func() { d.connect(ctx, opt, ov, logger) })
	}
	d.overrides, d.closeOv = ov, ov.Close
	return d
}

// connect retries the connection until it is made or ctx ends.
func (d *dynamic) connect(ctx context.Context, opt rueidis.ClientOption, ov *overrides.Redis, logger *slog.Logger) {
	ctxsleep.Every(ctx, redisRetry, func() bool {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return true
		}
		d.client.Store(&c)
		ov.SetClient(c)
		logger.Info("overrides and plan tables: connected to redis")
		return false
	})
}

// redis returns the Redis client, nil while not connected.
func (d *dynamic) redis() rueidis.Client {
	if c := d.client.Load(); c != nil {
		return *c
	}
	return nil
}

// options adds the override store and the plan tables to opts.
func (d *dynamic) options(opts server.Options) server.Options {
	opts.Overrides = d.overrides
	opts.OpenTable = d.openTable
	return opts
}

// openTable opens a plan table of a configuration (docs/plans.md): a
// file, looked at for changes every d.tableCheck, or a Redis hash read
// over the connection of d once it is made, behind a cache of cache_ttl
// and cache_size. planNames are the configuration's plans, the only
// names a table file may give.
func (d *dynamic) openTable(tc config.PlanTable, planNames []string) (plans.Table, error) {
	switch {
	case tc.File != "":
		name := tc.Name
		return plans.OpenFile(tc.File, plans.FileOptions{
			CheckEvery: d.tableCheck,
			Plans:      planNames,
			OnReload: func(keys int, err error) {
				if err != nil {
					d.logger.Warn("plans: a changed plan table file was refused; the previous one stays", "table", name, "error", err)
					return
				}
				d.logger.Info("plans: plan table reloaded", "table", name, "keys", keys)
			},
		})
	case tc.RedisHash != "":
		if !d.redisBackend {
			return nil, fmt.Errorf("the Redis hash %q needs store.backend: redis", tc.RedisHash)
		}
		return plans.NewCache(&redisTable{client: d.redis, hash: tc.RedisHash}, plans.CacheOptions{TTL: tc.CacheTTL, Size: tc.CacheSize}), nil
	default:
		return nil, errors.New("neither a file nor a Redis hash")
	}
}

// redisTable is a plan table in a Redis hash read with a client that may
// not be connected yet.
type redisTable struct {
	client func() rueidis.Client
	hash   string
}

// errRedisNotConnected is the error of a lookup before the connection.
var errRedisNotConnected = errors.New("not connected to redis yet")

// Plan looks key up in the hash.
func (t *redisTable) Plan(ctx context.Context, key string) (string, bool, error) {
	c := t.client()
	if c == nil {
		return "", false, errRedisNotConnected
	}
	return redisplans.New(c, t.hash, 0).Plan(ctx, key)
}

// close stops the connection attempts and the override store, then closes
// the connection.
func (d *dynamic) close() error {
	if d.stop != nil {
		d.stop()
	}
	d.wg.Wait()
	var err error
	if d.closeOv != nil {
		err = d.closeOv()
	}
	if c := d.redis(); c != nil {
		c.Close()
	}
	return err
}
