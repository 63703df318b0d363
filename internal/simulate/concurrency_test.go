package simulate

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestRunConcurrencyTimeline replays a hand-worked trace through a
// concurrency limit of 2 with a 30 s lease: each admitted request holds
// its unit until its end, t + duration.
func TestRunConcurrencyTimeline(t *testing.T) {
	const s = 1000 // ms
	tests := []struct {
		req                   Request
		allowed               bool
		remaining             int64
		retryAfter, resetAftr time.Duration
	}{
		// A holds 1 until 4 s (its lease would expire at 31 s).
		{Request{T: 1 * s, Key: "a", Cost: 1, Duration: 3 * s}, true, 1, 0, 30 * time.Second},
		// B holds 1 until 4.5 s (lease to 31.5 s).
		{Request{T: 1500, Key: "a", Cost: 1, Duration: 3 * s}, true, 0, 0, 30 * time.Second},
		// A third request while A and B run: refused. retry_after is the
		// time until A's lease would expire, 31 s, since a release is not
		// foreseen; reset_after until B's, 31.5 s.
		{Request{T: 2 * s, Key: "a", Cost: 1, Duration: 1 * s}, false, 0, 29 * time.Second, 29500 * time.Millisecond},
		// Another key has its own units.
		{Request{T: 3 * s, Key: "b", Cost: 2, Duration: 10 * s}, true, 0, 0, 30 * time.Second},
		// A ends at 4 s, released before this request: admitted, and with
		// duration 0 released right after its decision.
		{Request{T: 4 * s, Key: "a", Cost: 1}, true, 0, 0, 30 * time.Second},
		// So this one at the same instant fits too; it holds until 5 s.
		{Request{T: 4 * s, Key: "a", Cost: 1, Duration: 1 * s}, true, 0, 0, 30 * time.Second},
		// B and the last hold 2: refused until B's lease (31.5 s) expires.
		{Request{T: 4200, Key: "a", Cost: 1, Duration: 1 * s}, false, 0, 27300 * time.Millisecond, 29800 * time.Millisecond},
		// B ends at 4.5 s.
		{Request{T: 4500, Key: "a", Cost: 1, Duration: 500}, true, 0, 0, 30 * time.Second},
		// Cost 3 is more than the limit: never.
		{Request{T: 4500, Key: "a", Cost: 3, Duration: 500}, false, 0, sluice.Never, 30 * time.Second},
	}
	var reqs []Request
	for _, tt := range tests {
		reqs = append(reqs, tt.req)
	}
	got := runAll(t, reqs, []sluice.Policy{sluice.Concurrency(2, 30*time.Second)})
	for i, tt := range tests {
		d := got[i][0]
		if d.Allowed != tt.allowed || d.Remaining != tt.remaining || d.RetryAfter != tt.retryAfter || d.ResetAfter != tt.resetAftr {
			t.Errorf("request %d %+v: Allowed %v, Remaining %d, RetryAfter %v, ResetAfter %v; want %v, %d, %v, %v",
				i+1, tt.req, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, tt.allowed, tt.remaining, tt.retryAfter, tt.resetAftr)
		}
		if (d.Lease != "") != d.Allowed {
			t.Errorf("request %d: Lease %q with Allowed %v", i+1, d.Lease, d.Allowed)
		}
	}
}

// release is one release that run reported.
type release struct {
	policy int
	t      int64
	freed  bool
}

