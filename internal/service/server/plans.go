package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/usage"
	"github.com/sluicehq/sluice/plans"
)

// This file builds the rules of a configuration: their own limits, the
// limits of each request's plan (docs/plans.md), the runtime overrides
// that apply to every limit, the limits charged after the upstream's
// response (charge_on), and the bounded read of the body for the form:
// and json: key sources.

// rule is a configured rule with the middlewares that apply its limits.
type rule struct {
	cfg config.Rule
	// base applies the rule's own limits: to every request when the rule
	// has no plan, and to requests without a plan key otherwise.
	base *applied
	// plan, when not nil, picks the plan of each request.
	plan *rulePlan
	// body, when not nil, bounds the read of the body that a key source
	// of the rule needs.
	body *config.Body
	// usageBody: a limit of the rule reads its usage from the response's
	// body (usage.go).
	usageBody bool
}

// applied is one middleware of a rule, with the proxy behind it.
type applied struct {
	// mw applies the limits; nil when there are none (an unlimited plan
	// on a rule without limits of its own).
	mw *httplimit.Middleware
	// proxied is mw in front of the reverse proxy, which charges the
	// charge_on limits after the upstream's response; nil without an
	// upstream.
	proxied http.Handler
	// concurrency reports that a limit is a concurrency limit, which only
	// the proxy can hold while the request runs: forward-auth refuses it.
	concurrency bool
	// settles reports that a limit's cost is settled by the usage its
	// response reports, which only the proxy sees (usage.go):
	// forward-auth refuses it.
	settles bool
}

// rulePlan picks the plan of a request and the middleware that applies
// it.
type rulePlan struct {
	key    httplimit.KeyFunc
	pick   plans.Picker
	set    *plans.Set
	byPlan map[string]*applied
	// usageBody: a plan's limit reads its usage from the response's body.
	usageBody bool
	// refuseUnknown: a client for whom no known plan is named gets no
	// plan (unknown: refuse) rather than the default.
	refuseUnknown bool
}

// choose returns the middleware that applies to r under the rule, and
// nil for a request the rule refuses because no known plan is named for
// its client (unknown: refuse); refuseUnknownPlan answers it.
func (ru *rule) choose(r *http.Request) *applied {
	if ru.plan == nil {
		return ru.base
	}
	key, ok := ru.plan.key(r)
	if !ok {
		return ru.base
	}
	name, ok := ru.plan.pick(r, key)
	if ru.plan.refuseUnknown {
		if _, known := ru.plan.set.Plan(name); !ok || !known {
			return nil
		}
	}
	return ru.plan.byPlan[ru.plan.set.Resolve(name, ok).Name]
}

// refuseUnknownPlan answers a request that choose refused: 403, since
// no wait can make the client known.
func (ru *rule) refuseUnknownPlan(w http.ResponseWriter) {
	writeProblemJSON(w, http.StatusForbidden, "Forbidden",
		fmt.Sprintf("no plan is known for this client: rule %q refuses clients without one (plan.unknown: refuse)", ru.cfg.Name))
}

// buildRule compiles rule i of the configuration.
func (h *Handler) buildRule(st *state, cfg *config.Config, i int, rc config.Rule, opts *httplimit.Options, body config.Body) (*rule, error) {
	ru := &rule{cfg: rc}
	keys := keyOptions(opts.ClientIP, body)
	own := make([]httplimit.Limit, 0, len(rc.Limits))
	readsBody := false
	for _, rl := range rc.Limits {
		l, ok := cfg.Limit(rl.Limit)
		if !ok {
			return nil, fmt.Errorf("server: rule %d: no limit named %q", i, rl.Limit)
		}
		key, err := httplimit.ParseKey(rl.Key, keys)
		if err != nil {
			return nil, fmt.Errorf("server: rule %d: %w", i, err)
		}
		lim := h.limit(l, key, rl.Cost, rl.ChargeOn)
		if rl.Usage != "" {
			spec, err := usage.Parse(rl.Usage)
			if err != nil {
				return nil, fmt.Errorf("server: rule %d: %w", i, err)
			}
			lim.Usage, lim.SettleWithin = h.usageFunc(l.Name(), spec), rl.SettleWithin
			ru.usageBody = ru.usageBody || spec.ReadsBody()
		}
		own = append(own, lim)
		readsBody = readsBody || keyReadsBody(rl.Key)
	}
	var err error
	if ru.base, err = h.apply(st, own, opts); err != nil {
		return nil, fmt.Errorf("server: rule %d: %w", i, err)
	}
	if rp := rc.Plan; rp != nil {
		readsBody = readsBody || keyReadsBody(rp.Key) || keyReadsBody(rp.From)
		if ru.plan, err = h.buildPlan(st, cfg, rp, keys, own, opts); err != nil {
			return nil, fmt.Errorf("server: rule %d: %w", i, err)
		}
		ru.usageBody = ru.usageBody || ru.plan.usageBody
	}
	if readsBody {
		ru.body = &body
	}
	return ru, nil
}

