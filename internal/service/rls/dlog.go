package rls

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
)

// The modes of a decision log entry of this door that a replay cannot
// decide as a limit of the candidate (decisionlog.Entry.Mode).
const (
	modeShadow   = "shadow"   // a descriptor in shadow mode, or the domain's shadow_mode
	modeQuota    = "quota"    // a descriptor in quota mode
	modeUsage    = "usage"    // usage spent already (debited), or count_refused
	modeOverride = "override" // the request's own limit override
	modeZero     = "zero"     // requests_per_unit 0, refused without the store
)

// startLog returns ctx carrying the decision log's record of a request
// of domain, when the log is on; else ctx and nil.
func (s *Service) startLog(ctx context.Context, domain string) (context.Context, *decisionlog.Decision) {
	if s.dlog == nil {
		return ctx, nil
	}
	dl := &decisionlog.Decision{Door: "rls", Rule: domain}
	return decisionlog.With(ctx, dl), dl
}

// writeLog writes a decided request to the decision log: door "rls", the
// domain as the rule, and each limit of each descriptor that matched,
// named as admin overrides name it ("envoy:" domain "." descriptor path),
// with the descriptor's store key, its hits as the cost, and its own
// outcome (ds, from each item's first). quotaRefused reports that the
// quota descriptors refused the request; shadowAll the domain's shadow
// mode.
func (s *Service) writeLog(dl *decisionlog.Decision, domain string, items []item, ds []sluice.Decision, quotaRefused, shadowAll bool, now time.Time) {
	rec := decisionlog.Record{Time: dl.At, Order: dl.Order, Door: dl.Door, Rule: dl.Rule}
	for i := range items {
		it := &items[i]
		if !it.matched || it.unlimited {
			continue
		}
		mode := ""
		switch {
		case it.shadow || shadowAll:
			mode = modeShadow
		case it.quota:
			mode = modeQuota
		case it.usage:
			mode = modeUsage
		}
		for j := range it.limits {
			l := &it.limits[j]
			d := &ds[it.first+j]
			e := decisionlog.Entry{Limit: l.policy.Name, Key: it.key, Cost: it.cost, Mode: mode}
			switch {
			case l.policy.Name == "":
				e.Limit, e.Mode = "envoy:"+domain+"."+it.metricKey, modeZero
			case l.policy.Name == "envoy-override:"+domain:
				e.Mode = modeOverride
			}
			switch {
			case d.Degraded:
				e.Outcome = "degraded"
			case d.Allowed:
				e.Outcome = "allowed"
			case mode == modeShadow || mode == modeQuota && !quotaRefused:
				e.Outcome = "shadow_denied"
			default:
				e.Outcome = "denied"
			}
			e.At, e.Order = dl.AtOf(l.policy.Name, it.key), dl.OrderOf(l.policy.Name, it.key)
			rec.Limits = append(rec.Limits, e)
		}
	}
	if len(rec.Limits) == 0 {
		return
	}
	rec.Stamp(now)
	s.dlog.Write(&rec)
}
