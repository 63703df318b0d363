package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// serveCharge answers POST /v1/charge: {"limit", "key", "cost"} charges
// cost units to the key whether or not they fit (the key may go into
// debt), and answers as a check does: allowed says whether they fitted.
func (h *Handler) serveCharge(w http.ResponseWriter, r *http.Request) {
	h.serveUsage(w, r, "charge", h.store.Debit)
}

// serveRefund answers POST /v1/refund: {"limit", "key", "cost"} gives cost
// units back to the key's latest charges, and answers its state after.
func (h *Handler) serveRefund(w http.ResponseWriter, r *http.Request) {
	h.serveUsage(w, r, "refund", h.store.Refund)
}

// serveUsage answers a charge or a refund (op), which store's op decides.
func (h *Handler) serveUsage(w http.ResponseWriter, r *http.Request, op string, decide func(context.Context, time.Time, sluice.Request) (sluice.Decision, error)) {
	st := h.state.Load()
	it, rerr := h.readUsage(w, r, st, op)
	if rerr != nil {
		writeProblemJSON(w, rerr.status, http.StatusText(rerr.status), rerr.msg)
		return
	}
	if it.limit.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
		writeProblemJSON(w, http.StatusUnprocessableEntity, "Unprocessable Entity", fmt.Sprintf(
			"limit %q is a concurrency limit: it holds units while requests run, and has no usage to %s; name a rate limit", it.limit.Name(), op))
		return
	}
	ctx := r.Context()
	d, err := decide(ctx, time.Time{}, sluice.Request{Policy: &it.limit.Policy, Key: it.key, Cost: it.cost})
	if err != nil {
		if n, ok := h.storeErrLog.allow(time.Now(), storeErrorLogEvery); ok {
			h.logger.LogAttrs(ctx, slog.LevelWarn, op+": store failed", slog.String("limit", it.limit.Name()), slog.Any("error", err), slog.Int("failures_not_logged", n))
		}
		writeProblemJSON(w, http.StatusServiceUnavailable, "Service Unavailable", "the store failed to "+op+"; see the server's log")
		return
	}
	now := h.now()
	res := httplimit.LimitResult{Policy: it.limit.Policy, Key: it.key, Cost: it.cost, Shadow: it.limit.Shadow, Applied: true, Decision: d}
	if !d.Degraded {
		httplimit.WriteHeaders(w.Header(), httplimit.HeadersIETF, []httplimit.LimitResult{res}, now)
	}
	b := appendResult(make([]byte, 0, 256), &res, &it, now)
	writeJSONBody(w, append(b, '\n'))
}

// usageBody is the body of POST /v1/charge and POST /v1/refund: the units
// (cost) to charge to, or give back to, one key of one limit.
type usageBody struct {
	Limit *string `json:"limit"`
	Key   *string `json:"key"`
	Cost  *int64  `json:"cost"`
}

// readUsage reads and validates the body of a charge or a refund (op
// names it in messages) and applies the runtime overrides.
func (h *Handler) readUsage(w http.ResponseWriter, r *http.Request, st *state, op string) (item, *requestError) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return item{}, bodyError(err)
	}
	var b usageBody
	if rerr := decodeBody(raw, &b, "limit, key and cost"); rerr != nil {
		return item{}, rerr
	}
	if b.Limit == nil && b.Key == nil && b.Cost == nil {
		return item{}, badRequest(`the body must hold "limit", "key" and "cost": the units to %s`, op)
	}
	it, rerr := checkOne(st.cfg, "", b.Limit, b.Key, b.Cost)
	if rerr != nil {
		return item{}, rerr
	}
	switch {
	case b.Cost == nil:
		return item{}, badRequest("cost is missing: the units to %s", op)
	case *b.Cost == 0:
		return item{}, badRequest("cost must be at least 1, got 0: there is nothing to %s", op)
	}
	it.limit.Policy, it.override = h.resolver.Policy(it.limit.Policy, it.key)
	return it, nil
}

// releaseBody is the body of POST /v1/release: a lease, and the usage of
// the limits whose estimates it settles, by the limit's name.
type releaseBody struct {
	Lease *string           `json:"lease"`
	Usage *map[string]int64 `json:"usage"`
}

// settlement is a validated release: the store's lease and, for each request
// of the store call that took it, the usage that settles its estimate, or
// -1 to keep the estimate (nil: keep them all); ests are the lease's
// estimates.
type settlement struct {
	lease string
	usage []int64
	ests  []estimate
}

// readRelease reads the body of POST /v1/release, answering 400 itself
// when it is not {"lease": "<lease>"} with an optional "usage": an object
// of whole numbers of at least 0, each naming a limit of which the lease
// holds an estimate.
func readRelease(w http.ResponseWriter, r *http.Request) (settlement, bool) {
	fail := func(format string, args ...any) (settlement, bool) {
		writeProblemJSON(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf(format, args...))
		return settlement{}, false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLeaseBody))
	if err != nil {
		return fail("%s", bodyError(err).msg)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var b releaseBody
	if err := dec.Decode(&b); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fail("unknown field %s (want lease and usage)", f)
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field == "usage" && typ.Type.Kind() == reflect.Int64 && numberRange(typ) == "" {
			// A limit's usage of the wrong type (encoding/json names the
			// map, not its member).
			return fail("usage: each limit's usage must be a whole number, not %s", typ.Value)
		}
		return fail("%s", bodyError(err).msg)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail("the body must hold one JSON object")
	}
	if msg := fieldProblem(raw, "usage"); msg != "" {
		return fail("%s", msg)
	}
	if b.Lease == nil || *b.Lease == "" {
		return fail(`missing lease: send {"lease": "<the lease of an admitted check>"}`)
	}
	storeLease, ests, ok := decodeUsageLease(*b.Lease)
	if !ok {
		return fail("the lease is not one this Sluice made (malformed)")
	}
	rel := settlement{lease: storeLease, ests: ests}
	if b.Usage == nil {
		return rel, true
	}
	usage := *b.Usage
	if len(ests) == 0 && len(usage) > 0 {
		return fail(`usage: the lease holds no estimate to settle (it was made without "lease": true); release it without usage`)
	}
	for name, n := range usage {
		if n < 0 {
			return fail("usage.%s must be 0 or more, got %d", name, n)
		}
	}
	rel.usage = make([]int64, len(ests))
	for i := range rel.usage {
		rel.usage[i] = -1
	}
	for name, n := range usage {
		found := false
		for i, e := range ests {
			if e.name == name && name != "" {
				rel.usage[i], found = n, true
			}
		}
		if !found {
			return fail("usage.%s: the lease holds no estimate of limit %q (it holds %s)", name, name, heldNames(ests))
		}
	}
	return rel, true
}

// heldNames lists the limits of a lease's estimates for a message.
func heldNames(ests []estimate) string {
	var out []string
	for _, e := range ests {
		if e.name != "" {
			out = append(out, fmt.Sprintf("%q", e.name))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
