package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// This example shares a limit between every instance of a service through
// Redis, falling back to a per-instance memory store while Redis is away.
// It needs a Redis at localhost:6379, so it is compiled but not run.
func Example() {
	store, err := redisstore.New(redisstore.Options{
		Addrs:   []string{"localhost:6379"}, // or some nodes of a Redis Cluster
		Failure: redisstore.FailLocal,
		Local:   memstore.New(memstore.Options{MaxKeys: 1_000_000}),
		OnError: func(err error) { log.Printf("rate limiter: %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// 10 per second with bursts of 20, and at most 1000 per hour: both
	// decided in one atomic script, all or nothing.
	limiter, err := sluice.New(store,
		sluice.TokenBucket(10, time.Second, 20).Named("second"),
		sluice.FixedWindow(1000, time.Hour).Named("hour"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.Allow(context.Background(), "client:203.0.113.7", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Remaining, d.Degraded)
}
