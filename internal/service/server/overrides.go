package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/overrides"
)

// The admin API of runtime overrides (docs/plans.md): one key of one limit
// gets another policy while the service runs.
//
//	GET    /v1/overrides                  every override in force
//	GET    /v1/overrides/{limit}          the overrides of one limit
//	GET    /v1/overrides/{limit}/{key}    one override
//	PUT    /v1/overrides/{limit}/{key}    set one: {"limit":1000,"period":"1m",
//	                                      "burst":2000,"algorithm":"token_bucket",
//	                                      "ttl":"24h" or "expires_at":"2026-12-01T00:00:00Z"}
//	DELETE /v1/overrides/{limit}/{key}    remove one
//
// They are admin endpoints: on listen.admin when it is set, behind the
// admin token when one is configured. PUT and DELETE need an admin token
// wherever they are served: with none configured they answer 404 saying
// how to turn them on. A key with a '/' is written %2F.

// maxOverrideBody is the largest body a PUT of an override may have.
const maxOverrideBody = 4 << 10

// maxOverrideTTL is the longest ttl, and the farthest expires_at.
const maxOverrideTTL = 10 * 365 * 24 * time.Hour

// registerOverrides adds the override endpoints to the admin routes.
func (h *Handler) registerOverrides() {
	h.handleAdmin("/v1/overrides", "overrides", onlyMethod("GET", h.serveOverrideList))
	h.handleAdmin("/v1/overrides/{limit}", "overrides", onlyMethod("GET", h.serveOverrideList))
	h.handleAdmin("/v1/overrides/{limit}/{key}", "overrides", h.serveOverride)
	h.handleAdmin("/v1/overrides/", "overrides", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "use /v1/overrides/{limit}/{key}, with a '/' in the key written %2F")
	})
}

// limitNamed returns the limit that overrides may name name: a limit of
// the configuration, or one of Options.OtherLimits (Envoy's descriptors).
func (h *Handler) limitNamed(cfg *config.Config, name string) (config.Limit, bool) {
	if l, ok := cfg.Limit(name); ok {
		return l, true
	}
	if h.otherLimits != nil {
		if p, ok := h.otherLimits(name); ok {
			return config.Limit{Policy: p}, true
		}
	}
	return config.Limit{}, false
}

