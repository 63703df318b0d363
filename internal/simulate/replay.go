package simulate

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/memstore"
)

// ReplayLimit is a limit of the candidate configuration of a replay.
type ReplayLimit struct {
	Policy sluice.Policy
	// Shadow is a dry-run limit: it never refuses.
	Shadow bool
}

// Replay plays the decisions of a decision log through a candidate
// configuration's limits, at the logged times, on a memory store of its
// own, and compares what the candidate decides with what was decided.
// Give it the log's records in order of time, then order (Add; see
// SortRecords), then read Report.
type Replay struct {
	limits  map[string]ReplayLimit
	store   *memstore.Store
	timed   *timedStore
	now     time.Time
	rep     ReplayReport
	groups  map[groupKey]*LimitChange
	keys    map[keyID]*KeyChange
	skipped map[[2]string]int
	chart   *replayChart
	// later holds the dry runs decided by a store call of their own,
	// after their decision's first (Entry.At and Order), by time and
	// order: each is decided in its place among the log's records.
	later []laterRun
}

// maxTime is after every logged time.
var maxTime = time.Unix(1<<62, 0)

// laterRun is a dry-run limit of a logged decision that the store decided
// by a call of its own, at at with order, after the decision's enforced
// limits, which passed or not.
type laterRun struct {
	at     time.Time
	order  uint64
	rec    *decisionlog.Record
	entry  int
	check  engine.Check
	passed bool
}

// ReplayReport is what a replay found.
type ReplayReport struct {
	// Decisions is the number of logged decisions; Replayed those played
	// (Degraded were decided by a store's failure policy and are not).
	Decisions, Replayed, Degraded int
	// Changed is the number of replayed decisions whose outcome (the
	// request admitted or refused) the candidate changes: NewlyRefused
	// refused now and admitted then, NewlyAdmitted the other way.
	Changed, NewlyRefused, NewlyAdmitted int
	// Limits compares each (door and rule, limit), in order of rule and
	// limit.
	Limits []*LimitChange
	// Keys are the keys whose decisions changed, most changes first.
	Keys []*KeyChange
	// Missing names the logged limits the candidate does not have (not
	// replayed: the decisions go on under their other limits);
	// Concurrency those that are concurrency limits (a log has no
	// release times to replay them with).
	Missing, Concurrency []string
	// Skipped counts the logged limits whose outcome is taken as logged,
	// by limit and mode: those of Envoy's rate limit service that are not
	// replayed (decisionlog.Entry.Mode), one that refused the request
	// keeping the decision's other limits from being charged, as it did;
	// and those that would have admitted a local refusal
	// (decisionlog.LocalRefusal), with the mode "local refusal".
	Skipped []SkippedLimit
	// From and To are the first and last logged times.
	From, To time.Time
}

// SkippedLimit counts the entries of one limit, in one mode, that a
// replay did not decide.
type SkippedLimit struct {
	Limit, Mode string
	Entries     int
}

// LimitChange compares one limit of one rule: its logged and replayed
// outcomes.
type LimitChange struct {
	Door, Rule, Limit string
	// Decisions counts the limit's replayed, sampled entries; Refused and
	// CandidateRefused those refused (or that a dry run would have
	// refused) then and under the candidate.
	Decisions, Refused, CandidateRefused int
	// NewlyRefused and NewlyAdmitted count entries whose outcome changed.
	NewlyRefused, NewlyAdmitted int
}

// KeyChange is one key of one limit whose decisions changed.
type KeyChange struct {
	Limit, Key string
	Changed    int
	// FirstRefused and FirstCandidateRefused are when the key was first
	// refused, then and under the candidate (zero: never).
	FirstRefused, FirstCandidateRefused time.Time
}

type groupKey struct{ door, rule, limit string }
type keyID struct{ limit, key string }

