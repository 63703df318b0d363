package simulate

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
)

// TestReplayEntryTimes replays decisions whose dry run was decided after
// a window's edge that the enforced limit's call came before (Entry.At):
// each limit is decided at its own time, and nothing changes.
func TestReplayEntryTimes(t *testing.T) {
	limits := map[string]ReplayLimit{
		"enforced": {Policy: sluice.FixedWindow(1, time.Second).Named("enforced")},
		"dry":      {Policy: sluice.FixedWindow(1, time.Second).Named("dry"), Shadow: true},
	}
	edge := time.Unix(1800000000, 0).UTC()
	at := func(us int64) time.Time { return edge.Add(time.Duration(us) * time.Microsecond) }
	rec := func(us int64, enforced, dry string, dryAt int64) *decisionlog.Record {
		r := &decisionlog.Record{Time: at(us), Door: "check", Limits: []decisionlog.Entry{
			{Limit: "enforced", Key: "k", Cost: 1, Outcome: enforced},
			{Limit: "dry", Key: "k", Cost: 1, Outcome: dry},
		}}
		if dryAt != us {
			r.Limits[1].At = at(dryAt)
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		records []*decisionlog.Record
	}{
		{"one time", []*decisionlog.Record{
			rec(-300, "allowed", "allowed", -300),
			rec(-200, "denied", "shadow_denied", -200),
			rec(100, "allowed", "allowed", 100),
		}},
		// The second decision's enforced limit was refused before the
		// edge; its dry run, decided after it (and peeked, the request
		// being refused), would have passed.
		{"dry run after the edge", []*decisionlog.Record{
			rec(-300, "allowed", "allowed", -300),
			rec(-100, "denied", "allowed", 50),
			rec(100, "allowed", "allowed", 100),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReplay(limits, "")
			defer r.Close()
			for _, rec := range tc.records {
				if err := r.Add(t.Context(), rec); err != nil {
					t.Fatal(err)
				}
			}
			rep := r.Report()
			for _, g := range rep.Limits {
				if g.NewlyRefused != 0 || g.NewlyAdmitted != 0 {
					t.Errorf("limit %s: %d newly refused, %d newly admitted; want none", g.Limit, g.NewlyRefused, g.NewlyAdmitted)
				}
			}
			if rep.Replayed != len(tc.records) || rep.Changed != 0 {
				t.Errorf("replayed %d, changed %d; want %d and 0", rep.Replayed, rep.Changed, len(tc.records))
			}
		})
	}
}

// TestSortRecords orders records by time, keeping the log's order
// between equal times.
func TestSortRecords(t *testing.T) {
	base := time.Unix(1800000000, 0).UTC()
	var records []*decisionlog.Record
	for i, us := range []int64{5, 1, 3, 1, 2} {
		records = append(records, &decisionlog.Record{Time: base.Add(time.Duration(us) * time.Microsecond), Door: "check", Rule: string(rune('a' + i))})
	}
	SortRecords(records)
	got := ""
	for _, r := range records {
		got += r.Rule
	}
	if want := "bdeca"; got != want {
		t.Errorf("SortRecords: order %q, want %q", got, want)
	}
}
