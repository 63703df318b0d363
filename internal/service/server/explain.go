package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/config"
)

// Explanation is the answer of GET /v1/explain: what the store knows of one
// key under one limit now, and what a request would get. `sluice check
// --explain` decodes it.
type Explanation struct {
	Limit     string     `json:"limit"`
	Key       string     `json:"key"`
	Algorithm string     `json:"algorithm"`
	Policy    policyJSON `json:"policy"`
	// Override reports that Policy is a runtime override for this key
	// rather than the limit's own.
	Override bool `json:"override,omitempty"`
	// At is the instant described, on the store's clock.
	At string `json:"at"`
	// Tracked is false when the store holds no state for the key: it is
	// at its initial state.
	Tracked bool `json:"tracked"`
	// State holds the algorithm's numbers; see the fields of stateJSON.
	State stateJSON `json:"state"`
	// Cost is the cost of the request that the decision fields describe.
	Cost         int64 `json:"cost"`
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	// DelayMS is the leaky bucket's wait for an admitted request.
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Debt, for a key charged past its limit (usage reported after the
	// fact: POST /v1/charge, a settled lease, an Envoy usage descriptor),
	// is the units it owes beyond the limit, rounded up; DebtRepaidAt
	// and DebtRepaidInMS say when it is repaid: from then on a request of
	// cost 1 is allowed again. Absent without debt.
	Debt           int64  `json:"debt,omitempty"`
	DebtRepaidAt   string `json:"debt_repaid_at,omitempty"`
	DebtRepaidInMS int64  `json:"debt_repaid_in_ms,omitempty"`
	// Penalty is the limit's penalty, when it has one; BlockedUntil and
	// BlockedForMS say when the key's block ends (absent when it is not
	// blocked), Offences how many of its offences are remembered, and
	// OffencesForgottenAt when they are forgotten if no other comes.
	Penalty             *penaltyJSON `json:"penalty,omitempty"`
	BlockedUntil        string       `json:"blocked_until,omitempty"`
	BlockedForMS        int64        `json:"blocked_for_ms,omitempty"`
	Offences            int64        `json:"offences,omitempty"`
	OffencesForgottenAt string       `json:"offences_forgotten_at,omitempty"`
	// Summary says the same in a sentence or two.
	Summary string `json:"summary"`
}

// penaltyJSON is a limit's penalty, durations as the configuration
// writes them.
type penaltyJSON struct {
	BlockFor    string `json:"block_for"`
	Factor      int64  `json:"factor"`
	MaxBlock    string `json:"max_block"`
	ForgetAfter string `json:"forget_after"`
}

type policyJSON struct {
	Limit int64 `json:"limit"`
	// Period is a duration as the configuration writes it, or a calendar
	// period (calendar_month) with its TimeZone and WeekStarts; PeriodMS is
	// then 0 (the window's length varies: see the state's window_start
	// and window_end).
	Period     string `json:"period"`
	PeriodMS   int64  `json:"period_ms"`
	TimeZone   string `json:"time_zone,omitempty"`
	WeekStarts string `json:"week_starts,omitempty"`
	// Lease, for a concurrency limit, is how long a lease holds its units
	// unless released or renewed (Period says the same).
	Lease string `json:"lease,omitempty"`
	// Burst is the capacity of the token-bucket family.
	Burst  int64 `json:"burst,omitempty"`
	Shadow bool  `json:"shadow,omitempty"`
}

// stateJSON is a sluice.State in JSON: exact amounts as strings (see
// sluice.Amount.String), times as RFC 3339 with microseconds. Only the
// fields of the limit's algorithm are present.
type stateJSON struct {
	// The token-bucket family: the tokens in the bucket, the units spent
	// and not yet refilled (the leaky bucket's queue), and the time until
	// the bucket is full (the queue empty).
	Tokens    string `json:"tokens,omitempty"`
	Queued    string `json:"queued,omitempty"`
	BacklogUS *int64 `json:"backlog_us,omitempty"`
	FullAt    string `json:"full_at,omitempty"`
	// The windows.
	WindowStart string `json:"window_start,omitempty"`
	WindowEnd   string `json:"window_end,omitempty"`
	Current     *int64 `json:"current,omitempty"`
	Previous    *int64 `json:"previous,omitempty"`
	Estimate    string `json:"estimate,omitempty"`
	// Concurrency: the units held, by how many leases, and when the last
	// runs out unless renewed.
	Held    *int64 `json:"held,omitempty"`
	Leases  *int64 `json:"leases,omitempty"`
	Expires string `json:"expires,omitempty"`
	// The sliding log.
	Entries *int   `json:"entries,omitempty"`
	Counted *int64 `json:"counted,omitempty"`
	Oldest  string `json:"oldest,omitempty"`
	Newest  string `json:"newest,omitempty"`
}

// timeFormat is RFC 3339 with the microseconds a store's clock has.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// serveExplain answers GET /v1/explain?limit=NAME&key=K[&cost=N]: the state
// the store keeps for key under the limit, and the decision a request of
// cost (default 1) would get now, charging nothing.
func (h *Handler) serveExplain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := h.state.Load()
	name, key := q.Get("limit"), q.Get("key")
	switch {
	case name == "":
		writeError(w, http.StatusBadRequest, "limit is missing: /v1/explain?limit=NAME&key=KEY")
		return
	case !q.Has("key"):
		writeError(w, http.StatusBadRequest, "key is missing: /v1/explain?limit=NAME&key=KEY")
		return
	case key == "":
		writeError(w, http.StatusBadRequest, "key is empty")
		return
	}
	l, ok := st.cfg.Limit(name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no limit named %q", name))
		return
	}
	var override bool
	l.Policy, override = h.resolver.Policy(l.Policy, key) // a runtime override, if one is set (engine.Resolver)
	cost := int64(1)
	if c := q.Get("cost"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		switch {
		case err != nil || n < 1:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cost must be a whole number of at least 1, got %q", c))
			return
		}
		cost = n
	}
	// A cost above the capacity is answered as every door answers it:
	// never allowed, nothing charged. The state is read with the capacity
	// as the cost, which the store can weigh (engine.PeekCost).
	inspectCost := engine.PeekCost(l.Policy, cost)
	in, ok := h.raw.(sluice.Inspector)
	if !ok {
		writeError(w, http.StatusNotImplemented, "the store cannot report the state of a key")
		return
	}
	s, err := in.Inspect(r.Context(), time.Time{}, sluice.Request{Policy: &l.Policy, Key: key, Cost: inspectCost})
	if err != nil {
		h.logger.LogAttrs(r.Context(), slog.LevelWarn, "explain: store failed", slog.String("limit", name), slog.Any("error", err))
		writeError(w, http.StatusServiceUnavailable, "the store could not report the key's state; see the server's log")
		return
	}
	if cost > inspectCost {
		// A request that can never pass, as /v1/check answers it.
		s.Decision = engine.FromPeek(s.Decision, cost, inspectCost)
	}
	e := explain(l, key, cost, s)
	if debt := debtOf(l.Policy, s); debt > 0 {
		// When it is repaid: when a request of 1 is allowed again.
		d := s.Decision
		if cost != 1 {
			s1, err := in.Inspect(r.Context(), s.At, sluice.Request{Policy: &l.Policy, Key: key, Cost: 1})
			if err != nil {
				h.logger.LogAttrs(r.Context(), slog.LevelWarn, "explain: store failed", slog.String("limit", name), slog.Any("error", err))
				writeError(w, http.StatusServiceUnavailable, "the store could not report the key's state; see the server's log")
				return
			}
			d = s1.Decision
		}
		e.Debt, e.DebtRepaidInMS = debt, millis(d.RetryAfter)
		e.DebtRepaidAt = s.At.Add(d.RetryAfter).UTC().Format(timeFormat)
		e.Summary += fmt.Sprintf(" It owes %s beyond its limit, repaid in %s: a request of cost 1 is allowed from then on.", plural(int(debt), "unit", "units"), human(d.RetryAfter))
	}
	explainBlock(e, l.Policy, s)
	if override {
		e.Override = true
		e.Summary += " A runtime override sets this key's numbers (see /v1/overrides)."
	}
	writeJSON(w, http.StatusOK, e)
}