// TestRunReleasesAtEnds checks when run releases leases: in order of their
// ends, before a request at or after the end, at once for duration 0, and
// at their ends after the last request.
func TestRunReleasesAtEnds(t *testing.T) {
	reqs := []Request{
		{T: 100, Key: "a", Cost: 1, Duration: 900}, // ends at 1000
		{T: 200, Key: "b", Cost: 1, Duration: 300}, // ends at 500
		{T: 300, Key: "a", Cost: 1},                // released at 300
		{T: 500, Key: "c", Cost: 1, Duration: 50},  // b's end (500) first; ends at 550
		{T: 600, Key: "a", Cost: 1, Duration: 5000},
		{T: 600, Key: "a", Cost: 1, Duration: 10}, // refused under limit 2: nothing to release
	}
	ps := []sluice.Policy{sluice.TokenBucket(10, time.Second, 0), sluice.Concurrency(2, 10*time.Second)}
	var got []release
	var decided []int64 // the time of each release, recorded when the next request is decided
	err := run(context.Background(), &sliceSource{reqs: reqs}, ps, func(req Request, ds []sluice.Decision) error {
		if ds[0].Lease != "" {
			t.Errorf("token_bucket decision with a lease %q", ds[0].Lease)
		}
		decided = append(decided, int64(len(got)))
		return nil
	}, func(policy int, at int64, freed bool) {
		got = append(got, release{policy, at, freed})
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	want := []release{
		{1, 300, true},  // the duration-0 request, right after its decision
		{1, 500, true},  // b, before c's decision
		{1, 550, true},  // c, before the requests at 600
		{1, 1000, true}, // a's first, after the last request
		{1, 5600, true}, // and the one at 600
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("releases = %v, want %v", got, want)
	}
	// Releases seen by the time each request was observed.
	if want := []int64{0, 0, 1, 2, 3, 3}; !reflect.DeepEqual(decided, want) {
		t.Errorf("releases before each request = %v, want %v", decided, want)
	}
}

// TestRunDurationPastLease checks that a request that runs longer than the
// lease loses its units when the lease expires, as the store decides.
func TestRunDurationPastLease(t *testing.T) {
	reqs := []Request{
		{T: 0, Key: "a", Cost: 1, Duration: 5000},
		{T: 999, Key: "a", Cost: 1},
		{T: 1000, Key: "a", Cost: 1},
	}
	var releases int
	var got []bool
	err := run(context.Background(), &sliceSource{reqs: reqs}, []sluice.Policy{sluice.Concurrency(1, time.Second)},
		func(_ Request, ds []sluice.Decision) error {
			got = append(got, ds[0].Allowed)
			return nil
		}, func(int, int64, bool) { releases++ })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if want := []bool{true, false, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("Allowed = %v, want %v", got, want)
	}
	if releases != 1 { // only the duration-0 request at 1000
		t.Errorf("%d releases, want 1", releases)
	}
}

// TestRunConcurrencyModel checks Run against a model of the definition in
// docs/algorithms.md on random traces: an admitted request holds its cost
// over [T, min(T + Duration, T + lease)), and a request is admitted iff
// the units held at its time plus its cost fit the limit. The rate
// policies run beside it decide as without durations.
func TestRunConcurrencyModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const limit, leaseMS = 5, 700
	var reqs []Request
	now := int64(1767268800000)
	for range 4000 {
		now += rng.Int64N(30)
		reqs = append(reqs, Request{T: now, Key: string(rune('a' + rng.IntN(3))), Cost: 1 + rng.Int64N(3), Duration: rng.Int64N(1000)})
	}
	ps := append(allPolicies(20, 1500*time.Millisecond, 7), sluice.Concurrency(limit, leaseMS*time.Millisecond))
	got := runAll(t, reqs, ps)

	type interval struct{ from, to, cost int64 }
	held := make(map[string][]interval)
	for i, r := range reqs {
		var units int64
		for _, h := range held[r.Key] {
			if h.from <= r.T && r.T < h.to {
				units += h.cost
			}
		}
		allowed := units+r.Cost <= limit
		d := got[i][len(ps)-1]
		if d.Allowed != allowed {
			t.Fatalf("request %d %+v: Allowed %v, want %v (%d held)", i, r, d.Allowed, allowed, units)
		}
		if allowed {
			held[r.Key] = append(held[r.Key], interval{r.T, r.T + min(r.Duration, leaseMS), r.Cost})
			units += r.Cost
		}
		if d.Remaining != limit-units {
			t.Fatalf("request %d %+v: Remaining %d, want %d", i, r, d.Remaining, limit-units)
		}
	}

	plain := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Duration = 0
		plain[i] = r
	}
	without := runAll(t, plain, ps[:len(ps)-1])
	for j := range reqs {
		for i := range len(ps) - 1 {
			if got[j][i] != without[j][i] {
				t.Fatalf("%s, request %d: with durations %+v, without %+v", ps[i].Algorithm, j, got[j][i], without[j][i])
			}
		}
	}
}
