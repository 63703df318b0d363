package simulate

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// sliceSource is a Source over a slice of requests.
type sliceSource struct{ reqs []Request }

func (s *sliceSource) Next() (Request, error) {
	if len(s.reqs) == 0 {
		return Request{}, io.EOF
	}
	r := s.reqs[0]
	s.reqs = s.reqs[1:]
	return r, nil
}

// allPolicies returns one policy per algorithm with the same numbers; the
// window algorithms get no burst.
func allPolicies(limit int64, period time.Duration, burst int64) []sluice.Policy {
	var ps []sluice.Policy
	for _, a := range sluice.Algorithms() {
		p := sluice.Policy{Algorithm: a, Limit: limit, Period: period}
		if a.HasBurst() {
			p.Burst = burst
		}
		ps = append(ps, p)
	}
	return ps
}

// runAll runs reqs through policies and returns every decision, by request
// then by policy.
func runAll(t *testing.T, reqs []Request, policies []sluice.Policy) [][]sluice.Decision {
	t.Helper()
	var out [][]sluice.Decision
	err := Run(context.Background(), &sliceSource{reqs: reqs}, policies, func(_ Request, ds []sluice.Decision) error {
		out = append(out, append([]sluice.Decision(nil), ds...))
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return out
}

func TestRunOverCapacityIsADecision(t *testing.T) {
	reqs := []Request{{T: 1000, Key: "a", Cost: 5}, {T: 1000, Key: "a", Cost: 3}}
	got := runAll(t, reqs, allPolicies(3, time.Second, 0))
	for i, p := range allPolicies(3, time.Second, 0) {
		if d := got[0][i]; d.Allowed || d.RetryAfter != sluice.Never {
			t.Errorf("%s: cost 5 of 3: Allowed %v, RetryAfter %v; want false, Never", p.Algorithm, d.Allowed, d.RetryAfter)
		}
		if d := got[1][i]; !d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: cost 3 of 3 after a refused 5: Allowed %v, Remaining %d; want true, 0", p.Algorithm, d.Allowed, d.Remaining)
		}
	}
}

// TestRunPoliciesAreIndependent checks that running the six algorithms
// together decides exactly as running each alone, on a random trace.
func TestRunPoliciesAreIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var reqs []Request
	now := int64(1767268800000)
	for range 3000 {
		now += rng.Int64N(40)
		reqs = append(reqs, Request{T: now, Key: string(rune('a' + rng.IntN(3))), Cost: 1 + rng.Int64N(4)})
	}
	ps := allPolicies(20, 1500*time.Millisecond, 7)
	together := runAll(t, reqs, ps)
	for i, p := range ps {
		alone := runAll(t, reqs, []sluice.Policy{p})
		for j := range reqs {
			if together[j][i] != alone[j][0] {
				t.Fatalf("%s, request %d %v: together %+v, alone %+v", p.Algorithm, j, reqs[j], together[j][i], alone[j][0])
			}
		}
	}
}

// TestRunTimes checks that a request's t_ms is its instant: a fixed
// window of one second starts afresh exactly at a multiple of 1000 ms.
func TestRunTimes(t *testing.T) {
	reqs := []Request{{T: 1999, Key: "a", Cost: 1}, {T: 1999, Key: "a", Cost: 1}, {T: 2000, Key: "a", Cost: 1}}
	got := runAll(t, reqs, []sluice.Policy{sluice.FixedWindow(1, time.Second)})
	want := []bool{true, false, true}
	for i := range reqs {
		if got[i][0].Allowed != want[i] {
			t.Errorf("request %v: Allowed %v, want %v", reqs[i], got[i][0].Allowed, want[i])
		}
	}
	if got[1][0].RetryAfter != time.Millisecond {
		t.Errorf("RetryAfter at 1999 ms = %v, want 1ms", got[1][0].RetryAfter)
	}
}