// NewReplay returns a replay against limits, by name. chartLimit, when
// not empty, names the limit whose requests Chart draws.
func NewReplay(limits map[string]ReplayLimit, chartLimit string) *Replay {
	r := &Replay{limits: limits, groups: map[groupKey]*LimitChange{}, keys: map[keyID]*KeyChange{}, skipped: map[[2]string]int{}}
	r.store = memstore.New(memstore.Options{Now: func() time.Time { return r.now }})
	r.timed = &timedStore{Store: r.store, at: map[*sluice.Policy]time.Time{}}
	if l, ok := limits[chartLimit]; ok {
		r.chart = &replayChart{limit: chartLimit, chart: NewChart([]sluice.Policy{l.Policy, l.Policy})}
		r.chart.chart.RowLabels = []string{"as decided", "candidate"}
	}
	return r
}

// Close releases the replay's store.
func (r *Replay) Close() error { return r.store.Close() }

// modeQuota is the mode of a logged descriptor in quota mode, whose
// refusal is decided apart from the rest of the request.
const modeQuota = "quota"

// skipReasons says why a replay does not decide a logged limit of each
// mode.
var skipReasons = map[string]string{
	"shadow":   "Envoy shadow mode",
	"quota":    "Envoy quota mode",
	"usage":    "usage debited whatever it fits",
	"override": "the request's own limit",
	"zero":     "requests_per_unit 0",
	modeLocal:  "would have admitted a request that Redis's store refused from the state it kept, which may be older than Redis's",
}

// modeLocal is the mode under which a replay reports the limits it takes
// as logged in a local refusal (decisionlog.LocalRefusal): those that
// would have admitted the request, read from the state the store kept.
const modeLocal = "local refusal"

// refusesAll is the policy that stands, in a replayed decision, for a
// skipped limit that refused the request: it admits nothing.
var refusesAll = sluice.Policy{Name: "(skipped)", Algorithm: sluice.FixedWindowAlgorithm, Limit: 0, Period: time.Second}

// refused reports whether outcome refuses (or would have refused, for a
// dry run).
func refused(outcome string) bool { return outcome == "denied" || outcome == "shadow_denied" }

// outcome names a decision as the log does.
func outcome(d sluice.Decision, shadow bool) string {
	switch {
	case d.Allowed:
		return "allowed"
	case shadow:
		return "shadow_denied"
	}
	return "denied"
}