// explain describes state s of key under limit l.
func explain(l config.Limit, key string, cost int64, s sluice.State) *Explanation {
	p := l.Policy
	d := s.Decision
	e := &Explanation{
		Limit: p.Name, Key: key, Algorithm: p.Algorithm.String(),
		Policy:  periodJSON(p, l.Shadow),
		At:      s.At.UTC().Format(timeFormat),
		Tracked: s.Tracked,
		Cost:    cost, Allowed: d.Allowed, Remaining: d.Remaining,
		RetryAfterMS: millis(d.RetryAfter), ResetAfterMS: millis(d.ResetAfter), DelayMS: millis(d.Delay),
	}
	var b strings.Builder
	switch p.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		explainWindow(e, &b, p, s)
	case sluice.SlidingLogAlgorithm:
		explainLog(e, &b, p, s)
	case sluice.ConcurrencyAlgorithm:
		explainHeld(e, &b, p, s)
	default:
		explainBucket(e, &b, p, s)
	}
	if !s.Tracked {
		b.WriteString(" Sluice keeps no state for this key: it is at its initial state.")
	}
	switch {
	case d.RetryAfter == sluice.Never:
		fmt.Fprintf(&b, " A request of cost %d can never be allowed: it exceeds the capacity of %d, and it would be denied without charging anything.", cost, p.Capacity())
	case d.Allowed && d.Delay > 0:
		fmt.Fprintf(&b, " A request of cost %d would be allowed after waiting %s, leaving %d.", cost, human(d.Delay), d.Remaining)
	case d.Allowed:
		fmt.Fprintf(&b, " A request of cost %d would be allowed, leaving %d.", cost, d.Remaining)
	case d.Delay > 0:
		fmt.Fprintf(&b, " A request of cost %d would be denied: it would wait %s in the queue; retry in %s.", cost, human(d.Delay), human(d.RetryAfter))
	default:
		fmt.Fprintf(&b, " A request of cost %d would be denied; retry in %s.", cost, human(d.RetryAfter))
	}
	if l.Shadow {
		b.WriteString(" This limit is a dry run: it is counted but never denies.")
	}
	e.Summary = strings.TrimSpace(b.String())
	return e
}

