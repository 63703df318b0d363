package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// decidedTimes records what Options.OnDecided is told, by context.
type decidedTimes struct {
	mu    sync.Mutex
	times map[context.Context][]decidedAt
}

type decidedAt struct {
	limit, key string
	at         int64
	order      uint64
}

func (d *decidedTimes) record(ctx context.Context, req sluice.Request, at time.Time, order uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.times[ctx] = append(d.times[ctx], decidedAt{req.Policy.Name, req.Key, at.UnixMicro(), order})
}

func (d *decidedTimes) of(ctx context.Context) []decidedAt {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.times[ctx]
}

// TestOnDecided checks what Options.OnDecided is told on every path a
// decision takes: on Redis's clock, once per request, the script's TIME,
// between the wall clock's readings around the call, on admissions and
// refusals alike; for a local refusal, a time no earlier than the latest
// reply's and no later than the call's end; at the caller's time,
// nothing. A call that ran alone has order 0, a local refusal 2³²−1.
func TestOnDecided(t *testing.T) {
	srv := testkit.StartRedis(t)
	tb := sluice.TokenBucket(2, time.Hour, 2).Named("tb")
	sl := sluice.SlidingLog(2, time.Hour).Named("sl")
	fw := sluice.FixedWindow(3, time.Hour).Named("fw")
	pen := sluice.TokenBucket(1, time.Hour, 1).Named("pen")
	pen.Penalty = sluice.Penalty{BlockFor: time.Hour, Factor: 2, ForgetAfter: 24 * time.Hour}
	type call struct {
		name string
		reqs func(key string) []sluice.Request
		do   func(ctx context.Context, st *Store, now time.Time, reqs []sluice.Request) (sluice.Decision, error)
	}
	allow := func(ctx context.Context, st *Store, now time.Time, reqs []sluice.Request) (sluice.Decision, error) {
		return st.Allow(ctx, now, reqs[0])
	}
	one := func(p *sluice.Policy, cost int64) func(string) []sluice.Request {
		return func(key string) []sluice.Request { return []sluice.Request{{Policy: p, Key: key, Cost: cost}} }
	}
	calls := []call{
		{"token bucket (tat_single.lua)", one(&tb, 1), allow},
		{"sliding log (single.lua)", one(&sl, 1), allow},
		{"check of cost 0 (many.lua)", one(&fw, 0), allow},
		{"penalty (penalty.lua)", one(&pen, 1), allow},
		{"estimate (allow_settle.lua)", func(key string) []sluice.Request {
			return []sluice.Request{{Policy: &fw, Key: key, Cost: 1, SettleWithin: time.Minute}}
		}, allow},
		{"peek", one(&tb, 2), func(ctx context.Context, st *Store, now time.Time, reqs []sluice.Request) (sluice.Decision, error) {
			return st.Peek(ctx, now, reqs[0])
		}},
		{"AllowAll (many.lua)", func(key string) []sluice.Request {
			return []sluice.Request{{Policy: &tb, Key: key, Cost: 1}, {Policy: &fw, Key: key, Cost: 1}}
		}, func(ctx context.Context, st *Store, now time.Time, reqs []sluice.Request) (sluice.Decision, error) {
			return st.AllowAll(ctx, now, reqs, nil)
		}},
	}
	for _, local := range []bool{true, false} {
		rec := &decidedTimes{times: map[context.Context][]decidedAt{}}
		st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, LocalRefusals: LocalRefusals{Off: !local}, OnDecided: rec.record})
		caller := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, CallerTime: true, OnDecided: rec.record})
		var latest int64 // the latest time of a call that went to Redis
		for _, c := range calls {
			allowed, refused := 0, 0
			for i := range 5 {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				reqs := c.reqs(c.name)
				n := st.LocalRefusalStats().Local
				before := time.Now().UnixMicro()
				d, err := c.do(ctx, st, time.Time{}, reqs)
				after := time.Now().UnixMicro()
				if err != nil {
					t.Fatalf("%s #%d (local refusals %t): %v", c.name, i, local, err)
				}
				wasLocal := st.LocalRefusalStats().Local != n
				if wasLocal {
					// Between the latest reply from Redis and now.
					before = latest
				}
				got := rec.of(ctx)
				if len(got) != len(reqs) {
					t.Fatalf("%s #%d (local refusals %t): told %v, want one time for each of %d requests", c.name, i, local, got, len(reqs))
				}
				// One call at a time runs alone (order 0); a local
				// refusal comes after the replies of its time.
				order := uint64(0)
				if wasLocal {
					order = 1<<32 - 1
				}
				for j, g := range got {
					if g.limit != reqs[j].Policy.Name || g.key != reqs[j].Key || g.at != got[0].at || g.at < before || g.at > after || g.order != order {
						t.Errorf("%s #%d (local refusals %t, local %t): told %+v, want %s/%s at one time within [%d, %d], order %d", c.name, i, local, wasLocal, g, reqs[j].Policy.Name, reqs[j].Key, before, after, order)
					}
				}
				if !wasLocal {
					latest = got[0].at
				}
				if d.Allowed {
					allowed++
				} else {
					refused++
				}
				cctx, ccancel := context.WithCancel(t.Context())
				defer ccancel()
				if _, err := c.do(cctx, caller, time.Now(), reqs); err != nil || len(rec.of(cctx)) != 0 {
					t.Errorf("%s #%d at the caller's time: told %v, %v; want nothing", c.name, i, rec.of(cctx), err)
				}
			}
			if allowed == 0 || refused == 0 && c.name != "peek" && c.name != "check of cost 0 (many.lua)" {
				t.Errorf("%s: %d admitted and %d refused, want both", c.name, allowed, refused)
			}
		}
		if got := st.LocalRefusalStats().Local; local != (got > 0) {
			t.Errorf("local refusals on %t: %d local refusals", local, got)
		}
	}

	// Calls that wait for Redis go in batches (batch_one.lua, batch.lua),
	// which decide at one TIME: each call has its own order there.
	rec := &decidedTimes{times: map[context.Context][]decidedAt{}}
	var mu sync.Mutex
	seen := map[[2]int64]bool{}
	batched := 0
	st := newTestStore(t, []string{srv.Addr}, Options{Failure: FailError, LocalRefusals: LocalRefusals{Off: true}, OnDecided: rec.record})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				p := &tb
				if i%2 == 1 {
					p = &sl
				}
				ctx, cancel := context.WithCancel(t.Context())
				before := time.Now().UnixMicro()
				var err error
				want := 1
				if g%2 == 0 {
					_, err = st.Allow(ctx, time.Time{}, sluice.Request{Policy: p, Key: "batch", Cost: 1})
				} else {
					_, err = st.AllowAll(ctx, time.Time{}, []sluice.Request{{Policy: p, Key: "batch", Cost: 1}, {Policy: &fw, Key: "batch", Cost: 1}}, nil)
					want = 2
				}
				after := time.Now().UnixMicro()
				got := rec.of(ctx)
				cancel()
				if err != nil || len(got) != want || got[0].at < before || got[0].at > after || want == 2 && got[1] != (decidedAt{"fw", "batch", got[0].at, got[0].order}) {
					t.Errorf("batched call: told %v, %v; want %d times within [%d, %d], one time and order", got, err, want, before, after)
					return
				}
				mu.Lock()
				if k := [2]int64{got[0].at, int64(got[0].order)}; seen[k] {
					t.Errorf("two calls were told time %d and order %d", k[0], k[1])
				} else {
					seen[k] = true
				}
				if got[0].order > 0 {
					batched++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if batched == 0 {
		t.Errorf("no call was told an order in a batch")
	}
}