// overrideJSON is an override in the admin API's answers.
type overrideJSON struct {
	LimitName string `json:"limit_name"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	// policyJSON gives limit, period, period_ms, a calendar period's
	// time_zone and week_starts, and burst (shadow is never set).
	policyJSON
	ExpiresAt string `json:"expires_at,omitempty"`
	SetBy     string `json:"set_by,omitempty"`
	SetAt     string `json:"set_at,omitempty"`
}

func toJSON(o *overrides.Override) *overrideJSON {
	if o == nil {
		return nil
	}
	p := o.Policy
	j := &overrideJSON{
		LimitName: o.Limit, Key: o.Key, Algorithm: p.Algorithm.String(),
		policyJSON: periodJSON(p, false), SetBy: o.SetBy,
	}
	if p.Algorithm.HasBurst() {
		j.Burst = p.Capacity()
	}
	if !o.ExpiresAt.IsZero() {
		j.ExpiresAt = o.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	if !o.SetAt.IsZero() {
		j.SetAt = o.SetAt.UTC().Format(time.RFC3339Nano)
	}
	return j
}

// overrideBody is the body of a PUT: the policy that replaces the limit's
// for the key. algorithm defaults to the limit's; burst applies to the
// token-bucket family; ttl and expires_at, one at most, end it.
type overrideBody struct {
	Limit  *int64  `json:"limit"`
	Period *string `json:"period"`
	// TimeZone and WeekStarts go with a calendar period.
	TimeZone   *string `json:"time_zone"`
	WeekStarts *string `json:"week_starts"`
	Burst      *int64  `json:"burst"`
	Algorithm  *string `json:"algorithm"`
	TTL        *string `json:"ttl"`
	ExpiresAt  *string `json:"expires_at"`
}

func (h *Handler) serveOverrideList(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	limit := r.PathValue("limit")
	list, err := h.overrides.List(r.Context(), limit, h.now())
	if err != nil {
		h.overrideStoreFailed(w, r, err)
		return
	}
	if _, ok := h.limitNamed(st.cfg, limit); limit != "" && !ok && len(list) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no limit named %q", limit))
		return
	}
	out := make([]*overrideJSON, len(list))
	for i := range list {
		out[i] = toJSON(&list[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"overrides": out, "shared": h.overrides.Shared()})
}

func (h *Handler) serveOverride(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	name, key := r.PathValue("limit"), r.PathValue("key")
	// Overrides of a limit that a reload removed can still be read and
	// removed; only PUT needs the limit.
	l, known := h.limitNamed(st.cfg, name)
	if !known && r.Method == http.MethodPut {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no limit named %q", name))
		return
	}
	if (r.Method == http.MethodPut || r.Method == http.MethodDelete) && st.cfg.Admin().Token == "" {
		writeProblemJSON(w, http.StatusNotFound, "Not Found", "writing overrides is off: it needs an admin token,"+
			" so set admin.token_file (or admin.token), and preferably listen.admin to serve the admin endpoints on a listener of their own")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		o, ok, err := h.overrides.Get(r.Context(), name, key, h.now())
		switch {
		case err != nil:
			h.overrideStoreFailed(w, r, err)
		case !ok && !known:
			writeError(w, http.StatusNotFound, fmt.Sprintf("no limit named %q, and no override of it for key %q", name, key))
		case !ok:
			writeError(w, http.StatusNotFound, fmt.Sprintf("no override of limit %q for key %q", name, key))
		default:
			writeJSON(w, http.StatusOK, map[string]any{"override": toJSON(&o)})
		}
	case http.MethodPut:
		h.putOverride(w, r, st.cfg, l, key)
	case http.MethodDelete:
		before, err := h.overrides.Delete(r.Context(), name, key, h.now())
		if err != nil {
			h.overrideStoreFailed(w, r, err)
			return
		}
		if before == nil && !known {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no limit named %q, and no override of it for key %q", name, key))
			return
		}
		if before == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no override of limit %q for key %q", name, key))
			return
		}
		h.logChange(r, "override removed", name, key, before, nil, l.Policy)
		writeJSON(w, http.StatusOK, map[string]any{"deleted": toJSON(before)})
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "use GET, PUT or DELETE for "+r.URL.Path)
	}
}

func (h *Handler) putOverride(w http.ResponseWriter, r *http.Request, cfg *config.Config, l config.Limit, key string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOverrideBody))
	if err != nil {
		rerr := bodyError(err)
		writeError(w, rerr.status, rerr.msg)
		return
	}
	var body overrideBody
	if rerr := decodeBody(raw, &body, "limit, period, time_zone, week_starts, burst, algorithm, ttl or expires_at"); rerr != nil {
		writeError(w, rerr.status, rerr.msg)
		return
	}
	now := h.now()
	o, rerr := parseOverride(cfg, l, key, &body, now)
	if rerr != nil {
		writeError(w, rerr.status, rerr.msg)
		return
	}
	o.SetBy, o.SetAt = h.who(r), now
	before, err := h.overrides.Put(r.Context(), o, now)
	if errors.Is(err, overrides.ErrFull) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if err != nil {
		h.overrideStoreFailed(w, r, err)
		return
	}
	h.logChange(r, "override set", l.Name(), key, before, &o, l.Policy)
	status := http.StatusCreated
	if before != nil {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"override": toJSON(&o), "before": toJSON(before)})
}

// parseOverride validates a PUT body as the configuration validates a
// limit, and checks that the rules' costs still fit.
func parseOverride(cfg *config.Config, l config.Limit, key string, b *overrideBody, now time.Time) (overrides.Override, *requestError) {
	if l.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
		return overrides.Override{}, badRequest("limit %q is a concurrency limit, which overrides do not change: "+
			"the slots its leases hold now would stop counting under the new numbers, letting more than either limit in at once; change it in the configuration", l.Name())
	}
	p := sluice.Policy{Name: l.Name(), Algorithm: l.Policy.Algorithm}
	if b.Algorithm != nil {
		a, err := sluice.ParseAlgorithm(*b.Algorithm)
		if err != nil {
			return overrides.Override{}, badRequest("algorithm: %v", err)
		}
		if a == sluice.ConcurrencyAlgorithm {
			return overrides.Override{}, badRequest("algorithm: an override cannot make a rate limit a concurrency limit (a concurrency limit counts what is in flight, with leases the clients must release); choose a rate algorithm, or define a concurrency limit in the configuration")
		}
		p.Algorithm = a
	}
	switch {
	case b.Limit == nil:
		return overrides.Override{}, badRequest("limit is missing: how many cost units the key may spend per period")
	case *b.Limit < 1 || *b.Limit > sluice.MaxLimit:
		return overrides.Override{}, badRequest("limit must be from 1 to %d, got %d", sluice.MaxLimit, *b.Limit)
	}
	p.Limit = *b.Limit
	if b.Period == nil {
		return overrides.Override{}, badRequest("period is missing: a duration like 1s, 1m or 1h, or a calendar period (calendar_day, calendar_week, calendar_month, calendar_year)")
	}
	if config.IsCalendarPeriod(*b.Period) {
		var zone, week string
		if b.TimeZone != nil {
			zone = *b.TimeZone
		}
		if b.WeekStarts != nil {
			week = *b.WeekStarts
		}
		c, err := config.ParseCalendar(*b.Period, zone, week)
		if err != nil {
			return overrides.Override{}, badRequest("period: %v", err)
		}
		p.Calendar = c
		return finishOverride(cfg, l, key, b, p, now)
	}
	if b.TimeZone != nil || b.WeekStarts != nil {
		return overrides.Override{}, badRequest("time_zone and week_starts apply only to a calendar period (calendar_day, calendar_week, calendar_month, calendar_year)")
	}
	d, err := config.ParseDuration(*b.Period)
	switch {
	case err != nil:
		return overrides.Override{}, badRequest("period: %v", err)
	case d <= 0:
		return overrides.Override{}, badRequest("period must be positive, got %s", *b.Period)
	case d%time.Microsecond != 0:
		return overrides.Override{}, badRequest("period must be a whole number of microseconds, got %s", *b.Period)
	case d > sluice.MaxPeriod:
		return overrides.Override{}, badRequest("period must be at most 3652d12h (10 years), got %s", *b.Period)
	}
	p.Period = d
	return finishOverride(cfg, l, key, b, p, now)
}

// finishOverride is parseOverride's second half, for a policy p whose
// algorithm, limit and period are decided: the burst, the policy's
// validity, the expiry, and the rules' costs.
func finishOverride(cfg *config.Config, l config.Limit, key string, b *overrideBody, p sluice.Policy, now time.Time) (overrides.Override, *requestError) {
	if b.Burst != nil {
		switch {
		case !p.Algorithm.HasBurst():
			return overrides.Override{}, badRequest("burst: %s has no burst: its capacity is its limit; remove burst, or use token_bucket, gcra or leaky_bucket", p.Algorithm)
		case *b.Burst < 0 || *b.Burst > sluice.MaxLimit:
			// 0 means the limit, as in the configuration and the Go API.
			return overrides.Override{}, badRequest("burst must be from 0 (the limit) to %d, got %d", sluice.MaxLimit, *b.Burst)
		}
		p.Burst = *b.Burst
	}
	if err := p.Validate(); err != nil {
		return overrides.Override{}, badRequest("%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("%v: policy %q: ", sluice.ErrInvalidPolicy, p.Name)))
	}
	o := overrides.Override{Limit: l.Name(), Key: key, Policy: p}
	switch {
	case b.TTL != nil && b.ExpiresAt != nil:
		return overrides.Override{}, badRequest("ttl and expires_at cannot be combined; give one")
	case b.TTL != nil:
		ttl, err := config.ParseDuration(*b.TTL)
		switch {
		case err != nil:
			return overrides.Override{}, badRequest("ttl: %v", err)
		case ttl < time.Millisecond:
			return overrides.Override{}, badRequest("ttl must be at least 1ms, got %s", *b.TTL)
		case ttl > maxOverrideTTL:
			return overrides.Override{}, badRequest("ttl must be at most 3650d, got %s", *b.TTL)
		}
		o.ExpiresAt = now.Add(ttl)
	case b.ExpiresAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *b.ExpiresAt)
		switch {
		case err != nil:
			return overrides.Override{}, badRequest("expires_at must be an RFC 3339 time, like 2026-12-01T00:00:00Z, got %q", *b.ExpiresAt)
		case !at.After(now):
			return overrides.Override{}, badRequest("expires_at %s is not in the future (now is %s)", *b.ExpiresAt, now.UTC().Format(time.RFC3339))
		case at.Sub(now) > maxOverrideTTL:
			return overrides.Override{}, badRequest("expires_at must be at most 3650 days ahead, got %s", *b.ExpiresAt)
		}
		o.ExpiresAt = at
	}
	if !o.ExpiresAt.IsZero() {
		// Stores keep milliseconds; round up so that it never ends early.
		o.ExpiresAt = o.ExpiresAt.Add(time.Millisecond - 1).Truncate(time.Millisecond)
	}
	if where, cost := chargedAbove(cfg, l.Name(), p.Capacity()); where != "" {
		return overrides.Override{}, badRequest("the capacity %d is below the cost %d that %s charges to limit %q: no such request could pass", p.Capacity(), cost, where, l.Name())
	}
	return o, nil
}

// chargedAbove returns a rule that charges limit more than capacity per
// request, and that cost; "" when none does.
func chargedAbove(cfg *config.Config, limit string, capacity int64) (string, int64) {
	px, ok := cfg.Proxy()
	if !ok {
		return "", 0
	}
	for i, r := range px.Rules {
		for j, rl := range r.Limits {
			if rl.Limit == limit && rl.Cost > capacity {
				return fmt.Sprintf("proxy.rules[%d].limits[%d]", i, j), rl.Cost
			}
		}
		if r.Plan == nil || r.Plan.Cost <= capacity {
			continue
		}
		for _, p := range cfg.Plans() {
			for _, name := range p.Limits {
				if name == limit {
					return fmt.Sprintf("proxy.rules[%d].plan", i), r.Plan.Cost
				}
			}
		}
	}
	return "", 0
}

// who names the caller of an admin request for the log: the admin token's
// fingerprint (never the token) and the client address.
func (h *Handler) who(r *http.Request) string {
	tok := h.state.Load().cfg.Admin().Token
	if tok == "" {
		return "no-token@" + r.RemoteAddr
	}
	sum := sha256.Sum256([]byte(tok))
	return "token:" + hex.EncodeToString(sum[:4]) + "@" + r.RemoteAddr
}

// logChange logs a change of an override: who made it, of which limit and
// key, and the policy before and after (the limit's own when there was no
// override).
func (h *Handler) logChange(r *http.Request, msg, limit, key string, before, after *overrides.Override, own sluice.Policy) {
	describe := func(o *overrides.Override) string {
		if o == nil && own.Name == "" {
			return "none (the limit is not in the configuration)"
		}
		if o == nil {
			return "the limit's own: " + own.String()
		}
		s := o.Policy.String()
		if !o.ExpiresAt.IsZero() {
			s += " until " + o.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		return s
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, msg,
		slog.String("who", h.who(r)), slog.String("limit", limit), slog.String("key", key),
		slog.String("before", describe(before)), slog.String("after", describe(after)),
		slog.Bool("shared", h.overrides.Shared()))
}

func (h *Handler) overrideStoreFailed(w http.ResponseWriter, r *http.Request, err error) {
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "overrides: the store failed", slog.Any("error", err))
	writeError(w, http.StatusServiceUnavailable, "the override store failed; see the server's log")
}
