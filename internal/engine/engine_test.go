package engine_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

var t0 = time.Unix(1_700_000_000, 0)

func decide(t *testing.T, st sluice.Store, checks ...engine.Check) (engine.Outcome, []engine.CheckResult) {
	t.Helper()
	res := make([]engine.CheckResult, len(checks))
	var o engine.Outcome
	engine.Decide(context.Background(), st, t0, checks, res, &o)
	return o, res
}

// check is a check of cost units of p on key, of mode (Enforced when
// none is given).
func check(p *sluice.Policy, key string, cost int64, mode ...engine.Mode) engine.Check {
	c := engine.Check{Request: sluice.Request{Policy: p, Key: key, Cost: cost}}
	if len(mode) > 0 {
		c.Mode = mode[0]
	}
	return c
}

func remaining(t *testing.T, st sluice.Store, p sluice.Policy, key string) int64 {
	t.Helper()
	d, err := engine.State(context.Background(), st, t0, check(&p, key, 0))
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func TestNever(t *testing.T) {
	p := sluice.TokenBucket(20, time.Minute, 0).Named("small")
	other := sluice.FixedWindow(100, time.Minute).Named("other")
	tests := []struct {
		name   string
		checks []engine.Check
		denied []bool
	}{
		{"single", []engine.Check{check(&p, "a", 21)}, []bool{true}},
		{"summed", []engine.Check{check(&p, "a", 15), check(&p, "a", 15)}, []bool{true, true}},
		{"summed beside another", []engine.Check{check(&other, "a", 1), check(&p, "a", 15), check(&p, "a", 6)}, []bool{false, true, true}},
		{"summed with a deferred check", []engine.Check{check(&p, "a", 15), check(&p, "a", 15, engine.Deferred)}, []bool{true, true}},
		{"overflowing sum", []engine.Check{check(&p, "a", 1<<62), check(&p, "a", 1<<62), check(&p, "a", 1<<62)}, []bool{true, true, true}},
		{"zero limit", []engine.Check{check(&sluice.Policy{}, "a", 1)}, []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := memstore.New(memstore.Options{})
			o, res := decide(t, st, tt.checks...)
			if o.Allowed || o.Err != nil || !o.Never() || o.Decision.RetryAfter != sluice.Never {
				t.Errorf("Decide = %+v, want a refusal with RetryAfter Never and no error", o)
			}
			for i, r := range res {
				if r.Denied != tt.denied[i] || r.Charged || r.Err != nil {
					t.Errorf("result %d = %+v, want Denied %v, nothing charged, no error", i, r, tt.denied[i])
				}
				if r.Denied && r.Decision.RetryAfter != sluice.Never {
					t.Errorf("result %d RetryAfter = %v, want Never", i, r.Decision.RetryAfter)
				}
			}
			if got := remaining(t, st, p, "a"); got != 20 {
				t.Errorf("small remaining = %d, want 20 (nothing charged)", got)
			}
			if got := remaining(t, st, other, "a"); got != 100 {
				t.Errorf("other remaining = %d, want 100 (nothing charged)", got)
			}
		})
	}
}

// Checks that share a policy but not a key, or a key but not a policy,
// charge different counters: their costs are not summed.
func TestDifferentCountersNotSummed(t *testing.T) {
	p := sluice.TokenBucket(20, time.Minute, 0).Named("small")
	st := memstore.New(memstore.Options{})
	o, _ := decide(t, st, check(&p, "a", 15), check(&p, "b", 15),
		check(new(p.Named("other")), "a", 15))
	if !o.Allowed {
		t.Fatalf("Decide = %+v, want allowed", o)
	}
	if got := remaining(t, st, p, "a"); got != 5 {
		t.Errorf("remaining = %d, want 5", got)
	}
}