// keyOptions returns how the key sources of a rule are built: "ip" with
// the proxy's client IP (its trusted proxies), form: and json: within the
// proxy's body bounds.
func keyOptions(clientIP *httplimit.ClientIP, body config.Body) *httplimit.KeyOptions {
	return &httplimit.KeyOptions{ClientIP: clientIP, Sources: httplimit.BodySources(&httplimit.BodyOptions{MaxBytes: body.MaxBytes})}
}

// buildPlan compiles a rule's plan: one middleware per plan, each with
// the rule's own limits and the plan's, counted under the plan's key.
func (h *Handler) buildPlan(st *state, cfg *config.Config, rp *config.RulePlan, keys *httplimit.KeyOptions, own []httplimit.Limit, opts *httplimit.Options) (*rulePlan, error) {
	key, err := httplimit.ParseKey(rp.Key, keys)
	if err != nil {
		return nil, fmt.Errorf("plan key: %w", err)
	}
	var ps []plans.Plan
	out := &rulePlan{key: key, byPlan: make(map[string]*applied)}
	for _, cp := range cfg.Plans() {
		p := plans.Plan{Name: cp.Name}
		limits := slices.Clone(own)
		for _, name := range cp.Limits {
			l, ok := cfg.Limit(name)
			if !ok {
				return nil, fmt.Errorf("plan %q: no limit named %q", cp.Name, name)
			}
			p.Policies = append(p.Policies, l.Policy)
			lim := h.limit(l, key, rp.Cost, nil)
			if u, ok := cp.Usage[name]; ok {
				spec, err := usage.Parse(u.Spec)
				if err != nil {
					return nil, fmt.Errorf("plan %q: %w", cp.Name, err)
				}
				lim.Cost, lim.Usage, lim.SettleWithin = u.Cost, h.usageFunc(l.Name(), spec), u.SettleWithin
				out.usageBody = out.usageBody || spec.ReadsBody()
			}
			limits = append(limits, lim)
		}
		ps = append(ps, p)
		a, err := h.apply(st, limits, opts)
		if err != nil {
			return nil, fmt.Errorf("plan %q: %w", cp.Name, err)
		}
		out.byPlan[cp.Name] = a
	}
	def := rp.Default
	if rp.RefuseUnknown && len(ps) > 0 {
		def = ps[0].Name // never used: choose refuses first
	}
	set, err := plans.NewSet(def, ps...)
	if err != nil {
		return nil, err
	}
	out.set, out.refuseUnknown = set, rp.RefuseUnknown
	switch {
	case rp.From != "":
		from, err := httplimit.ParseKey(rp.From, keys)
		if err != nil {
			return nil, fmt.Errorf("plan from: %w", err)
		}
		out.pick = plans.FromKey(from)
	case rp.Table != "":
		t, ok := st.tables[rp.Table]
		if !ok {
			return nil, fmt.Errorf("no plan table named %q", rp.Table)
		}
		out.pick = plans.FromTable(t.table, t.failed)
	default:
		return nil, errors.New("the plan has neither from nor table")
	}
	return out, nil
}

// apply builds the middleware of a list of limits, and its proxy.
func (h *Handler) apply(st *state, limits []httplimit.Limit, opts *httplimit.Options) (*applied, error) {
	if len(limits) == 0 {
		return &applied{}, nil
	}
	mw, err := httplimit.New(h.store, limits, opts)
	if err != nil {
		return nil, err
	}
	a := &applied{mw: mw}
	for i := range limits {
		a.concurrency = a.concurrency || limits[i].Policy.Algorithm == sluice.ConcurrencyAlgorithm
		a.settles = a.settles || limits[i].Usage != nil
	}
	if st.proxy != nil {
		a.proxied = mw.Handler(st.proxy)
	}
	return a, nil
}

