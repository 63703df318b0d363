package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestKeySummary(t *testing.T) {
	p := sluice.LeakyBucket(2, time.Second, 0)
	sum := NewKeySummary(p)
	reqs := []Request{
		{T: 1000, Key: "b", Cost: 1}, {T: 1000, Key: "a", Cost: 1}, {T: 1000, Key: "b", Cost: 1}, {T: 1000, Key: "b", Cost: 1}, {T: 1000, Key: "a", Cost: 5}, {T: 1250, Key: "a", Cost: 1},
	}
	err := Run(t.Context(), &sliceSource{reqs: reqs}, []sluice.Policy{p}, func(r Request, ds []sluice.Decision) error {
		sum.Add(r, ds[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyStats{
		{Key: "b", Requests: 3, Admitted: 2, Denied: 1, Cost: 3, CostAdmitted: 2, MaxDelay: 500 * time.Millisecond},
		{Key: "a", Requests: 3, Admitted: 2, Denied: 1, OverCapacity: 1, Cost: 7, CostAdmitted: 2, MaxDelay: 250 * time.Millisecond},
	}
	if got := sum.Keys(); !slices.Equal(got, want) {
		t.Errorf("Keys() = %+v, want %+v", got, want)
	}
	got := table(t, sum)
	lines := strings.Split(got, "\n")
	wantLines := []string{
		"Trace: 6 requests, 1970-01-01T00:00:01Z to 1970-01-01T00:00:01.25Z (250ms), 2 keys",
		"Policy: leaky_bucket, limit 2 per 1s, burst 2",
		"",
	}
	if !slices.Equal(lines[:3], wantLines) {
		t.Errorf("heading = %q, want %q", lines[:3], wantLines)
	}
	for i, want := range [][]string{
		{"KEY", "REQUESTS", "ADMITTED", "DENIED", "COST", "COST ADMITTED", "MAX DELAY"},
		{"b", "3", "2", "1", "3", "2", "500ms"},
		{"a", "3", "2", "1", "7", "2", "250ms"},
		{"TOTAL", "6", "4", "2", "10", "4", "500ms"},
	} {
		if got := columns(lines[3+i]); !slices.Equal(got, want) {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
	if want := "1 of the denied requests cost more than the capacity, 2: they can never be admitted.\n"; !strings.HasSuffix(got, want) {
		t.Errorf("table does not end with %q:\n%s", want, got)
	}
}

func TestKeySummaryOneKey(t *testing.T) {
	sum := NewKeySummary(sluice.FixedWindow(1, time.Second))
	sum.Add(Request{T: 0, Key: "k", Cost: 1}, sluice.Decision{Allowed: true})
	got := table(t, sum)
	if !strings.Contains(got, "Trace: 1 request, at 1970-01-01T00:00:00Z, 1 key\nPolicy: fixed_window, limit 1 per 1s\n") {
		t.Errorf("heading wrong:\n%s", got)
	}
	if strings.Contains(got, "TOTAL") || strings.Contains(got, "never") {
		t.Errorf("one key with no oversized request: want no TOTAL row and no note:\n%s", got)
	}
}

// TestKeySummaryConcurrency checks the summary of a concurrency policy:
// the table's rows count as for the rate algorithms, and its heading
// names the lease.
func TestKeySummaryConcurrency(t *testing.T) {
	p := sluice.Concurrency(2, 30*time.Second)
	sum := NewKeySummary(p)
	reqs := []Request{
		{T: 1000, Key: "a", Cost: 1, Duration: 3000},
		{T: 1500, Key: "a", Cost: 1, Duration: 3000},
		{T: 2000, Key: "a", Cost: 1, Duration: 1000},
		{T: 4000, Key: "a", Cost: 1},
		{T: 4000, Key: "a", Cost: 3},
	}
	err := Run(t.Context(), &sliceSource{reqs: reqs}, []sluice.Policy{p}, func(r Request, ds []sluice.Decision) error {
		sum.Add(r, ds[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyStats{{Key: "a", Requests: 5, Admitted: 3, Denied: 2, OverCapacity: 1, Cost: 7, CostAdmitted: 3, MaxHeld: 2}}
	if got := sum.Keys(); !slices.Equal(got, want) {
		t.Errorf("Keys() = %+v, want %+v", got, want)
	}
	got := table(t, sum)
	if want := "Policy: concurrency, limit 2 held at once, lease 30s\n"; !strings.Contains(got, want) {
		t.Errorf("table:\n%s\nwant a line %q", got, want)
	}
	if want := "1 of the denied requests cost more than the capacity, 2"; !strings.Contains(got, want) {
		t.Errorf("table:\n%s\nwant %q", got, want)
	}
}