func TestShadow(t *testing.T) {
	enforced := sluice.FixedWindow(1, time.Minute).Named("enforced")
	trial := sluice.FixedWindow(1, time.Minute).Named("trial")
	st := memstore.New(memstore.Options{})
	checks := []engine.Check{check(&enforced, "a", 1), check(&trial, "a", 1, engine.Shadow)}
	o, res := decide(t, st, checks...)
	if !o.Allowed || o.DryRunDenied || !res[1].Charged {
		t.Fatalf("first = %+v %+v, want allowed, the trial charged", o, res)
	}
	o, res = decide(t, st, checks...)
	if o.Allowed || !o.DryRunDenied || !res[1].Denied || res[1].Charged {
		t.Errorf("second = %+v %+v, want refused, the trial would refuse", o, res)
	}
	// A shadow check never refuses, even when it can never pass.
	o, res = decide(t, st, check(&trial, "b", 2, engine.Shadow))
	if !o.Allowed || !o.DryRunDenied || res[0].Decision.RetryAfter != sluice.Never {
		t.Errorf("impossible shadow = %+v %+v, want allowed, dry-run denied with Never", o, res)
	}
}

// A shadow group is decided all or nothing, apart from the enforced
// checks and from the other groups.
func TestShadowGroup(t *testing.T) {
	wide := sluice.FixedWindow(10, time.Minute).Named("wide")
	narrow := sluice.FixedWindow(1, time.Minute).Named("narrow")
	st := memstore.New(memstore.Options{})
	group := []engine.Check{{Request: sluice.Request{Policy: &wide, Key: "a", Cost: 1}, Mode: engine.Shadow, Group: 1}, {Request: sluice.Request{Policy: &narrow, Key: "a", Cost: 1}, Mode: engine.Shadow, Group: 1}}
	decide(t, st, group...)
	o, res := decide(t, st, group...)
	if !o.Allowed || !o.DryRunDenied || res[0].Charged || res[0].Denied || !res[1].Denied {
		t.Errorf("second = %+v %+v, want allowed, narrow denying, wide not charged", o, res)
	}
	if got := remaining(t, st, wide, "a"); got != 9 {
		t.Errorf("wide remaining = %d, want 9", got)
	}
}

func TestDeferred(t *testing.T) {
	login := sluice.FixedWindow(1, time.Minute).Named("login")
	api := sluice.FixedWindow(10, time.Minute).Named("api")
	st := memstore.New(memstore.Options{})
	checks := []engine.Check{check(&api, "a", 1), check(&login, "a", 1, engine.Deferred)}
	o, res := decide(t, st, checks...)
	if !o.Allowed || !res[0].Charged || res[1].Charged {
		t.Fatalf("first = %+v %+v, want allowed, api charged, login only peeked", o, res)
	}
	if _, err := st.Allow(context.Background(), t0, sluice.Request{Policy: &login, Key: "a", Cost: 1}); err != nil {
		t.Fatal(err) // the door charges the deferred check after the response
	}
	o, res = decide(t, st, checks...)
	if o.Allowed || o.Decider != 1 || res[0].Charged || !res[1].Denied {
		t.Errorf("second = %+v %+v, want refused by login, api not charged", o, res)
	}
	if got := remaining(t, st, api, "a"); got != 9 {
		t.Errorf("api remaining = %d, want 9", got)
	}
}

func TestStoreError(t *testing.T) {
	boom := errors.New("boom")
	o, res := decide(t, teststore.Failing{Err: boom}, check(new(sluice.FixedWindow(1, time.Minute)), "a", 1),
		check(new(sluice.FixedWindow(2, time.Minute)), "a", 1))
	if o.Allowed || !errors.Is(o.Err, boom) || !errors.Is(res[0].Err, boom) || o.Never() {
		t.Errorf("Decide = %+v %+v, want the store's error", o, res)
	}
	// A store that reports a cost it can never admit refuses: no error.
	o, _ = decide(t, teststore.Failing{Err: sluice.ErrCostExceedsCapacity}, check(new(sluice.FixedWindow(1, time.Minute)), "a", 1))
	if o.Allowed || o.Err != nil || !o.Never() {
		t.Errorf("Decide over ErrCostExceedsCapacity = %+v, want a refusal with RetryAfter Never", o)
	}
}

