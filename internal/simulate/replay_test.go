package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
)

// TestReplayEntryTimes replays decisions whose dry run was decided after
// a window's edge that the enforced limit's call came before (Entry.At):
// replayAll replays recs, in order, against limits and returns the report.
func replayAll(t *testing.T, limits map[string]ReplayLimit, recs ...*decisionlog.Record) *ReplayReport {
	t.Helper()
	r := NewReplay(limits, "")
	defer r.Close()
	for _, rec := range recs {
		if err := r.Add(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}
	return r.Report()
}

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
			rep := replayAll(t, limits, tc.records...)
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

// TestReplaySkipsModes replays Envoy's decisions with limits that a
// replay does not decide (Entry.Mode): they are counted as skipped, their
// outcome stands, and one that refused the request keeps the others from
// being charged, as they were not; a quota descriptor's refusal does
// not.
func TestReplaySkipsModes(t *testing.T) {
	limits := map[string]ReplayLimit{"envoy:edge.user": {Policy: sluice.FixedWindow(2, time.Hour).Named("envoy:edge.user")}}
	at := time.Unix(1800000000, 0).UTC()
	rec := func(mode, skipped, user string) *decisionlog.Record {
		at = at.Add(time.Millisecond)
		return &decisionlog.Record{Time: at, Door: "rls", Rule: "edge", Limits: []decisionlog.Entry{
			{Limit: "envoy:edge.tokens", Key: "t", Cost: 5, Outcome: skipped, Mode: mode},
			{Limit: "envoy:edge.user", Key: "u", Cost: 1, Outcome: user},
		}}
	}
	rep := replayAll(t, limits,
		rec("usage", "denied", "allowed"), // not charged
		rec("usage", "allowed", "allowed"),
		rec("quota", "denied", "allowed"), // charged
		rec("shadow", "shadow_denied", "denied"),
		rec("zero", "denied", "denied"),
	)
	if rep.Changed != 0 || len(rep.Limits) != 1 || rep.Limits[0].NewlyRefused != 0 || rep.Limits[0].NewlyAdmitted != 0 {
		t.Errorf("replay changed decisions: %+v, %+v", rep, rep.Limits)
	}
	want := []SkippedLimit{{"envoy:edge.tokens", "quota", 1}, {"envoy:edge.tokens", "shadow", 1}, {"envoy:edge.tokens", "usage", 2}, {"envoy:edge.tokens", "zero", 1}}
	if !slices.Equal(rep.Skipped, want) {
		t.Errorf("Skipped = %v, want %v", rep.Skipped, want)
	}
	var out strings.Builder
	if err := WriteReplayReport(&out, rep, 5); err != nil || !strings.Contains(out.String(), "limit envoy:edge.tokens (usage): 2 not replayed, taken as logged (usage debited whatever it fits)") {
		t.Errorf("the report does not name the limits not replayed (%v):\n%s", err, out.String())
	}
}

// TestReplayLocalRefusal takes as logged a limit that would have
// admitted a request Redis's store refused locally: the store read it from
// the state it kept, older than Redis's, and the log cannot say what Redis
// would have decided. The limit that refused is compared, and a decision
// Redis made is compared limit by limit.
func TestReplayLocalRefusal(t *testing.T) {
	limits := map[string]ReplayLimit{
		"a": {Policy: sluice.FixedWindow(1, time.Hour).Named("a")},
		"b": {Policy: sluice.FixedWindow(1, time.Hour).Named("b")},
	}
	t0 := time.Unix(1800000000, 0).UTC()
	entry := func(limit string, cost int64, outcome string) decisionlog.Entry {
		return decisionlog.Entry{Limit: limit, Key: "k", Cost: cost, Outcome: outcome}
	}
	for _, tc := range []struct {
		name            string
		order           uint64
		first, second   []decisionlog.Entry
		changed, limits int // requests, and limits' outcomes
		skipped         []SkippedLimit
	}{
		// b is full since the first decision (another instance's request
		// may have made it): its "allowed" was read from the kept state.
		{"local", decisionlog.LocalRefusal, []decisionlog.Entry{entry("b", 1, "allowed")},
			[]decisionlog.Entry{entry("a", 5, "denied"), entry("b", 1, "allowed")}, 0, 0, []SkippedLimit{{"b", modeLocal, 1}}},
		// Redis decided: b's "allowed" was Redis's, and differs.
		{"redis", 0, []decisionlog.Entry{entry("b", 1, "allowed")},
			[]decisionlog.Entry{entry("a", 5, "denied"), entry("b", 1, "allowed")}, 0, 1, nil},
		// The limit that refused locally is compared: b, empty, admits.
		{"refusing limit", decisionlog.LocalRefusal, nil,
			[]decisionlog.Entry{entry("a", 1, "allowed"), entry("b", 1, "denied")}, 1, 1, []SkippedLimit{{"a", modeLocal, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := []*decisionlog.Record{{Time: t0.Add(time.Millisecond), Order: tc.order, Door: "check", Rule: "r", Limits: tc.second}}
			if tc.first != nil {
				recs = slices.Insert(recs, 0, &decisionlog.Record{Time: t0, Door: "check", Rule: "r", Limits: tc.first})
			}
			rep := replayAll(t, limits, recs...)
			limitsChanged := 0
			for _, g := range rep.Limits {
				limitsChanged += g.NewlyRefused + g.NewlyAdmitted
			}
			if rep.Changed != tc.changed || limitsChanged != tc.limits {
				t.Errorf("changed %d requests and %d limits' outcomes, want %d and %d", rep.Changed, limitsChanged, tc.changed, tc.limits)
			}
			if !slices.Equal(rep.Skipped, tc.skipped) {
				t.Errorf("Skipped = %v, want %v", rep.Skipped, tc.skipped)
			}
		})
	}
}

// TestSortRecords orders records by time, then order, keeping the log's
// order between equal ones (order 0: a log written before orders).
func TestSortRecords(t *testing.T) {
	base := time.Unix(1800000000, 0).UTC()
	var records []*decisionlog.Record
	for i, tc := range []struct {
		us    int64
		order uint64
	}{{5, 0}, {1, 7}, {3, 0}, {1, 2}, {2, 0}, {1, 7}, {1, 0}} {
		records = append(records, &decisionlog.Record{Time: base.Add(time.Duration(tc.us) * time.Microsecond), Order: tc.order, Door: "check", Rule: string(rune('a' + i))})
	}
	SortRecords(records)
	got := ""
	for _, r := range records {
		got += r.Rule
	}
	if want := "gdbfeca"; got != want {
		t.Errorf("SortRecords: order %q, want %q", got, want)
	}
}

// TestReplayLaterDryRun replays a decision whose dry run was decided by a
// call of its own after another decision on the dry run's key: the dry
// run is decided in its place, after that decision, at its own time,
// and nothing changes. Decided with its record, it would come first, and
// take the other decision's unit.
func TestReplayLaterDryRun(t *testing.T) {
	limits := map[string]ReplayLimit{
		"enforced": {Policy: sluice.FixedWindow(5, time.Hour).Named("enforced")},
		"dry":      {Policy: sluice.FixedWindow(1, time.Hour).Named("dry"), Shadow: true},
	}
	base := time.Unix(1800000000, 0).UTC()
	at := func(us int64) time.Time { return base.Add(time.Duration(us) * time.Microsecond) }
	records := []*decisionlog.Record{
		// Its dry run came third: at 10 µs, order 3.
		{Time: at(0), Order: 1, Door: "check", Limits: []decisionlog.Entry{
			{Limit: "enforced", Key: "a", Cost: 1, Outcome: "allowed"},
			{Limit: "dry", Key: "k", Cost: 1, Outcome: "shadow_denied", At: at(10), Order: 3},
		}},
		{Time: at(5), Order: 2, Door: "check", Limits: []decisionlog.Entry{
			{Limit: "dry", Key: "k", Cost: 1, Outcome: "allowed"},
		}},
		// Same time as the first's dry run, a later order.
		{Time: at(10), Order: 4, Door: "check", Limits: []decisionlog.Entry{
			{Limit: "enforced", Key: "a", Cost: 1, Outcome: "allowed"},
		}},
	}
	rep := replayAll(t, limits, records...)
	for _, g := range rep.Limits {
		if g.NewlyRefused != 0 || g.NewlyAdmitted != 0 {
			t.Errorf("limit %s: %d newly refused, %d newly admitted; want none", g.Limit, g.NewlyRefused, g.NewlyAdmitted)
		}
		if g.Limit == "dry" && (g.Decisions != 2 || g.Refused != 1) {
			t.Errorf("limit dry: %d decisions, %d refused; want 2 and 1", g.Decisions, g.Refused)
		}
	}
}