// explainWindow describes the state s of a fixed or sliding window of
// policy p, in e and in b.
func explainWindow(e *Explanation, b *strings.Builder, p sluice.Policy, s sluice.State) {
	loc := p.Calendar.Location()
	start, end := s.WindowStart.In(loc), s.WindowEnd.In(loc)
	if end.IsZero() || !end.After(start) { // a store that reports only the start
		end = start.Add(p.Period)
	}
	e.State = stateJSON{
		WindowStart: start.Format(timeFormat), WindowEnd: end.Format(timeFormat),
		Current: &s.Current, Estimate: s.Estimate.String(),
	}
	if p.Algorithm == sluice.FixedWindowAlgorithm {
		fmt.Fprintf(b, "The window that ends in %s has counted %d of %d.", human(end.Sub(s.At)), s.Current, p.Limit)
	} else {
		e.State.Previous = &s.Previous
		if p.Calendar.Unit != sluice.NoCalendar {
			fmt.Fprintf(b, "The estimate is %s: %d in the previous window, weighted by the fraction of this %s still to come (%s of %s), plus %d in the current one.",
				ReadableAmount(s.Estimate.String(), p.Limit, ""), s.Previous, strings.TrimPrefix(p.Calendar.Unit.String(), "calendar_"),
				formatPeriod(end.Sub(s.At)), formatPeriod(end.Sub(start)), s.Current)
		} else {
			elapsed := s.At.Sub(s.WindowStart)
			fmt.Fprintf(b, "The estimate is %s: %d in the previous window, weighted by the %s of it still in the last %s, plus %d in the current one.",
				ReadableAmount(s.Estimate.String(), p.Limit, ""), s.Previous, human(p.Period-elapsed), formatPeriod(p.Period), s.Current)
		}
	}
}

// explainHeld describes the state s of a concurrency limit p, in e and in
// b.
func explainHeld(e *Explanation, b *strings.Builder, p sluice.Policy, s sluice.State) {
	e.State = stateJSON{Held: &s.Held, Leases: &s.Leases}
	if s.Leases == 0 {
		fmt.Fprintf(b, "Nothing is held of %d.", p.Limit)
		return
	}
	e.State.Expires = s.Expires.UTC().Format(timeFormat)
	fmt.Fprintf(b, "%d of %d held by %s; the last runs out in %s unless renewed or released first.",
		s.Held, p.Limit, plural(int(s.Leases), "lease", "leases"), human(s.Expires.Sub(s.At)))
}