func TestDegraded(t *testing.T) {
	d := sluice.Decision{Allowed: false, Degraded: true, RetryAfter: time.Second}
	o, res := decide(t, teststore.Failing{Degraded: &d}, check(new(sluice.FixedWindow(5, time.Minute)), "a", 1),
		check(new(sluice.FixedWindow(2, time.Minute)), "a", 1))
	if o.Allowed || !o.Decision.Degraded || o.Err != nil {
		t.Errorf("Decide = %+v, want refused and degraded", o)
	}
	for i, r := range res {
		if r.Decision.Allowed || !r.Decision.Degraded || !r.Denied {
			t.Errorf("result %d = %+v, want the failure policy's refusal", i, r)
		}
	}
}

// policies are one small policy of every algorithm, for the random
// requests of TestOneCheckWithShadow and TestEnforcedWithShadow; roomy is
// a limit that never refuses them.
var (
	policies = []sluice.Policy{
		sluice.TokenBucket(5, time.Second, 8).Named("tb"),
		sluice.GCRA(3, time.Second, 4).Named("gcra"),
		sluice.LeakyBucket(4, time.Second, 6).Named("lb"),
		sluice.FixedWindow(7, time.Second).Named("fw"),
		sluice.SlidingWindow(6, time.Second).Named("sw"),
		sluice.SlidingLog(5, time.Second).Named("sl"),
	}
	roomy = sluice.TokenBucket(1_000_000, time.Second, 0).Named("roomy")
)

// TestOneCheckWithShadow checks that a shadow check changes nothing of
// the decision on a request's enforced check: two stores on one clock see
// the same requests, one alone (one check, the store's Allow) and one with
// a shadow check beside it on another key of a limit that never refuses;
// the outcomes and the enforced check's results must be the same, for
// every algorithm and random costs.
func TestOneCheckWithShadow(t *testing.T) {
	ctx := context.Background()
	alone, beside, clock := teststore.Twins(t0)
	rnd := testkit.Rand(7)
	next := func(n uint64) uint64 { return rnd.Next() % n }
	for i := range 3000 {
		clock.Advance(time.Duration(next(300)) * time.Millisecond)
		p := policies[next(uint64(len(policies)))]
		c := check(&p, "k"+string(rune('a'+next(3))), 1+int64(next(uint64(p.Capacity()))))
		if p.Algorithm == sluice.LeakyBucketAlgorithm && next(2) == 0 {
			c.MaxDelay = time.Duration(next(2000)) * time.Millisecond
		}
		one := make([]engine.CheckResult, 1)
		var got, want engine.Outcome
		engine.Decide(ctx, alone, time.Time{}, []engine.Check{c}, one, &got)
		two := make([]engine.CheckResult, 2)
		engine.Decide(ctx, beside, time.Time{}, []engine.Check{c, check(&roomy, "other", 1, engine.Shadow)}, two, &want)
		if got != want || one[0] != two[0] {
			t.Fatalf("request %d (%+v): alone %+v %+v, with a shadow check %+v %+v", i, c, got, one[0], want, two[0])
		}
	}
}

