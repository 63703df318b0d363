package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestInspect replays a timeline per algorithm: requests at given offsets,
// then an Inspect whose State must match, field for field, the numbers
// worked out by hand from the definitions.
func TestInspect(t *testing.T) {
	base := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC) // on a minute boundary
	ms := time.Millisecond
	tests := []struct {
		name    string
		policy  sluice.Policy
		allow   []time.Duration // offsets of cost-1 requests
		at      time.Duration   // offset of the Inspect
		want    sluice.State    // At and Decision.Limit are filled in
		wantLen int             // keys tracked after the Inspect
	}{
		{
			name:   "token bucket untracked",
			policy: sluice.TokenBucket(10, time.Second, 0),
			at:     0,
			want: sluice.State{
				Decision: sluice.Decision{Allowed: true, Remaining: 9, ResetAfter: 100 * ms},
				Tokens:   sluice.Amount{Whole: 10, Den: 1_000_000},
				Queued:   sluice.Amount{Den: 1_000_000},
			},
		},
		{
			name:   "token bucket half a token back",
			policy: sluice.TokenBucket(10, time.Second, 0),
			allow:  []time.Duration{0, 0, 0},
			at:     50 * ms,
			want: sluice.State{
				Tracked:  true,
				Decision: sluice.Decision{Allowed: true, Remaining: 6, ResetAfter: 350 * ms},
				Tokens:   sluice.Amount{Whole: 7, Num: 500_000, Den: 1_000_000},
				Queued:   sluice.Amount{Whole: 2, Num: 500_000, Den: 1_000_000},
				Backlog:  250 * ms,
			},
			wantLen: 1,
		},
		{
			name:   "gcra empty",
			policy: sluice.GCRA(3, time.Second, 2),
			allow:  []time.Duration{0, 0},
			at:     0,
			want: sluice.State{
				Tracked:  true,
				Decision: sluice.Decision{RetryAfter: 334 * ms, ResetAfter: 667 * ms},
				Tokens:   sluice.Amount{Den: 1_000_000},
				Queued:   sluice.Amount{Whole: 2, Den: 1_000_000},
				Backlog:  666_667 * time.Microsecond, // 2/3 s rounded up to the µs
			},
			wantLen: 1,
		},
		{
			name:   "leaky bucket queue and delay",
			policy: sluice.LeakyBucket(10, time.Second, 5),
			allow:  []time.Duration{0, 0, 0},
			at:     20 * ms,
			want: sluice.State{
				Tracked:  true,
				Decision: sluice.Decision{Allowed: true, Remaining: 1, ResetAfter: 380 * ms, Delay: 280 * ms},
				Tokens:   sluice.Amount{Whole: 2, Num: 200_000, Den: 1_000_000},
				Queued:   sluice.Amount{Whole: 2, Num: 800_000, Den: 1_000_000},
				Backlog:  280 * ms,
			},
			wantLen: 1,
		},
		{
			name:   "fixed window",
			policy: sluice.FixedWindow(5, time.Minute),
			allow:  []time.Duration{10 * time.Second, 20 * time.Second},
			at:     45 * time.Second,
			want: sluice.State{
				Tracked:     true,
				Decision:    sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: 15 * time.Second},
				WindowStart: base,
				WindowEnd:   base.Add(time.Minute),
				Current:     2,
				Estimate:    sluice.Amount{Whole: 2, Den: 60_000_000},
			},
			wantLen: 1,
		},
		{
			name:   "sliding window estimate",
			policy: sluice.SlidingWindow(10, time.Minute),
			// 4 in the first window, 1 in the second; 15 s into the second
			// window the estimate is 4·45/60 + 1 = 4.
			allow: []time.Duration{time.Second, time.Second, 2 * time.Second, 3 * time.Second, 61 * time.Second},
			at:    75 * time.Second,
			want: sluice.State{
				Tracked:     true,
				Decision:    sluice.Decision{Allowed: true, Remaining: 5, ResetAfter: 105 * time.Second},
				WindowStart: base.Add(time.Minute),
				WindowEnd:   base.Add(2 * time.Minute),
				Previous:    4,
				Current:     1,
				Estimate:    sluice.Amount{Whole: 4, Den: 60_000_000},
			},
			wantLen: 1,
		},
		{
			name:   "sliding window fractional estimate",
			policy: sluice.SlidingWindow(10, time.Minute),
			allow:  []time.Duration{0, 0, 0},
			at:     80 * time.Second, // 3·40/60 = 2
			want: sluice.State{
				Tracked:     true,
				Decision:    sluice.Decision{Allowed: true, Remaining: 7, ResetAfter: 100 * time.Second},
				WindowStart: base.Add(time.Minute),
				WindowEnd:   base.Add(2 * time.Minute),
				Previous:    3,
				Estimate:    sluice.Amount{Whole: 2, Den: 60_000_000},
			},
			wantLen: 1,
		},
		{
			name:   "sliding log",
			policy: sluice.SlidingLog(3, time.Minute),
			allow:  []time.Duration{time.Second, 30 * time.Second, 30 * time.Second},
			at:     40 * time.Second, // full until the entry at 1 s stops counting
			want: sluice.State{
				Tracked:  true,
				Decision: sluice.Decision{RetryAfter: 21 * time.Second, ResetAfter: 50 * time.Second},
				Entries:  2, // the two requests at 30 s share one entry
				Counted:  3,
				Oldest:   base.Add(time.Second),
				Newest:   base.Add(30 * time.Second),
			},
			wantLen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := New(Options{})
			for _, off := range tt.allow {
				if d, err := s.Allow(ctx, base.Add(off), sluice.Request{Policy: &tt.policy, Key: "k", Cost: 1}); err != nil || !d.Allowed {
					t.Fatalf("Allow(+%v) = %+v, %v; want allowed", off, d, err)
				}
			}
			req := sluice.Request{Policy: &tt.policy, Key: "k", Cost: 1}
			got, err := s.Inspect(ctx, base.Add(tt.at), req)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			want := tt.want
			want.At = base.Add(tt.at)
			want.Decision.Limit = tt.policy.Limit
			if got != want {
				t.Errorf("Inspect(+%v) =\n%+v\nwant\n%+v", tt.at, got, want)
			}
			peek, err := s.Peek(ctx, base.Add(tt.at), req)
			if err != nil || peek != got.Decision {
				t.Errorf("Peek = %+v, %v, want Inspect's decision %+v", peek, err, got.Decision)
			}
			if n := s.Len(); n != tt.wantLen {
				t.Errorf("Len() after Inspect = %d, want %d", n, tt.wantLen)
			}
		})
	}
}