// explainLog describes the state s of a sliding log of policy p, in e and
// in b.
func explainLog(e *Explanation, b *strings.Builder, p sluice.Policy, s sluice.State) {
	e.State = stateJSON{Entries: &s.Entries, Counted: &s.Counted}
	if s.Entries > 0 {
		e.State.Oldest, e.State.Newest = s.Oldest.UTC().Format(timeFormat), s.Newest.UTC().Format(timeFormat)
		fmt.Fprintf(b, "The log holds %d of %d in the last %s (%s); the oldest stops counting in %s.",
			s.Counted, p.Limit, formatPeriod(p.Period), plural(s.Entries, "entry", "entries"), human(s.Oldest.Add(p.Period).Sub(s.At)))
	} else {
		fmt.Fprintf(b, "The log holds nothing in the last %s.", formatPeriod(p.Period))
	}
}

// explainBucket describes the state s of a bucket (token bucket, GCRA,
// leaky bucket) of policy p, in e and in b.
func explainBucket(e *Explanation, b *strings.Builder, p sluice.Policy, s sluice.State) {
	e.Policy.Burst = p.Capacity()
	us := int64(s.Backlog / time.Microsecond)
	e.State = stateJSON{Tokens: s.Tokens.String(), Queued: s.Queued.String(), BacklogUS: &us}
	if s.Backlog > 0 {
		e.State.FullAt = s.At.Add(s.Backlog).UTC().Format(timeFormat)
	}
	if p.Algorithm == sluice.LeakyBucketAlgorithm {
		fmt.Fprintf(b, "The queue holds %s", ReadableAmount(s.Queued.String(), p.Capacity(), "units"))
		if s.Backlog > 0 {
			fmt.Fprintf(b, " and is empty in %s.", human(s.Backlog))
		} else {
			b.WriteString(".")
		}
	} else {
		fmt.Fprintf(b, "The bucket holds %s", ReadableAmount(s.Tokens.String(), p.Capacity(), "tokens"))
		if s.Backlog > 0 {
			fmt.Fprintf(b, " and is full again in %s.", human(s.Backlog))
		} else {
			b.WriteString(" (full).")
		}
	}
}

// explainBlock describes, in e, the penalty of policy p and the key's
// block and offences in state s.
func explainBlock(e *Explanation, p sluice.Policy, s sluice.State) {
	if p.Penalty.IsZero() {
		return
	}
	q := p.Penalty
	maxBlock := q.MaxBlock
	if maxBlock == 0 {
		maxBlock = sluice.MaxPeriod
	}
	e.Penalty = &penaltyJSON{BlockFor: formatPeriod(q.BlockFor), Factor: max(q.Factor, 1), MaxBlock: formatPeriod(maxBlock), ForgetAfter: formatPeriod(q.ForgetAfter)}
	if !s.BlockedUntil.IsZero() {
		left := s.BlockedUntil.Sub(s.At)
		e.BlockedUntil, e.BlockedForMS = s.BlockedUntil.UTC().Format(timeFormat), millis(left)
		e.Summary += fmt.Sprintf(" The key is blocked by the limit's penalty for %s more: every request is refused until then, uncounted.", human(left))
	}
	if s.Offences > 0 {
		e.Offences, e.OffencesForgottenAt = s.Offences, s.Forgotten.UTC().Format(timeFormat)
		next := q.Block(s.Offences + 1)
		e.Summary += fmt.Sprintf(" It has %s remembered, forgotten in %s without another; the next blocks it for %s.",
			plural(int(s.Offences), "offence", "offences"), human(s.Forgotten.Sub(s.At)), human(next))
	}
}

// debtOf returns the units that the state s of a key under p owes beyond
// p's limit, rounded up: tokens below zero for the token-bucket family,
// the count or estimate above the limit for the windows and the log.
func debtOf(p sluice.Policy, s sluice.State) int64 {
	switch p.Algorithm {
	case sluice.FixedWindowAlgorithm, sluice.SlidingWindowAlgorithm:
		over := s.Estimate.Whole - p.Limit
		if s.Estimate.Num > 0 {
			over++
		}
		return max(over, 0)
	case sluice.SlidingLogAlgorithm:
		return max(s.Counted-p.Limit, 0)
	case sluice.ConcurrencyAlgorithm:
		return 0
	}
	// Tokens = Whole + Num/Den, 0 ≤ Num < Den: below zero, -Whole rounds
	// the debt up.
	return max(-s.Tokens.Whole, 0)
}

// human writes a duration for people: to the millisecond from a second up,
// exactly below.
func human(d time.Duration) string {
	if d >= time.Second {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
