package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A memory store decides at the time it is given (or, with a zero time, at
// its own clock): here a token bucket of 2 per second with a burst of 3.
func Example() {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	req := sluice.Request{Policy: new(sluice.TokenBucket(2, time.Second, 3)), Key: "user-42", Cost: 1}
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 200 * time.Millisecond, 500 * time.Millisecond} {
		d, err := st.Allow(ctx, start.Add(at), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-6v allowed=%-5v remaining=%d retry=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 0s     allowed=true  remaining=2 retry=0s
	// 0s     allowed=true  remaining=1 retry=0s
	// 0s     allowed=true  remaining=0 retry=0s
	// 0s     allowed=false remaining=0 retry=500ms
	// 200ms  allowed=false remaining=0 retry=300ms
	// 500ms  allowed=true  remaining=0 retry=0s
}

// AllowAll applies several policies to one request, all or nothing: when
// the hourly limit is spent, the per-second limit is not charged.
func ExampleStore_AllowAll() {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	reqs := []sluice.Request{
		{Policy: new(sluice.TokenBucket(10, time.Second, 0).Named("per-second")), Key: "user-42", Cost: 1},
		{Policy: new(sluice.FixedWindow(3, time.Hour).Named("per-hour")), Key: "user-42", Cost: 1},
	}
	out := make([]sluice.Decision, len(reqs))
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for range 4 {
		d, err := st.AllowAll(ctx, now, reqs, out)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%-5v per-second remaining=%d per-hour remaining=%d retry=%v\n",
			d.Allowed, out[0].Remaining, out[1].Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true  per-second remaining=9 per-hour remaining=2 retry=0s
	// allowed=true  per-second remaining=8 per-hour remaining=1 retry=0s
	// allowed=true  per-second remaining=7 per-hour remaining=0 retry=0s
	// allowed=false per-second remaining=7 per-hour remaining=0 retry=1h0m0s
}

// A key whose state is back to initial holds no memory once dropped, and
// dropping it changes no decision. Prune drops them all at once;
// Options.SweepInterval runs Prune in the background.
func ExampleStore_Prune() {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	p := sluice.TokenBucket(10, time.Second, 0)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i := range 1000 {
		st.Allow(ctx, now, sluice.Request{Policy: &p, Key: fmt.Sprint("user-", i), Cost: 5})
	}
	fmt.Println("tracked:", st.Len())
	fmt.Println("dropped after 400ms:", st.Prune(now.Add(400*time.Millisecond)))
	fmt.Println("dropped after 500ms:", st.Prune(now.Add(500*time.Millisecond)))
	fmt.Println("tracked:", st.Len())
	// Output:
	// tracked: 1000
	// dropped after 400ms: 0
	// dropped after 500ms: 1000
	// tracked: 0
}

// MaxKeys bounds the memory of a store that sees unbounded keys (for
// example client addresses): at the cap, a new key evicts one of the keys
// closest to initial.
func ExampleOptions_maxKeys() {
	ctx := context.Background()
	st := memstore.New(memstore.Options{MaxKeys: 10_000})
	p := sluice.SlidingWindow(100, time.Minute)
	for i := range 30_000 {
		st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: fmt.Sprint("10.0.", i/256, ".", i%256), Cost: 1})
	}
	fmt.Println(st.Len() <= 10_000)
	// Output:
	// true
}
