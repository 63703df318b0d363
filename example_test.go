package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A Limiter applies its policies to keys through a Store. Here one key may
// send 10 requests per second in bursts of up to 3, and 20 per hour; the
// times are explicit so that the output is exact.
func Example() {
	ctx := context.Background()
	limiter, err := sluice.New(memstore.New(memstore.Options{}),
		sluice.TokenBucket(10, time.Second, 3).Named("burst"),
		sluice.FixedWindow(20, time.Hour).Named("hourly"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 50 * time.Millisecond, 100 * time.Millisecond} {
		d, err := limiter.AllowAt(ctx, start.Add(at), "user-42", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.Allowed {
			fmt.Printf("%-5v allowed, %d left\n", at, d.Remaining)
		} else {
			fmt.Printf("%-5v denied, retry in %v\n", at, d.RetryAfter)
		}
	}
	// Output:
	// 0s    allowed, 2 left
	// 0s    allowed, 1 left
	// 0s    allowed, 0 left
	// 0s    denied, retry in 100ms
	// 50ms  denied, retry in 50ms
	// 100ms allowed, 0 left
}

// The boundary problem of fixed windows: 100 requests at 12:00:59 and 100
// at 12:01:00 under 100 per minute.
func Example_boundary() {
	ctx := context.Background()
	start := time.Date(2025, 6, 1, 12, 0, 59, 0, time.UTC)
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(100, time.Minute),
		sluice.SlidingWindow(100, time.Minute),
		sluice.TokenBucket(100, time.Minute, 0),
	} {
		limiter, err := sluice.New(memstore.New(memstore.Options{}), p)
		if err != nil {
			fmt.Println(err)
			return
		}
		admitted := 0
		for i := range 200 {
			at := start.Add(time.Duration(i/100) * time.Second)
			if d, _ := limiter.AllowAt(ctx, at, "client", 1); d.Allowed {
				admitted++
			}
		}
		fmt.Printf("%-14s admits %d\n", p.Algorithm, admitted)
	}
	// Output:
	// fixed_window   admits 200
	// sliding_window admits 100
	// token_bucket   admits 101
}

// Validate names what is wrong with a policy.
func ExamplePolicy_Validate() {
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(100, time.Minute, 20).Named("api"),
		sluice.TokenBucket(0, time.Minute, 0).Named("api"),
		sluice.FixedWindow(10, 500*time.Nanosecond),
		{Algorithm: sluice.SlidingLogAlgorithm, Limit: 10, Period: time.Second, Burst: 20},
	} {
		fmt.Println(p.Validate())
	}
	// Output:
	// <nil>
	// invalid policy: policy "api": limit must be at least 1, got 0
	// invalid policy: policy: period must be a whole number of microseconds, got 500ns
	// invalid policy: policy: sliding_log has no burst; remove burst (got 20) or use token_bucket
}

func ExampleParseAlgorithm() {
	a, err := sluice.ParseAlgorithm("sliding_window")
	fmt.Println(a, err, a.HasBurst())
	_, err = sluice.ParseAlgorithm("sliding-window")
	fmt.Println(err)
	// Output:
	// sliding_window <nil> false
	// unknown algorithm "sliding-window" (want one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, concurrency)
}

// Wait blocks until the request fits, and fails at once when it would not
// fit before the context's deadline.
func ExampleLimiter_Wait() {
	limiter, err := sluice.New(memstore.New(memstore.Options{}), sluice.TokenBucket(1, time.Hour, 0))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := limiter.Wait(ctx, "job", 1)
	fmt.Println(d.Allowed, err)
	start := time.Now()
	_, err = limiter.Wait(ctx, "job", 1) // the next token is an hour away
	fmt.Println(errors.Is(err, context.DeadlineExceeded), time.Since(start) < time.Second)
	// Output:
	// true <nil>
	// true true
}

// A Penalty blocks a key that its policy refused, longer for each repeat
// offence: here 5 attempts per minute, then a block of 5 minutes, doubled
// by each offence within a day of the last block's end. The operator's
// Unblock lets the key in again. The store's clock is a variable, so that
// the output is exact.
func ExamplePenalty() {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	attempts := sluice.SlidingLog(5, time.Minute).Named("login")
	attempts.Penalty = sluice.Penalty{BlockFor: 5 * time.Minute, Factor: 2, MaxBlock: 24 * time.Hour, ForgetAfter: 24 * time.Hour}
	limiter, err := sluice.New(store, attempts)
	if err != nil {
		fmt.Println(err)
		return
	}
	start := now
	try := func(at time.Duration, cost int64) {
		now = start.Add(at)
		d, err := limiter.Allow(ctx, "alice", cost)
		switch {
		case err != nil:
			fmt.Println(err)
		case d.Allowed:
			fmt.Printf("%-5v %d allowed\n", at, cost)
		default:
			fmt.Printf("%-5v %d refused, retry in %v\n", at, cost, d.RetryAfter)
		}
	}
	try(0, 5)
	try(0, 1)              // an offence: blocked for 5m
	try(30*time.Second, 1) // blocked: no offence, nothing charged
	try(5*time.Minute, 5)  // the block is over
	try(5*time.Minute, 1)  // offence 2: 10m
	try(10*time.Minute, 1) // blocked
	if lifted, err := limiter.Unblock(ctx, "alice"); err == nil && lifted {
		fmt.Println("unblocked")
	}
	try(10*time.Minute, 1)
	// Output:
	// 0s    5 allowed
	// 0s    1 refused, retry in 5m0s
	// 30s   1 refused, retry in 4m30s
	// 5m0s  5 allowed
	// 5m0s  1 refused, retry in 10m0s
	// 10m0s 1 refused, retry in 5m0s
	// unblocked
	// 10m0s 1 allowed
}
