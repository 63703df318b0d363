package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/buildinfo"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/metrics"
)

// Sizes of what the status page shows.
const (
	// statusSeconds is how many seconds of decision counts each limit
	// keeps for the status page's charts: five minutes.
	statusSeconds = 300
	// sketchCounters is the number of counters of the denied-keys sketch.
	sketchCounters = 64
	// statusTopKeys is the number of denied keys the status page lists.
	statusTopKeys = 15
	// statusPingTimeout bounds the store check of a status request.
	statusPingTimeout = time.Second
)

// The outcomes as indexes into the per-second counts, in the order of
// metrics.Outcomes.
const (
	iAllowed = iota
	iDenied
	iShadowDenied
	iDegraded
	numOutcomes
)

// board keeps what the status page shows of recent decisions: per limit, a
// ring of per-second counts by outcome over the last statusSeconds, and a
// sketch of the keys denied most often. Its memory is bounded: a fixed
// ring per configured limit and a fixed number of sketch counters, however
// many keys come. It is safe for concurrent use; counting an allowed
// decision takes no lock.
type board struct {
	now    func() time.Time
	denied *topK
	// rings maps limit names to their rings. It is copied on write (a new
	// limit, a reload), so that a lookup takes no lock and allocates
	// nothing.
	rings atomic.Pointer[map[string]*ring]
	mu    sync.Mutex // serialises writers of rings
}

func newBoard(now func() time.Time) *board {
	b := &board{now: now, denied: newTopK(sketchCounters)}
	b.rings.Store(&map[string]*ring{})
	return b
}

// ring holds one limit's per-second counts. Slot i holds second s when
// s mod statusSeconds = i and sec[i] = s.
type ring struct {
	mu    sync.Mutex // serialises the reuse of a slot for a new second
	slots [statusSeconds]slot
}

type slot struct {
	sec atomic.Int64
	n   [numOutcomes]atomic.Uint64
}

// record counts one limit's decision for key, made at now. Keys go to the
// denied-keys sketch only, never to metrics.
func (b *board) record(now time.Time, limit, key string, o int) {
	sec := now.Unix()
	r := b.ring(limit)
	s := &r.slots[uint64(sec)%statusSeconds]
	if s.sec.Load() != sec {
		r.mu.Lock()
		if s.sec.Load() != sec {
			for i := range s.n {
				s.n[i].Store(0)
			}
			s.sec.Store(sec)
		}
		r.mu.Unlock()
	}
	// A decision that took statusSeconds to get here between the check and
	// the count would land in the wrong second; nothing else can.
	s.n[o].Add(1)
	if o == iDenied || o == iShadowDenied {
		b.denied.add(limit, key, sec/60)
	}
}