// TestInspectChargesNothing inspects a key between requests and checks
// that the requests decide exactly as without the inspections.
func TestInspectChargesNothing(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	for _, p := range []sluice.Policy{
		sluice.TokenBucket(5, time.Second, 3), sluice.LeakyBucket(5, time.Second, 3),
		sluice.FixedWindow(3, time.Second), sluice.SlidingWindow(3, time.Second), sluice.SlidingLog(3, time.Second),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			plain, inspected := New(Options{}), New(Options{})
			for i := range 40 {
				at := base.Add(time.Duration(i) * 70 * time.Millisecond)
				req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
				if _, err := inspected.Inspect(ctx, at, req); err != nil {
					t.Fatal(err)
				}
				want, _ := plain.Allow(ctx, at, req)
				got, _ := inspected.Allow(ctx, at, req)
				if got != want {
					t.Fatalf("Allow(%d) after Inspect = %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestInspectErrors(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	p := sluice.TokenBucket(5, time.Second, 0)
	if _, err := s.Inspect(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: -1}); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("Inspect(cost -1) error = %v, want ErrInvalidCost", err)
	}
	if _, err := s.Inspect(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "k", Cost: 6}); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("Inspect(cost 6) error = %v, want ErrCostExceedsCapacity", err)
	}
	if _, err := s.Inspect(ctx, time.Time{}, sluice.Request{Policy: &sluice.Policy{}, Key: "k", Cost: 1}); err == nil {
		t.Error("Inspect(zero policy) error = nil, want one")
	}
}
