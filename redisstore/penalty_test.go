package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestPenaltySharedByInstances checks that three stores on one Redis, on
// Redis's clock, see one block: the offence on one blocks the key on the
// others, a flood on them during the block is no offence, and an Unblock
// through one lifts it for all.
func TestPenaltySharedByInstances(t *testing.T) {
	srv := testkit.StartRedis(t)
	opts := Options{Prefix: "shared:", Failure: FailError}
	a, b, c := newTestStore(t, []string{srv.Addr}, opts), newTestStore(t, []string{srv.Addr}, opts), newTestStore(t, []string{srv.Addr}, opts)
	ctx := t.Context()
	// Five a second in bursts of five (a unit every 200 ms): the bucket's
	// own retry is at most a second; a block is an hour, then two.
	p := sluice.TokenBucket(5, time.Second, 5).Named("login")
	p.Penalty = sluice.Penalty{BlockFor: time.Hour, Factor: 2, ForgetAfter: 24 * time.Hour}
	req := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "alice", Cost: cost} }
	if d, err := a.Allow(ctx, time.Time{}, req(5)); err != nil || !d.Allowed {
		t.Fatalf("a.Allow(5) = %+v, %v; want allowed", d, err)
	}
	d, err := b.Allow(ctx, time.Time{}, req(5))
	if err != nil || d.Allowed || d.RetryAfter < 59*time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("b.Allow(5) on a spent bucket = %+v, %v; want refused for a block of an hour", d, err)
	}
	// On the third instance, for as long as the test runs, the bucket has
	// refilled and the key is still blocked; a flood changes nothing.
	for i := range 20 {
		d, err := c.Allow(ctx, time.Time{}, req(1))
		if err != nil || d.Allowed || d.RetryAfter < 59*time.Minute || d.RetryAfter > time.Hour || d.Remaining != 0 {
			t.Fatalf("c.Allow #%d during the block = %+v, %v; want refused until the block's end, within the hour", i, d, err)
		}
	}
	if d, err := a.Peek(ctx, time.Time{}, req(1)); err != nil || d.Allowed || d.RetryAfter < 59*time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("a.Peek during the block = %+v, %v; want the block", d, err)
	}
	lifted, err := c.Unblock(ctx, time.Time{}, req(1))
	if err != nil || !lifted {
		t.Fatalf("c.Unblock = %v, %v; want true", lifted, err)
	}
	// Lifted for everyone, and the offences forgotten with it: the next
	// offence, on whichever instance, blocks for an hour again, not two.
	if d := offend(t, []*Store{a, b}, req(5)); d.RetryAfter > time.Hour {
		t.Fatalf("the first offence after the unblock = %+v; want a block of an hour", d)
	}
	// bob: an offence, an unblock, an offence: an hour again.
	other := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "bob", Cost: cost} }
	offend(t, []*Store{b, c}, other(5))
	if _, err := a.Unblock(ctx, time.Time{}, other(1)); err != nil {
		t.Fatal(err)
	}
	if d := offend(t, []*Store{c, a}, other(5)); d.RetryAfter > time.Hour {
		t.Fatalf("bob's offence after an unblock = %+v; want an hour (offences forgotten)", d)
	}
	if _, err := a.Unblock(ctx, time.Time{}, other(1)); err != nil {
		t.Fatal(err)
	}
	// Without an unblock in between, a second offence: two hours.
	dave := func(cost int64) sluice.Request { return sluice.Request{Policy: &p, Key: "dave", Cost: cost} }
	offend(t, []*Store{a, b}, dave(5))
	if err := c.Reset(ctx, dave(1)); err != nil {
		t.Fatal(err)
	}
	if d := offend(t, []*Store{c, a}, dave(5)); d.RetryAfter > time.Hour {
		t.Fatalf("dave's offence after a reset = %+v; want an hour (Reset forgets offences)", d)
	}
	// Escalation across instances: blocks of 2 ms, then 2 s. After the
	// first block the bucket still refuses a unit for up to 200 ms: the
	// first refusal after the block is the second offence, on whichever
	// instance it comes.
	q := sluice.TokenBucket(5, time.Second, 5).Named("login-fast")
	q.Penalty = sluice.Penalty{BlockFor: 2 * time.Millisecond, Factor: 1000, MaxBlock: time.Hour, ForgetAfter: time.Hour}
	carol := func(cost int64) sluice.Request { return sluice.Request{Policy: &q, Key: "carol", Cost: cost} }
	if d, err := a.Allow(ctx, time.Time{}, carol(5)); err != nil || !d.Allowed {
		t.Fatalf("a.Allow(carol, 5) = %+v, %v", d, err)
	}
	stores := []*Store{b, c, a}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		d, err := stores[i%3].Allow(ctx, time.Time{}, carol(1))
		if err != nil {
			t.Fatal(err)
		}
		if d.RetryAfter > 1900*time.Millisecond {
			if d.RetryAfter > 2*time.Second {
				t.Fatalf("the second offence = %+v; want a block of 2 s", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no block of 2 s after %d requests; the last: %+v", i+1, d)
		}
	}
}

// offend sends req through the stores in turn until one refuses it, and
// returns that refusal: with a bucket of burst req.Cost, the second call
// refuses unless the bucket refilled in between.
func offend(t *testing.T, stores []*Store, req sluice.Request) sluice.Decision {
	t.Helper()
	for i := range 6 {
		d, err := stores[i%len(stores)].Allow(t.Context(), time.Time{}, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			if d.RetryAfter < 59*time.Minute {
				t.Fatalf("offence on %s = %+v; want a block of an hour or more", req.Key, d)
			}
			return d
		}
	}
	t.Fatalf("six requests of the burst on %s: all allowed", req.Key)
	return sluice.Decision{}
}

// TestLocalRefusalOfBlocks checks that a store refuses a blocked key
// locally, as Redis would, until the block ends; and that an Unblock
// through another store on the same Redis reaches it (the refund channel),
// after which its next request goes to Redis again.
func TestLocalRefusalOfBlocks(t *testing.T) {
	srv := testkit.StartRedis(t)
	opts := Options{Prefix: "local:", Failure: FailError, LocalRefusals: LocalRefusals{MaxAge: -1}}
	a, b := newTestStore(t, []string{srv.Addr}, opts), newTestStore(t, []string{srv.Addr}, opts)
	ctx := t.Context()
	p := sluice.TokenBucket(5, time.Second, 5).Named("login")
	p.Penalty = sluice.Penalty{BlockFor: time.Hour}
	req := sluice.Request{Policy: &p, Key: "alice", Cost: 5}
	offend(t, []*Store{a}, req)
	before := a.LocalRefusalStats()
	for i := range 50 {
		d, err := a.Allow(ctx, time.Time{}, req)
		if err != nil || d.Allowed || !d.Blocked || d.RetryAfter < 59*time.Minute || d.RetryAfter > time.Hour {
			t.Fatalf("request %d during the block = %+v, %v; want refused by the block", i, d, err)
		}
	}
	after := a.LocalRefusalStats()
	if local := after.Local - before.Local; local != 50 {
		t.Errorf("%d of 50 refusals during the block were local, want 50 (%d reached Redis)", local, 50-local)
	}
	// b lifts the block: a hears it, drops the block, asks Redis again.
	if lifted, err := b.Unblock(ctx, time.Time{}, req); err != nil || !lifted {
		t.Fatalf("b.Unblock = %v, %v", lifted, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := a.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "alice", Cost: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Blocked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still refuses alice by the block 10s after b lifted it: %+v", d)
		}
	}
}