// ring returns limit's ring, making it on first use.
func (b *board) ring(limit string) *ring {
	if r, ok := (*b.rings.Load())[limit]; ok {
		return r
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.rings.Load()
	if r, ok := old[limit]; ok {
		return r
	}
	m := make(map[string]*ring, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	r := new(ring)
	m[strings.Clone(limit)] = r
	b.rings.Store(&m)
	return r
}

// counts returns limit's counts by outcome for the n seconds that end with
// second last, oldest first.
func (b *board) counts(limit string, last int64, n int) [numOutcomes][]uint64 {
	var out [numOutcomes][]uint64
	for o := range out {
		out[o] = make([]uint64, n)
	}
	r, ok := (*b.rings.Load())[limit]
	if !ok {
		return out
	}
	for i := range n {
		sec := last - int64(n-1-i)
		s := &r.slots[uint64(sec)%statusSeconds]
		if s.sec.Load() != sec {
			continue
		}
		for o := range out {
			out[o][i] = s.n[o].Load()
		}
	}
	return out
}

// forget drops the rings of the limits that are not in names, the
// configuration in use.
func (b *board) forget(names []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.rings.Load()
	m := make(map[string]*ring, len(names))
	for _, n := range names {
		if r, ok := old[n]; ok {
			m[n] = r
		}
	}
	if len(m) != len(old) {
		b.rings.Store(&m)
	}
}

// outcomeIndex returns the index of an outcome label value.
func outcomeIndex(o string) int {
	switch o {
	case metrics.OutcomeDenied:
		return iDenied
	case metrics.OutcomeShadowDenied:
		return iShadowDenied
	case metrics.OutcomeDegraded:
		return iDegraded
	}
	return iAllowed
}

// record counts one limit's decision for key in the metrics (by limit and
// outcome) and on the status board. Every decision the Handler makes goes
// through it.
func (h *Handler) record(now time.Time, limit, key string, d sluice.Decision, shadow bool) {
	o := metrics.Outcome(d, shadow)
	h.metrics.Decision(limit, o)
	if d.Blocked {
		h.metrics.Penalty(limit, d)
	}
	h.board.record(now, limit, key, outcomeIndex(o))
}

// statusJSON is the answer of GET /v1/status.
type statusJSON struct {
	// Now is the server's time in Unix milliseconds.
	Now int64 `json:"now"`
	// Config names the configuration file in use.
	Config string `json:"config"`
	// Build is the running build (Options.Build); absent when unknown.
	Build *buildinfo.Info `json:"build,omitempty"`
	// End is the Unix second of the last value of every series (the last
	// whole second), and Seconds their length: value i counts second
	// End − Seconds + 1 + i.
	End     int64        `json:"end"`
	Seconds int          `json:"seconds"`
	Store   storeJSON    `json:"store"`
	Limits  []limitJSON  `json:"limits"`
	Denied  []deniedJSON `json:"top_denied"`
}

type storeJSON struct {
	Backend string `json:"backend"`
	// Status is "ok" when the store's backend can decide, "unreachable"
	// when it cannot, "partly unreachable" when some Redis Cluster masters
	// cannot, and "in-process" for a store that has no backend to reach.
	Status string `json:"status"`
	// Masters is the number of Redis Cluster masters that own slots;
	// absent for a single Redis.
	Masters int `json:"masters,omitempty"`
	// Down names the masters that cannot decide, when some can.
	Down []string `json:"masters_down,omitempty"`
	// Circuit is the Redis circuit breaker's state: closed, open or
	// half-open; empty without a breaker.
	Circuit string `json:"circuit,omitempty"`
	OnError string `json:"on_error,omitempty"`
	// Keys is the number of (limit, key) pairs an in-memory store tracks.
	Keys *int `json:"keys,omitempty"`
	// Local is the Redis store's local refusals; absent without them.
	Local *localJSON `json:"local_refusals,omitempty"`
}

// localJSON is the status of a Redis store's local refusals.
type localJSON struct {
	// Share is the share of the store's decisions that never reached
	// Redis (refused locally), from 0 to 1, since the service started.
	Share     float64 `json:"share"`
	Decisions uint64  `json:"decisions"`
	Local     uint64  `json:"local"`
	Entries   int     `json:"entries"`
}

type limitJSON struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`
	PeriodMS  int64  `json:"period_ms"`
	Burst     int64  `json:"burst,omitempty"`
	Shadow    bool   `json:"shadow,omitempty"`
	// Series holds, by outcome, the decisions of each second.
	Series map[string][]uint64 `json:"series"`
	// LastMinute sums the last 60 seconds of Series.
	LastMinute map[string]uint64 `json:"last_minute"`
}

type deniedJSON struct {
	Limit string `json:"limit"`
	Key   string `json:"key"`
	// Cut reports that the key is longer than shown.
	Cut bool `json:"cut,omitempty"`
	// Count estimates the denials, halved every minute; it overestimates
	// them by at most Error.
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
	// BlockedForMS and Offences, for a key of a limit with a penalty,
	// say how long its block lasts and how many of its offences are
	// remembered (as /v1/explain); absent when none.
	BlockedForMS int64 `json:"blocked_for_ms,omitempty"`
	Offences     int64 `json:"offences,omitempty"`
	// Block says the same for the page: "blocked 12m0s, 2 offences".
	Block string `json:"block,omitempty"`
}

// blockText describes d's block for the status page: "blocked 12m0s,
// 2 offences", or "" when it has none.
func (d deniedJSON) blockText() string {
	var parts []string
	if d.BlockedForMS > 0 {
		parts = append(parts, "blocked "+human(time.Duration(d.BlockedForMS)*time.Millisecond))
	}
	if d.Offences > 0 {
		parts = append(parts, plural(int(d.Offences), "offence", "offences"))
	}
	return strings.Join(parts, ", ")
}

// blockOf fills in the block and offences of d's key when its limit has a
// penalty and the store can report them (a key cut short cannot be
// looked up).
func (h *Handler) blockOf(ctx context.Context, cfg *config.Config, d *deniedJSON) {
	l, ok := cfg.Limit(d.Limit)
	in, can := h.raw.(sluice.Inspector)
	if !ok || !can || d.Cut || l.Policy.Penalty.IsZero() {
		return
	}
	p, _ := h.resolver.Policy(l.Policy, d.Key)
	s, err := in.Inspect(ctx, time.Time{}, sluice.Request{Policy: &p, Key: d.Key, Cost: 1})
	if err != nil {
		return
	}
	if !s.BlockedUntil.IsZero() {
		d.BlockedForMS = millis(s.BlockedUntil.Sub(s.At))
	}
	d.Offences = s.Offences
	d.Block = d.blockText()
}

// status builds the status snapshot at now.
func (h *Handler) status(ctx context.Context) *statusJSON {
	now := h.now()
	st := h.state.Load()
	h.board.forget(st.names)
	out := &statusJSON{
		Now:     now.UnixMilli(),
		Config:  st.cfg.Source(),
		End:     now.Unix() - 1,
		Seconds: statusSeconds,
		Store:   h.storeStatus(ctx, st.cfg.Store()),
		Limits:  []limitJSON{},
		Denied:  []deniedJSON{},
	}
	if h.buildInfo != (buildinfo.Info{}) {
		b := h.buildInfo
		out.Build = &b
	}
	for _, l := range st.cfg.Limits() {
		p := l.Policy
		lj := limitJSON{
			Name: p.Name, Algorithm: p.Algorithm.String(), Limit: p.Limit,
			Period: policyPeriod(p), PeriodMS: p.Period.Milliseconds(), Shadow: l.Shadow,
			Series: make(map[string][]uint64, numOutcomes), LastMinute: make(map[string]uint64, numOutcomes),
		}
		if p.Algorithm.HasBurst() {
			lj.Burst = p.Capacity()
		}
		c := h.board.counts(p.Name, out.End, statusSeconds)
		for o, name := range metrics.Outcomes {
			lj.Series[name] = c[o]
			var sum uint64
			for _, v := range c[o][statusSeconds-60:] {
				sum += v
			}
			lj.LastMinute[name] = sum
		}
		out.Limits = append(out.Limits, lj)
	}
	for _, e := range h.board.denied.top(statusTopKeys, now.Unix()/60) {
		dj := deniedJSON{Limit: e.item.limit, Key: e.item.key, Cut: e.item.cut, Count: e.count, Error: e.err}
		h.blockOf(ctx, st.cfg, &dj)
		out.Denied = append(out.Denied, dj)
	}
	return out
}

// storeStatus reports the store's health.
func (h *Handler) storeStatus(ctx context.Context, cfg config.Store) storeJSON {
	s := storeJSON{Backend: string(cfg.Backend), Status: "in-process"}
	if cfg.Backend == config.RedisBackend {
		s.OnError = string(cfg.OnError)
	}
	if h.circuit != nil {
		s.Circuit = h.circuit()
	}
	if sh, ok := h.checkStore(ctx, statusPingTimeout); ok {
		switch {
		case sh.Err == nil:
			s.Status = "ok"
		case len(sh.Down) < sh.Masters:
			s.Status = "partly unreachable"
			s.Down = sh.Down
		default:
			s.Status = "unreachable"
		}
		if sh.Masters > 1 {
			s.Masters = sh.Masters
		}
	}
	if h.localRefusals != nil {
		l := h.localRefusals()
		s.Local = &localJSON{Share: l.Share(), Decisions: l.Decisions, Local: l.Local, Entries: l.Entries}
	}
	if l, ok := h.raw.(interface{ Len() int }); ok {
		n := l.Len()
		s.Keys = &n
	}
	return s
}

// periodJSON returns p's numbers for the JSON answers: its period as the
// configuration writes it, or a calendar period with its zone and week
// start.
func periodJSON(p sluice.Policy, shadow bool) policyJSON {
	j := policyJSON{Limit: p.Limit, Period: formatPeriod(p.Period), PeriodMS: p.Period.Milliseconds(), Shadow: shadow}
	if p.Algorithm == sluice.ConcurrencyAlgorithm {
		j.Lease = j.Period
	}
	if c := p.Calendar; c.Unit != sluice.NoCalendar {
		j.Period, j.TimeZone = c.Unit.String(), c.Location().String()
		if c.Unit == sluice.CalendarWeek {
			j.WeekStarts = "monday"
			if c.WeekStartsSunday {
				j.WeekStarts = "sunday"
			}
		}
	}
	return j
}

// policyPeriod writes p's period for people: a duration such as 1h, or
// "calendar_month Europe/Berlin".
func policyPeriod(p sluice.Policy) string {
	if p.Calendar.Unit != sluice.NoCalendar {
		return p.Calendar.String()
	}
	return formatPeriod(p.Period)
}

// formatPeriod writes a period as a configuration file would: "1s",
// "1m", "1h30m", "250ms".
func formatPeriod(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// serveStatus answers GET /v1/status with the status snapshot as JSON.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.status(r.Context()))
}