// Add replays one logged decision. A dry-run limit that the store decided
// by a call of its own at a later time or order (Entry.At) is decided in
// its place among the records: before the first record Add is given that
// comes after it, or at Report.
func (r *Replay) Add(ctx context.Context, rec *decisionlog.Record) error {
	r.runLater(ctx, rec.Time, rec.Order)
	r.rep.Decisions++
	if r.rep.From.IsZero() {
		r.rep.From = rec.Time
	}
	r.rep.To = rec.Time
	for _, e := range rec.Limits {
		if e.Outcome == "degraded" {
			r.rep.Degraded++
			return nil
		}
	}
	checks := make([]engine.Check, 0, len(rec.Limits))
	idx := make([]int, 0, len(rec.Limits)) // the entry of each check
	cand := make([]string, len(rec.Limits))
	var later []laterRun
	for i, e := range rec.Limits {
		l, ok := r.limits[e.Limit]
		switch {
		case e.Mode != "":
			r.skipped[[2]string{e.Limit, e.Mode}]++
			cand[i] = e.Outcome
			if e.Outcome == "denied" && e.Mode != modeQuota {
				// It refused the request before anything was charged:
				// so does a limit that admits nothing.
				checks = append(checks, engine.Check{Request: sluice.Request{Policy: &refusesAll, Key: e.Key, Cost: 1}})
				idx = append(idx, -1)
			}
			continue
		case !ok:
			if !slices.Contains(r.rep.Missing, e.Limit) {
				r.rep.Missing = append(r.rep.Missing, e.Limit)
			}
			continue
		case l.Policy.Algorithm == sluice.ConcurrencyAlgorithm:
			if !slices.Contains(r.rep.Concurrency, e.Limit) {
				r.rep.Concurrency = append(r.rep.Concurrency, e.Limit)
			}
			continue
		}
		// A cost of 0 checks a budget, except on Envoy's door, where it
		// looks at the state (hits_addend 0).
		c := engine.Check{Request: sluice.Request{Policy: &l.Policy, Key: e.Key, Cost: e.Cost}, Budget: rec.Door != "rls"}
		if l.Shadow {
			c.Mode = engine.Shadow
			if !e.At.IsZero() {
				later = append(later, laterRun{at: e.At, order: e.Order, rec: rec, entry: i, check: c})
				continue
			}
		}
		if !e.At.IsZero() {
			r.timed.at[c.Policy] = e.At
		}
		checks = append(checks, c)
		idx = append(idx, i)
	}
	r.rep.Replayed++
	r.now = rec.Time
	res := make([]engine.CheckResult, len(checks))
	var o engine.Outcome
	if len(checks) > 0 {
		engine.Decide(ctx, r.timed, rec.Time, checks, res, &o)
		clear(r.timed.at)
		if o.Err != nil {
			return fmt.Errorf("replay at %v: %w", rec.Time, o.Err)
		}
	}
	for j, i := range idx {
		if i >= 0 {
			cand[i] = outcome(res[j].Decision, checks[j].Mode == engine.Shadow)
		}
	}
	for i := range rec.Limits {
		if cand[i] != "" {
			cand[i] = r.asLogged(rec, i, cand[i])
		}
	}
	for _, l := range later {
		l.passed = o.Allowed || len(checks) == 0
		i := len(r.later) // after those of the same time and order
		for i > 0 && (r.later[i-1].at.After(l.at) || r.later[i-1].at.Equal(l.at) && r.later[i-1].order > l.order) {
			i--
		}
		r.later = slices.Insert(r.later, i, l)
	}
	var was, now bool // the request refused, then and under the candidate
	for i, e := range rec.Limits {
		was = was || e.Outcome == "denied"
		now = now || cand[i] == "denied"
	}
	if was != now {
		r.rep.Changed++
		if now {
			r.rep.NewlyRefused++
		} else {
			r.rep.NewlyAdmitted++
		}
	}
	for i := range rec.Limits {
		r.count(rec, i, cand[i])
	}
	return nil
}

// runLater decides the dry runs of r.later that come before (t, order).
func (r *Replay) runLater(ctx context.Context, t time.Time, order uint64) {
	n := 0
	for _, l := range r.later {
		if l.at.Compare(t) > 0 || l.at.Equal(t) && l.order >= order {
			break
		}
		n++
		// A dry run is charged when its decision passed, peeked when it
		// was refused: a limit that admits nothing stands for the
		// refusal.
		checks := []engine.Check{l.check}
		if !l.passed {
			checks = []engine.Check{{Request: sluice.Request{Policy: &refusesAll, Key: l.check.Key, Cost: 1}}, l.check}
		}
		res := make([]engine.CheckResult, len(checks))
		var o engine.Outcome
		r.now = l.at
		engine.Decide(ctx, r.store, l.at, checks, res, &o)
		r.count(l.rec, l.entry, r.asLogged(l.rec, l.entry, outcome(res[len(res)-1].Decision, true)))
	}
	r.later = slices.Delete(r.later, 0, n)
}

// asLogged returns cand, the outcome under the candidate of entry i of
// rec, or the logged one for a limit that would have admitted a request
// refused locally (decisionlog.LocalRefusal): Redis's store read it from
// the state it kept, which may be older than Redis's, so the log does not
// say what Redis would have decided. The limit that refused is compared.
func (r *Replay) asLogged(rec *decisionlog.Record, i int, cand string) string {
	e := &rec.Limits[i]
	local := e.Order == decisionlog.LocalRefusal || e.At.IsZero() && rec.Order == decisionlog.LocalRefusal
	if !local || e.Outcome != "allowed" || e.Mode != "" {
		return cand
	}
	r.skipped[[2]string{e.Limit, modeLocal}]++
	return e.Outcome
}