// limit returns the httplimit limit of a configured limit, with the
// runtime overrides of its keys applied.
func (h *Handler) limit(l config.Limit, key httplimit.KeyFunc, cost int64, chargeOn []int) httplimit.Limit {
	base := l.Policy
	out := httplimit.Limit{
		Policy: base,
		Key:    key,
		Cost:   cost,
		Shadow: l.Shadow,
		PolicyFunc: func(_ *http.Request, key string) (sluice.Policy, bool) {
			p, _ := h.resolver.Policy(base, key)
			return p, true
		},
	}
	if len(chargeOn) > 0 {
		statuses := slices.Clone(chargeOn)
		out.ChargeOn = func(status int) bool { return slices.Contains(statuses, status) }
	}
	return out
}

// keyReadsBody reports whether a key spec has a source that reads the
// request body.
func keyReadsBody(spec string) bool {
	for part := range strings.SplitSeq(spec, "+") {
		if strings.HasPrefix(part, "form:") || strings.HasPrefix(part, "json:") {
			return true
		}
	}
	return false
}

// planTable is a configured plan table, ready for lookups.
type planTable struct {
	cfg   config.PlanTable
	table plans.Table
	// failed reports a failed lookup, at most once per tableLogEvery.
	failed func(error)
}

// tableLogEvery is the least time between two log lines about a failing
// plan table.
const tableLogEvery = 10 * time.Second

// buildTables opens the plan tables of a configuration with
// Options.OpenTable.
func (h *Handler) buildTables(cfg *config.Config) (map[string]*planTable, error) {
	out := make(map[string]*planTable)
	var known []string
	for _, p := range cfg.Plans() {
		known = append(known, p.Name)
	}
	for _, tc := range cfg.PlanTables() {
		if h.openTable == nil {
			return nil, fmt.Errorf("server: plan table %q: the server cannot open plan tables (Options.OpenTable)", tc.Name)
		}
		table, err := h.openTable(tc, known)
		if err != nil {
			return nil, fmt.Errorf("server: plan table %q: %w", tc.Name, err)
		}
		out[tc.Name] = &planTable{cfg: tc, table: table,
			failed: h.throttledWarn("plans: the plan table failed; clients get the default plan, or the plan last seen", slog.String("table", tc.Name))}
	}
	return out, nil
}

// throttledWarn returns a function that logs an error at Warn, at most
// once per tableLogEvery, counting the ones it skips.
func (h *Handler) throttledWarn(msg string, attrs ...slog.Attr) func(error) {
	var mu sync.Mutex
	var last time.Time
	skipped := 0
	return func(err error) {
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < tableLogEvery {
			skipped++
			mu.Unlock()
			return
		}
		n := skipped
		last, skipped = now, 0
		mu.Unlock()
		h.logger.LogAttrs(context.Background(), slog.LevelWarn, msg, append(attrs, slog.Any("error", err), slog.Int("not_logged", n))...)
	}
}

// readBody reads ahead the body of a request whose rule has a body key
// source, within the rule's bounds: at most Body.MaxBytes (a longer body
// gives no body key, and streams on intact), and within Body.Timeout. A
// body that does not arrive in time is answered 408, one that breaks off
// 400, and readBody reports false; the request cannot be forwarded
// intact.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, b *config.Body) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	rc := http.NewResponseController(w)
	start := time.Now()
	deadline := rc.SetReadDeadline(start.Add(b.Timeout)) == nil
	err := httplimit.BufferBody(r, b.MaxBytes)
	if deadline {
		// The rest of the body gets the server's own read timeout back.
		var d time.Time
		if h.readTimeout > 0 {
			d = start.Add(h.readTimeout)
		}
		rc.SetReadDeadline(d)
	}
	if err == nil {
		return true
	}
	w.Header().Set("Connection", "close")
	if isTimeout(err) {
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("the request body did not arrive within %v", b.Timeout))
		return false
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "the request body is too large")
		return false
	}
	writeError(w, http.StatusBadRequest, "reading the request body failed")
	return false
}

// isTimeout reports whether err is a read deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