func TestRunErrors(t *testing.T) {
	ok := []sluice.Policy{sluice.TokenBucket(10, time.Second, 0)}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	tests := []struct {
		name     string
		ctx      context.Context
		reqs     []Request
		policies []sluice.Policy
		observe  error
		want     string
		wantIs   error
	}{
		{name: "time backwards", reqs: []Request{{T: 5, Key: "a", Cost: 1}, {T: 4, Key: "b", Cost: 1}}, policies: ok,
			want: "simulate: request 2 at 4 ms is before the previous one at 5 ms"},
		{name: "time out of range", reqs: []Request{{T: MaxTime + 1, Key: "a", Cost: 1}}, policies: ok,
			want: "simulate: request 1: time 253402300800000 ms is outside 0 to 253402300799999"},
		{name: "invalid cost", reqs: []Request{{T: 5, Key: "a", Cost: -1}}, policies: ok, wantIs: sluice.ErrInvalidCost},
		{name: "no policy", want: "simulate: no policy"},
		{name: "invalid policy", policies: []sluice.Policy{sluice.FixedWindow(0, time.Second)}, wantIs: sluice.ErrInvalidPolicy},
		{name: "canceled", ctx: canceled, reqs: []Request{{T: 5, Key: "a", Cost: 1}}, policies: ok, wantIs: context.Canceled},
		{name: "observe fails", reqs: []Request{{T: 5, Key: "a", Cost: 1}}, policies: ok, observe: boom, wantIs: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			err := Run(ctx, &sliceSource{reqs: tt.reqs}, tt.policies, func(Request, []sluice.Decision) error { return tt.observe })
			switch {
			case err == nil:
				t.Fatalf("Run = nil, want an error")
			case tt.want != "" && err.Error() != tt.want:
				t.Errorf("Run = %q, want %q", err, tt.want)
			case tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Errorf("Run = %v, want an error wrapping %v", err, tt.wantIs)
			}
		})
	}
}

// TestBoundaryTrace checks the shipped example against the numbers its
// comment promises.
func TestBoundaryTrace(t *testing.T) {
	f, err := os.Open("../../examples/traces/boundary.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := allPolicies(100, time.Minute, 0)
	cmp := NewComparison(ps)
	err = Run(context.Background(), NewTraceReader(f), ps, func(req Request, ds []sluice.Decision) error {
		cmp.Add(req, ds)
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	const t59, t60 = 1767268859000, 1767268860000 // 2026-01-01T12:00:59Z and 12:01:00Z
	want := map[sluice.Algorithm]PolicyStats{
		sluice.TokenBucketAlgorithm:   {Admitted: 101, Denied: 99, CostAdmitted: 101, MaxCostInPeriod: 101, MaxCostFrom: t59, MaxCostTo: t60},
		sluice.GCRAAlgorithm:          {Admitted: 101, Denied: 99, CostAdmitted: 101, MaxCostInPeriod: 101, MaxCostFrom: t59, MaxCostTo: t60},
		sluice.LeakyBucketAlgorithm:   {Admitted: 101, Denied: 99, CostAdmitted: 101, MaxCostInPeriod: 101, MaxCostFrom: t59, MaxCostTo: t60, P99Delay: 59 * time.Second, MaxDelay: 59400 * time.Millisecond},
		sluice.FixedWindowAlgorithm:   {Admitted: 200, Denied: 0, CostAdmitted: 200, MaxCostInPeriod: 200, MaxCostFrom: t59, MaxCostTo: t60},
		sluice.SlidingLogAlgorithm:    {Admitted: 100, Denied: 100, CostAdmitted: 100, MaxCostInPeriod: 100, MaxCostFrom: t59, MaxCostTo: t59},
		sluice.SlidingWindowAlgorithm: {Admitted: 100, Denied: 100, CostAdmitted: 100, MaxCostInPeriod: 100, MaxCostFrom: t59, MaxCostTo: t59},
	}
	for _, got := range cmp.Stats() {
		w := want[got.Policy.Algorithm]
		w.Policy, w.MaxCostKey = got.Policy, "client-1"
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", got.Policy.Algorithm, got, w)
		}
	}
	if cmp.Span != (Span{Requests: 200, First: t59, Last: t60}) {
		t.Errorf("Span = %+v, want 200 requests from %d to %d", cmp.Span, int64(t59), int64(t60))
	}
	if got, want := cmp.Span.String(), "200 requests, 2026-01-01T12:00:59Z to 2026-01-01T12:01:00Z (1s)"; got != want {
		t.Errorf("Span.String() = %q, want %q", got, want)
	}
}

func TestSpanString(t *testing.T) {
	tests := []struct {
		span Span
		want string
	}{
		{Span{}, "no requests"},
		{Span{Requests: 1, First: 1500, Last: 1500}, "1 request, at 1970-01-01T00:00:01.5Z"},
		{Span{Requests: 3, First: 0, Last: MaxTime}, "3 requests, 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z (2932896 days)"},
	}
	for _, tt := range tests {
		if got := tt.span.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.span, got, tt.want)
		}
	}
}