// count counts entry i of rec, whose outcome under the candidate is cand
// ("" for an entry not replayed).
func (r *Replay) count(rec *decisionlog.Record, i int, cand string) {
	e := rec.Limits[i]
	if cand == "" || e.Unsampled || e.Mode != "" {
		return
	}
	g := r.groups[groupKey{rec.Door, rec.Rule, e.Limit}]
	if g == nil {
		g = &LimitChange{Door: rec.Door, Rule: rec.Rule, Limit: e.Limit}
		r.groups[groupKey{rec.Door, rec.Rule, e.Limit}] = g
	}
	g.Decisions++
	thenRefused, nowRefused := refused(e.Outcome), refused(cand)
	if thenRefused {
		g.Refused++
	}
	if nowRefused {
		g.CandidateRefused++
	}
	k := r.keys[keyID{e.Limit, e.Key}]
	if k == nil {
		k = &KeyChange{Limit: e.Limit, Key: e.Key}
		r.keys[keyID{e.Limit, e.Key}] = k
	}
	if thenRefused && k.FirstRefused.IsZero() {
		k.FirstRefused = rec.Time
	}
	if nowRefused && k.FirstCandidateRefused.IsZero() {
		k.FirstCandidateRefused = rec.Time
	}
	if thenRefused != nowRefused {
		k.Changed++
		if nowRefused {
			g.NewlyRefused++
		} else {
			g.NewlyAdmitted++
		}
	}
	if r.chart != nil && e.Limit == r.chart.limit {
		req := Request{T: rec.Time.UnixMilli(), Key: e.Key, Cost: e.Cost}
		r.chart.add(req, e.Outcome == "allowed", cand == "allowed")
	}
}

// timedStore gives each store call of a replayed decision the time its
// limit was decided at, when the log has one for it (Entry.At: a limit
// that is not a dry run, decided by a call of its own, such as the peek
// of a request refused before anything was charged; dry runs with times
// of their own are decided apart, see Replay.later), and the record's
// time otherwise. at maps the Policy of each such check to its time; a
// call of several requests (AllowAll) takes its first one's.
type timedStore struct {
	*memstore.Store
	at map[*sluice.Policy]time.Time
}

func (s *timedStore) time(p *sluice.Policy, now time.Time) time.Time {
	if t, ok := s.at[p]; ok {
		return t
	}
	return now
}

func (s *timedStore) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.Store.Allow(ctx, s.time(req.Policy, now), req)
}

func (s *timedStore) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	if len(reqs) > 0 {
		now = s.time(reqs[0].Policy, now)
	}
	return s.Store.AllowAll(ctx, now, reqs, out)
}

func (s *timedStore) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	return s.Store.Peek(ctx, s.time(req.Policy, now), req)
}

// SortRecords orders records by time, then by order (Record.Order),
// keeping the log's order between equal ones. A log is written in the
// order the doors finished their decisions, which under concurrent
// requests need not be the order in which the store decided them.
func SortRecords(records []*decisionlog.Record) {
	slices.SortStableFunc(records, func(a, b *decisionlog.Record) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Order, b.Order))
	})
}

// Report returns what the replay found so far, the dry runs still to
// decide decided.
func (r *Replay) Report() *ReplayReport {
	r.runLater(context.Background(), maxTime, math.MaxUint64)
	rep := r.rep
	rep.Limits = rep.Limits[:0]
	for _, g := range r.groups {
		rep.Limits = append(rep.Limits, g)
	}
	slices.SortFunc(rep.Limits, func(a, b *LimitChange) int {
		return cmp.Or(cmp.Compare(a.Door, b.Door), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Limit, b.Limit))
	})
	rep.Keys = nil
	for _, k := range r.keys {
		if k.Changed > 0 {
			rep.Keys = append(rep.Keys, k)
		}
	}
	slices.SortFunc(rep.Keys, func(a, b *KeyChange) int {
		return cmp.Or(cmp.Compare(b.Changed, a.Changed), cmp.Compare(a.Limit, b.Limit), cmp.Compare(a.Key, b.Key))
	})
	slices.Sort(rep.Missing)
	slices.Sort(rep.Concurrency)
	rep.Skipped = nil
	for k, n := range r.skipped {
		rep.Skipped = append(rep.Skipped, SkippedLimit{Limit: k[0], Mode: k[1], Entries: n})
	}
	slices.SortFunc(rep.Skipped, func(a, b SkippedLimit) int {
		return cmp.Or(cmp.Compare(a.Limit, b.Limit), cmp.Compare(a.Mode, b.Mode))
	})
	return &rep
}