// TestEnforcedWithShadow is TestOneCheckWithShadow for two or three
// enforced checks (the store's AllowAll, or a refusal before it when their
// summed cost on one policy and key exceeds its capacity), for every
// algorithm, shared and separate keys and policies, and random costs. The
// requests alone go through one Buffers, as a door that keeps its own.
func TestEnforcedWithShadow(t *testing.T) {
	ctx := context.Background()
	alone, beside, clock := teststore.Twins(t0)
	rnd := testkit.Rand(11)
	next := func(n uint64) uint64 { return rnd.Next() % n }
	fitting := 0
	var buf engine.Buffers // a door's, kept across its requests
	for i := range 6000 {
		clock.Advance(time.Duration(next(300)) * time.Millisecond)
		checks := make([]engine.Check, 2+next(2))
		fits := true
		var total int64
		for j := range checks {
			p := policies[next(uint64(len(policies)))]
			c := check(&p, "k"+string(rune('a'+next(2))), 1+int64(next(3)))
			if p.Algorithm == sluice.LeakyBucketAlgorithm && next(2) == 0 {
				c.MaxDelay = time.Duration(next(2000)) * time.Millisecond
			}
			checks[j] = c
			total += c.Cost
		}
		for _, c := range checks {
			fits = fits && total <= c.Policy.Capacity()
		}
		if fits {
			fitting++
		}
		got := make([]engine.CheckResult, len(checks))
		var o, w engine.Outcome
		buf.Decide(ctx, alone, time.Time{}, checks, got, &o)
		want := make([]engine.CheckResult, len(checks)+1)
		engine.Decide(ctx, beside, time.Time{}, append(checks, check(&roomy, "other", 1, engine.Shadow)), want, &w)
		if o != w || !slices.Equal(got, want[:len(checks)]) {
			t.Fatalf("request %d (%+v): alone %+v %+v, with a shadow check %+v %+v", i, checks, o, got, w, want)
		}
	}
	if fitting < 1000 {
		t.Fatalf("only %d of the requests fit every capacity", fitting)
	}
}

// TestBudgetAndSettle checks a budget of tokens checked at cost 0 beside a
// rate charged per request, settled after the response: Settle maps each
// check's actual cost to the store request Decide sent, a rate check
// keeps its cost, and a spent budget refuses the next request, charging
// the rate nothing.
func TestBudgetAndSettle(t *testing.T) {
	tokens := sluice.FixedWindow(100, time.Hour).Named("tokens")
	calls := sluice.FixedWindow(10, time.Hour).Named("calls")
	st := memstore.New(memstore.Options{})
	ctx := context.Background()
	checks := []engine.Check{
		check(&calls, "k", 1),
		check(&calls, "free", 0), // reported, not decided
		{Request: sluice.Request{Policy: &tokens, Key: "k", Cost: 0, SettleWithin: time.Minute}, Budget: true},
	}
	o, res := decide(t, st, checks...)
	if !o.Allowed || o.Decision.Lease == "" || !res[2].Charged || res[1].Charged {
		t.Fatalf("first = %+v %+v, want allowed with a lease, the budget decided", o, res)
	}
	if ok, err := engine.Settle(ctx, st, t0, o.Decision.Lease, checks, []int64{-1, -1, 120}); err != nil || !ok {
		t.Fatalf("Settle(120) = %v, %v; want true, nil", ok, err)
	}
	if got := remaining(t, st, calls, "k"); got != 9 {
		t.Errorf("calls remaining after the settlement = %d, want 9 (the rate keeps its cost)", got)
	}
	o, res = decide(t, st, checks...)
	if o.Allowed || !res[2].Denied || res[0].Charged {
		t.Fatalf("second, 120 of 100 tokens spent = %+v %+v, want refused by the budget, the rate not charged", o, res)
	}
	if got := remaining(t, st, calls, "k"); got != 9 {
		t.Errorf("calls remaining after the refusal = %d, want 9", got)
	}
	// A check of cost 0 without Budget reports and never refuses.
	o, _ = decide(t, st, check(&tokens, "k", 0))
	if !o.Allowed {
		t.Errorf("a cost-0 check that is not a budget = %+v, want allowed (reported only)", o)
	}
}

// dirty sets every field of *v (a struct), and of the structs it holds,
// to a value that is not its zero value.
func dirty(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.String:
			f.SetString("stale")
		case reflect.Interface:
			f.Set(reflect.ValueOf(errors.New("stale")))
		case reflect.Struct:
			dirty(f)
		default:
			panic("dirty: a field of kind " + f.Kind().String())
		}
	}
}

