package redis

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/testkit"
)

// decisionLike is a script shaped like one decision: Redis's TIME, a GET
// and a SET with an expiry.
const decisionLike = `local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PX', 60000)
return 1`

// BenchmarkClient is the measurement behind the Redis store's choice of
// client library: the same decision-shaped script through
// github.com/redis/rueidis (automatic pipelining over a few connections)
// and github.com/redis/go-redis/v9 (a pool of connections, one command per
// round trip), at 1, 16, 64 and 256 concurrent callers.
func BenchmarkClient(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := testkit.RedisClient(b, srv.Addr)
	rs := rueidis.NewLuaScript(decisionLike)
	gc := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 512})
	defer gc.Close()
	gs := goredis.NewScript(decisionLike)
	libs := []struct {
		name string
		f    decideFunc
	}{
		{"rueidis", func(ctx context.Context, i int) error {
			return rs.Exec(ctx, rc, []string{names[i]}, nil).Error()
		}},
		{"go-redis", func(ctx context.Context, i int) error {
			return gs.Run(ctx, gc, []string{names[i]}).Err()
		}},
	}
	for _, callers := range []int{1, 16, 64, 256} {
		for _, lib := range libs {
			b.Run(fmt.Sprintf("callers=%d/client=%s", callers, lib.name), func(b *testing.B) {
				run(b, context.Background(), srv, callers, lib.f)
			})
		}
	}
}
