package testkit

import (
	"testing"

	"github.com/redis/rueidis"
)

// RedisClient returns a rueidis client of the Redis at addr (a RedisServer's Addr,
// or a RedisProxy's), without client-side caching, as the stores use it. It
// fails t when the client cannot connect, and is closed when t ends.
func RedisClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis client of %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}
