package server

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/service/usage"
)

// This file settles the limits whose cost the upstream's response
// reports (a rule limit's usage, docs/llm-budgets.md): the proxy admits
// the request under the estimate (cost) with a settlement lease, watches
// the response as it streams to the client (package usage), and when the
// response ends the middleware releases the lease with the usage it
// reported, or without it when there was none, which keeps the estimate
// charged and is counted in sluice_usage_unsettled_total.

// Why an estimate stayed charged, beside usage's reasons: the labels of
// sluice_usage_unsettled_total.
const (
	// noResponse: the upstream did not answer (502), or the request never
	// reached it.
	noResponse = "no_response"
	// expired: the response ended after settle_within.
	expired = "expired"
	// storeError: the store failed to settle.
	storeError = "store_error"
)

// settling is what the proxy keeps of one request admitted under limits
// that settle by usage: the Meter of its upstream's response, once the
// upstream answers. It lives in the request's context, from serveProxy to
// the middleware's settlement, all on the request's goroutine.
type settling struct {
	// readsBody: a limit reads the body for its usage, so the upstream is
	// asked for an uncompressed one.
	readsBody bool
	meter     *usage.Meter
}

type settlingKey struct{}

// settlingOf returns the settling of a request's context, or nil.
func settlingOf(ctx context.Context) *settling {
	s, _ := ctx.Value(settlingKey{}).(*settling)
	return s
}

// withSettling returns r with a settling of its own in its context.
func withSettling(r *http.Request, readsBody bool) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), settlingKey{}, &settling{readsBody: readsBody}))
}

// watchResponse starts watching the upstream's response of a request that
// settles by usage; the proxy's ModifyResponse.
func watchResponse(resp *http.Response) error {
	if s := settlingOf(resp.Request.Context()); s != nil {
		s.meter = usage.Watch(resp)
	}
	return nil
}

// usageFunc returns the httplimit Usage of a limit whose cost its
// response reports at spec: the usage the Meter found, or none, counted
// in sluice_usage_unsettled_total with its reason.
func (h *Handler) usageFunc(limit string, spec usage.Spec) func(*http.Request) (int64, bool) {
	return func(r *http.Request) (int64, bool) {
		s := settlingOf(r.Context())
		if s == nil || s.meter == nil {
			h.metrics.UsageUnsettled(limit, noResponse)
			return 0, false
		}
		n, why := s.meter.Usage(spec)
		if why != usage.Reported {
			h.metrics.UsageUnsettled(limit, string(why))
			return 0, false
		}
		return n, true
	}
}

// countSettlement counts what the store did with the usage reported for
// a request (httplimit's OnSettle); the usage not reported was counted
// by usageFunc.
func (h *Handler) countSettlement(ev *httplimit.Settlement) {
	for i := range ev.Results {
		r := &ev.Results[i]
		if !r.Applied || !r.Settles || !r.Reported {
			continue
		}
		switch {
		case ev.Err != nil:
			h.metrics.UsageUnsettled(r.Policy.Name, storeError)
		case !ev.Settled:
			h.metrics.UsageUnsettled(r.Policy.Name, expired)
		default:
			h.metrics.UsageSettled(r.Policy.Name, r.Usage)
		}
	}
}