// TestDecideOverwrites checks that Decide's results do not depend on what
// res and the Outcome held before: doors reuse them from request to
// request, and Decide resets them field by field.
func TestDecideOverwrites(t *testing.T) {
	p := sluice.FixedWindow(3, time.Minute).Named("p")
	q := sluice.FixedWindow(1, time.Minute).Named("q")
	for _, tc := range []struct {
		name   string
		checks []engine.Check
	}{
		{"one", []engine.Check{check(&p, "a", 1)}},
		{"refused", []engine.Check{check(&p, "a", 4)}},
		{"free", []engine.Check{check(&p, "a", 0)}},
		{"shadow", []engine.Check{check(&q, "a", 1, engine.Shadow)}},
		{"two", []engine.Check{check(&p, "a", 1), check(&q, "a", 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 3 {
				clean, dirtyStore := memstore.New(memstore.Options{}), memstore.New(memstore.Options{})
				for range round { // the same history on both
					decide(t, clean, tc.checks...)
					decide(t, dirtyStore, tc.checks...)
				}
				want, wantRes := decide(t, clean, tc.checks...)
				res := make([]engine.CheckResult, len(tc.checks))
				var o engine.Outcome
				dirty(reflect.ValueOf(&o).Elem())
				for i := range res {
					dirty(reflect.ValueOf(&res[i]).Elem())
				}
				engine.Decide(context.Background(), dirtyStore, t0, tc.checks, res, &o)
				if !reflect.DeepEqual(o, want) || !reflect.DeepEqual(res, wantRes) {
					t.Errorf("round %d: from stale buffers\n%+v %+v\nwant\n%+v %+v", round, o, res, want, wantRes)
				}
			}
		})
	}
}

// sentStore records the requests Decide sends to the memory store.
type sentStore struct {
	*memstore.Store
	sent []sluice.Request
}

func (s *sentStore) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	s.sent = append(s.sent, req)
	return s.Store.Allow(ctx, now, req)
}

func (s *sentStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	s.sent = append(s.sent, reqs...)
	return s.Store.AllowAll(ctx, now, reqs, out)
}

func (s *sentStore) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	s.sent = append(s.sent, req)
	return s.Store.Peek(ctx, now, req)
}

// TestShadowSendsNoEstimate: a Check carries the store request it sends,
// SettleWithin too, but a shadow check's estimate is a dry run's: the
// store is sent it without SettleWithin, alone or in a group, charged or
// peeked, while the enforced check's estimate takes the lease.
func TestShadowSendsNoEstimate(t *testing.T) {
	tokens := sluice.FixedWindow(100, time.Hour).Named("tokens")
	trial := sluice.FixedWindow(1, time.Hour).Named("trial")
	wide := sluice.FixedWindow(5, time.Hour).Named("wide")
	st := &sentStore{Store: memstore.New(memstore.Options{})}
	estimate := func(p *sluice.Policy, cost int64, mode engine.Mode, group int) engine.Check {
		return engine.Check{Request: sluice.Request{Policy: p, Key: "k", Cost: cost, SettleWithin: time.Minute}, Mode: mode, Group: group, Budget: true}
	}
	checks := []engine.Check{
		estimate(&tokens, 10, engine.Enforced, 0),
		estimate(&trial, 1, engine.Shadow, 0),
		estimate(&wide, 1, engine.Shadow, 1),
		estimate(&trial, 1, engine.Shadow, 1),
	}
	for round, want := range []bool{true, true, false} {
		if round == 2 {
			checks[0].Cost = 90 // of 80 left, refused: the shadow checks are peeked
		}
		st.sent = st.sent[:0]
		o, _ := decide(t, st, checks...)
		if o.Allowed != want || want && o.Decision.Lease == "" {
			t.Fatalf("round %d: Decide = %+v, want allowed %t, with a lease when allowed", round, o, want)
		}
		shadows := 0
		for _, r := range st.sent {
			switch {
			case r.Policy == &tokens && r.SettleWithin != time.Minute:
				t.Errorf("round %d: the enforced estimate was sent with SettleWithin %v", round, r.SettleWithin)
			case r.Policy != &tokens:
				shadows++
				if r.SettleWithin != 0 {
					t.Errorf("round %d: a shadow check of %s was sent with SettleWithin %v", round, r.Policy.Name, r.SettleWithin)
				}
			}
		}
		if shadows < 3 {
			t.Errorf("round %d: %d shadow requests sent (%+v), want at least 3", round, shadows, st.sent)
		}
	}
}