// WriteReplayReport writes rep as text, with at most top keys.
func WriteReplayReport(w io.Writer, rep *ReplayReport, top int) error {
	ew := &errWriter{w: w}
	ew.printf("replayed %d of %d decisions from %s to %s", rep.Replayed, rep.Decisions, rep.From.UTC().Format(time.RFC3339Nano), rep.To.UTC().Format(time.RFC3339Nano))
	if rep.Degraded > 0 {
		ew.printf(" (%d degraded, decided by a failure policy, not replayed)", rep.Degraded)
	}
	ew.printf("\nchanged: %d (%d refused that were admitted, %d admitted that were refused)\n", rep.Changed, rep.NewlyRefused, rep.NewlyAdmitted)
	for _, m := range rep.Missing {
		ew.printf("limit %s is not in the candidate: not replayed\n", m)
	}
	for _, m := range rep.Concurrency {
		ew.printf("limit %s is a concurrency limit: not replayed (the log has no release times)\n", m)
	}
	for _, sk := range rep.Skipped {
		ew.printf("limit %s (%s): %d not replayed, taken as logged (%s)\n", sk.Limit, sk.Mode, sk.Entries, skipReasons[sk.Mode])
	}
	ew.printf("\n%-14s %-14s %-14s %10s %10s %10s %10s %10s\n", "door", "rule", "limit", "decisions", "refused", "candidate", "+refused", "+admitted")
	for _, g := range rep.Limits {
		rule := g.Rule
		if rule == "" {
			rule = "-"
		}
		ew.printf("%-14s %-14s %-14s %10d %10d %10d %10d %10d\n", g.Door, rule, g.Limit, g.Decisions, g.Refused, g.CandidateRefused, g.NewlyRefused, g.NewlyAdmitted)
	}
	if len(rep.Keys) > 0 {
		ew.printf("\nkeys most affected (%d changed):\n%-14s %-34s %8s  %-24s  %-24s\n", len(rep.Keys), "limit", "key", "changed", "first refused", "first refused (candidate)")
		for i, k := range rep.Keys {
			if i == top {
				break
			}
			ew.printf("%-14s %-34s %8d  %-24s  %-24s\n", k.Limit, k.Key, k.Changed, stamp(k.FirstRefused), stamp(k.FirstCandidateRefused))
		}
	}
	return ew.err
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// replayChart draws one limit's requests as decided and under the
// candidate.
type replayChart struct {
	limit string
	chart *Chart
	err   error
}

func (c *replayChart) add(req Request, then, now bool) {
	if c.err == nil {
		c.err = c.chart.Add(req, []sluice.Decision{{Allowed: then}, {Allowed: now}})
	}
}

// WriteChart draws the chart limit's requests, as decided and under the
// candidate, in format (ChartFormat). It fails without a chart limit.
func (r *Replay) WriteChart(w io.Writer, format string) error {
	if r.chart == nil {
		return fmt.Errorf("no chart: no limit to draw")
	}
	if r.chart.err != nil {
		return r.chart.err
	}
	if len(r.chart.chart.offered) == 0 {
		return fmt.Errorf("no chart: the log has no replayed decision of limit %s", r.chart.limit)
	}
	r.chart.chart.Heading = []string{fmt.Sprintf("limit %s: as decided, and under the candidate (%s)", r.chart.limit, describe(r.chart.chart.policies[0]))}
	return r.chart.chart.Write(w, format)
}
