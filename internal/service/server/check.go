package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/internal/service/metrics"
)

// bodyBufs hold the bodies of POST /v1/check while they are parsed.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// answerBufs hold the answers of POST /v1/check while they are written;
// one that grew past maxPooledAnswer is left to the garbage collector.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledAnswer = 64 << 10

// checkBody is the body of POST /v1/check: one check (Limit, Key, Cost)
// or several (Checks), never both.
type checkBody struct {
	Limit  *string      `json:"limit"`
	Key    *string      `json:"key"`
	Cost   *int64       `json:"cost"`
	Checks *[]checkItem `json:"checks"`
	// Lease asks for a lease that settles the checks' costs as
	// estimates with the usage reported to POST /v1/release.
	Lease *bool `json:"lease"`
	// Plan or PlanTable, with Key and Cost, check the limits of a plan
	// (plancheck.go).
	Plan      *string `json:"plan"`
	PlanTable *string `json:"plan_table"`
}

type checkItem struct {
	Limit *string `json:"limit"`
	Key   *string `json:"key"`
	Cost  *int64  `json:"cost"`
}

// item is one validated check.
type item struct {
	limit config.Limit
	key   string
	cost  int64
	// settle, when not zero, is how long a leased estimate may be settled
	// (a plan's limit charged by usage), else the limit's settle_within.
	settle time.Duration
	// override reports that a runtime override replaced the limit's
	// policy; named, that the answer names the policy (a plan's check).
	override, named bool
}

// requestError is a problem with a request, answered with its status.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// serveCheck answers POST /v1/check. See docs/configuration.md for the
// request and response.
func (h *Handler) serveCheck(w http.ResponseWriter, r *http.Request) {
	st := h.state.Load()
	sc := checkScratchPool.Get().(*checkScratch)
	defer sc.release()
	req, rerr := h.parseCheck(w, r, st, &sc.one)
	items, multi, plan := req.items, req.multi, req.plan
	if rerr != nil {
		writeError(w, rerr.status, rerr.msg)
		return
	}
	ctx := r.Context()
	var dl *decisionlog.Decision
	if h.dlog != nil {
		dl = &decisionlog.Decision{Door: "check"}
		ctx = decisionlog.With(ctx, dl)
	}
	var results []httplimit.LimitResult
	if len(items) <= len(sc.results) {
		results = sc.results[:len(items)]
	} else {
		results = make([]httplimit.LimitResult, len(items))
	}
	d, err := h.decideChecks(ctx, sc, items, req.lease, results)
	if errors.Is(err, sluice.ErrNotAtomic) { // engine.Outcome.NotAtomic
		writeError(w, http.StatusUnprocessableEntity, notAtomicMessage)
		return
	}
	if errors.Is(err, sluice.ErrNotSupported) {
		// More concurrency keys than one lease can name: nothing was held.
		writeError(w, http.StatusUnprocessableEntity, "the checks cannot be decided together: "+err.Error()+"; nothing was charged: send fewer concurrency checks in one request")
		return
	}
	if err != nil {
		if n, ok := h.storeErrLog.allow(time.Now(), storeErrorLogEvery); ok {
			h.logger.LogAttrs(ctx, slog.LevelWarn, "check: store failed", slog.Any("error", err), slog.Int("failures_not_logged", n))
		}
		writeError(w, http.StatusServiceUnavailable, "the store failed to decide; see the server's log")
		return
	}
	// One reading of the clock for the status page's second, the
	// headers and the answer.
	now := h.now()
	for i := range results {
		res := &results[i]
		if res.Err == nil {
			h.record(now, res.Policy.Name, res.Key, res.Decision, res.Shadow)
		}
	}
	if h.tracing != nil {
		deciding := ""
		for i := range results {
			if res := &results[i]; res.Err == nil {
				h.tracing.Limit(ctx, res.Policy.Name, res.Key, res.Cost, metrics.Outcome(res.Decision, res.Shadow), res.Decision)
				if deciding == "" && !res.Decision.Allowed && !res.Shadow {
					deciding = res.Policy.Name
				}
			}
		}
		h.tracing.Decision(ctx, "", deciding, d)
	}
	if dl != nil {
		rec := decisionlog.Record{Time: dl.At, Order: dl.Order, Door: dl.Door, Limits: make([]decisionlog.Entry, 0, len(results))}
		for i := range results {
			if res := &results[i]; res.Err == nil {
				rec.Limits = append(rec.Limits, decisionlog.Entry{Limit: res.Policy.Name, Key: res.Key, Cost: res.Cost, Outcome: metrics.Outcome(res.Decision, res.Shadow), At: dl.AtOf(res.Policy.Name, res.Key), Order: dl.OrderOf(res.Policy.Name, res.Key)})
			}
		}
		h.writeDecision(&rec, now)
	}
	if !d.Allowed && h.logger.Enabled(ctx, slog.LevelDebug) {
		var denied []string
		for i := range results {
			if !results[i].Shadow && !results[i].Decision.Allowed {
				denied = append(denied, results[i].Policy.Name)
			}
		}
		h.logger.LogAttrs(ctx, slog.LevelDebug, "rate limit: denied", slog.Any("limits", denied),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Duration("retry_after", d.RetryAfter))
	}

	if !d.Degraded {
		httplimit.WriteHeaders(w.Header(), httplimit.HeadersIETF, results, now)
	}
	ab := answerBufs.Get().(*[]byte)
	b := (*ab)[:0]
	defer func() {
		if cap(b) <= maxPooledAnswer {
			*ab = b[:0]
			answerBufs.Put(ab)
		}
	}()
	if multi {
		b = appendMulti(b, d, results, items, plan, now)
	} else {
		b = appendResult(b, &results[0], &items[0], now)
	}
	if d.Lease != "" {
		// The checks hold a concurrency limit's slot, or estimates: the
		// client releases it with POST /v1/release when its request ends,
		// with the usage that settles the estimates.
		b = appendLease(b[:len(b)-1], d.Lease, items, req.lease)
		b = append(b, '}')
	}
	b = append(b, '\n')
	writeJSONBody(w, b)
}

// writeJSONBody answers 200 with b, a JSON body, not to be cached. net/http
// sets Content-Length for a body written at once.
func writeJSONBody(w http.ResponseWriter, b []byte) {
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Cache-Control"] = noStore
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// decideChecks decides items with the engine (the enforced checks all or
// nothing, the dry-run ones apart) and fills results. A rate limit's check
// of cost 0 checks its budget: it is admitted while a unit is left. With
// lease, the enforced rate limits' costs are estimates that the lease
// settles within the limit's settle_within. It returns the combined
// decision, or the store's error on the enforced checks.
func (h *Handler) decideChecks(ctx context.Context, sc *checkScratch, items []item, lease bool, results []httplimit.LimitResult) (sluice.Decision, error) {
	checks, eres := sc.checks[:0], sc.eres[:0]
	if len(items) > len(sc.checks) {
		checks, eres = make([]engine.Check, 0, len(items)), make([]engine.CheckResult, 0, len(items))
	}
	for i := range items {
		checks = append(checks, checkOf(&items[i], lease))
	}
	eres = eres[:len(checks)]
	if len(checks) <= len(sc.checks) {
		sc.used = len(checks)
	}
	var o engine.Outcome
	sc.buf.Decide(ctx, h.store, time.Time{}, checks, eres, &o)
	if o.Err != nil {
		return sluice.Decision{}, o.Err
	}
	for i, it := range items {
		results[i] = httplimit.LimitResult{Policy: it.limit.Policy, Key: it.key, Cost: it.cost, Shadow: it.limit.Shadow, Applied: true,
			Decision: eres[i].Decision, Err: eres[i].Err}
		if eres[i].Err != nil {
			if n, ok := h.storeErrLog.allow(time.Now(), storeErrorLogEvery); ok {
				h.logger.LogAttrs(ctx, slog.LevelWarn, "check: store failed on one check",
					slog.String("limit", it.limit.Policy.Name), slog.Any("error", eres[i].Err), slog.Int("failures_not_logged", n))
			}
		}
	}
	return o.Decision, nil
}

// checkScratch holds the buffers of one POST /v1/check of up to a few
// checks, pooled: the store call makes the checks' policies escape, so
// they live here rather than on the stack.
type checkScratch struct {
	one     [1]item // the commonest body's one check
	results [2]httplimit.LimitResult
	checks  [8]engine.Check
	eres    [8]engine.CheckResult
	used    int // how many of checks and eres the request used
	buf     engine.Buffers
}

var checkScratchPool = sync.Pool{New: func() any { return new(checkScratch) }}

// release clears sc, keeping no key alive, and puts it back in the pool.
func (sc *checkScratch) release() {
	sc.one = [1]item{}
	sc.results = [2]httplimit.LimitResult{}
	clear(sc.checks[:sc.used])
	clear(sc.eres[:sc.used])
	sc.used = 0
	checkScratchPool.Put(sc)
}

// notAtomicMessage answers checks that the store cannot decide all or
// nothing (sluice.ErrNotAtomic): on Redis Cluster, keys in different hash
// slots.
const notAtomicMessage = "the checks name keys that the store cannot decide all or nothing: on Redis Cluster their keys lie in different hash slots. " +
	"Nothing was charged, and retrying cannot help: give all the checks of one request the same key (every limit of one key shares a slot), " +
	"or send checks on different keys in separate requests (docs/configuration.md, POST /v1/check)"

// Header values shared by every response: slices of capacity 1, so that
// an Add to a response's header copies them rather than writing into them.
var (
	jsonContentType = []string{"application/json"}[:1:1]
	noStore         = []string{"no-store"}[:1:1]
)

// checkRequest is a validated /v1/check body.
type checkRequest struct {
	items []item
	// multi reports the "checks" form (or a plan's, which plan names).
	multi bool
	plan  string
	// lease asks that the costs be estimates, settled through a lease.
	lease bool
}

// parseCheck reads and validates a /v1/check body and applies the runtime
// overrides. A cost above a limit's capacity is not an error: the engine
// refuses it (retry_after_ms -1). A body of one check that the fast path
// reads (fastCheck) is decoded into one, and items is then one[:].
func (h *Handler) parseCheck(w http.ResponseWriter, r *http.Request, st *state, one *[1]item) (checkRequest, *requestError) {
	req, rerr := h.decodeCheck(w, r, st, one)
	for i := range req.items {
		it := &req.items[i]
		it.limit.Policy, it.override = h.resolver.Policy(it.limit.Policy, it.key)
	}
	return req, rerr
}

// decodeCheck is parseCheck before the overrides apply.
func (h *Handler) decodeCheck(w http.ResponseWriter, r *http.Request, st *state, one *[1]item) (checkRequest, *requestError) {
	items, multi, plan, lease, rerr := h.decodeCheckBody(w, r, st, one)
	return checkRequest{items: items, multi: multi, plan: plan, lease: lease}, rerr
}

// decodeCheckBody is decodeCheck's reading of the body.
func (h *Handler) decodeCheckBody(w http.ResponseWriter, r *http.Request, st *state, one *[1]item) (items []item, multi bool, plan string, lease bool, rerr *requestError) {
	cfg := st.cfg
	// A body of a declared length within maxBody cannot be longer:
	// net/http stops it at its Content-Length (over HTTP/2, a longer one
	// is an error). Any other is read through http.MaxBytesReader.
	var body io.Reader = r.Body
	if r.ContentLength < 0 || r.ContentLength > maxBody {
		body = http.MaxBytesReader(w, r.Body, maxBody)
	}
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer func() {
		buf.Reset()
		bodyBufs.Put(buf)
	}()
	start, limited := time.Time{}, false
	if h.checkReadTimeout > 0 {
		start = time.Now()
		limited = setReadDeadline(w, start.Add(h.checkReadTimeout))
	}
	_, readErr := buf.ReadFrom(body)
	timedOut := readErr != nil && isTimeout(readErr)
	if limited && !timedOut {
		// The body is read: what is left of the connection's reading (Go's
		// watch for the client going away, or its discarding of a body
		// too large) gets the server's own timeout back, so that a slow
		// store is not cut short. A body that timed out keeps the passed
		// deadline, so that the server does not wait for its rest.
		var d time.Time
		if h.readTimeout > 0 {
			d = start.Add(h.readTimeout)
		}
		setReadDeadline(w, d)
	}
	if timedOut {
		w.Header().Set("Connection", "close")
		within := h.readTimeout
		if limited {
			within = h.checkReadTimeout
		}
		return nil, false, "", false, &requestError{http.StatusRequestTimeout, fmt.Sprintf("the request body did not arrive within %v", within)}
	}
	if readErr == nil {
		if limit, key, cost, hasCost, ok := fastCheck(buf.Bytes()); ok {
			var costp *int64
			if hasCost {
				costp = &cost
			}
			it, rerr := checkOne(cfg, "", &limit, &key, costp)
			if rerr != nil {
				return nil, false, "", false, rerr
			}
			one[0] = it
			return one[:], false, "", false, nil
		}
	}
	// Any other body, or one whose reading failed: encoding/json reads
	// what was read, then the rest (the same error again, if any).
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(buf.Bytes()), body))
	dec.DisallowUnknownFields()
	var cb checkBody
	if err := dec.Decode(&cb); err != nil {
		return nil, false, "", false, bodyError(err)
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
	case errors.As(err, new(*http.MaxBytesError)):
		return nil, false, "", false, bodyError(err)
	default:
		return nil, false, "", false, badRequest("the body holds more than one JSON value")
	}
	if msg := fieldProblem(buf.Bytes()); readErr == nil && msg != "" {
		return nil, false, "", false, badRequest("%s", msg)
	}
	lease = cb.Lease != nil && *cb.Lease
	if cb.Plan != nil || cb.PlanTable != nil {
		items, multi, plan, rerr = h.planCheck(r, st, &cb)
		return items, multi, plan, lease, rerr
	}
	if cb.Checks == nil {
		if cb.Limit == nil && cb.Key == nil && cb.Cost == nil {
			return nil, false, "", false, badRequest(`the body must hold "limit" and "key" (and optionally "cost"), or "checks": a list of them, or "plan" or "plan_table" and "key"`)
		}
		it, rerr := checkOne(cfg, "", cb.Limit, cb.Key, cb.Cost)
		if rerr != nil {
			return nil, false, "", false, rerr
		}
		return []item{it}, false, "", lease, nil
	}
	if cb.Limit != nil || cb.Key != nil || cb.Cost != nil {
		return nil, true, "", false, badRequest(`"checks" cannot be combined with "limit", "key" or "cost" at the top level`)
	}
	checks := *cb.Checks
	switch {
	case len(checks) == 0:
		return nil, true, "", false, badRequest(`"checks" must hold at least one check`)
	case len(checks) > maxChecks:
		return nil, true, "", false, badRequest(`"checks" holds %d checks; at most %d are allowed`, len(checks), maxChecks)
	}
	items = make([]item, len(checks))
	for i, c := range checks {
		it, rerr := checkOne(cfg, fmt.Sprintf("checks[%d].", i), c.Limit, c.Key, c.Cost)
		if rerr != nil {
			return nil, true, "", false, rerr
		}
		items[i] = it
	}
	return items, true, "", lease, nil
}

// checkOne validates one check; where prefixes field names in messages.
// The limit's name is a string, or the body's bytes (fastCheck's), which
// are looked up without a copy.
func checkOne[Name string | []byte](cfg *config.Config, where string, limit *Name, key *string, cost *int64) (item, *requestError) {
	if limit == nil || len(*limit) == 0 {
		return item{}, badRequest("%slimit is missing: name a limit of the configuration", where)
	}
	if key == nil {
		return item{}, badRequest("%skey is missing", where)
	}
	if *key == "" {
		return item{}, badRequest("%skey is empty", where)
	}
	it := item{key: *key, cost: 1}
	if cost != nil {
		if *cost < 0 {
			return item{}, badRequest("%scost must be 0 or more, got %d", where, *cost)
		}
		it.cost = *cost
	}
	l, ok := cfg.Limit(string(*limit))
	if !ok {
		return item{}, &requestError{http.StatusNotFound, fmt.Sprintf("%slimit: no limit named %q", where, string(*limit))}
	}
	// A cost above the capacity is not checked here: the engine refuses
	// it as a decision, once the overrides apply.
	it.limit = l
	return it, nil
}

// setReadDeadline sets the read deadline of the connection under w, as
// http.ResponseController does, and reports whether it could; unlike
// ResponseController it allocates nothing for a writer without one (a
// test's recorder).
func setReadDeadline(w http.ResponseWriter, t time.Time) bool {
	for {
		switch x := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return x.SetReadDeadline(t) == nil
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return false
		}
	}
}

// bodyError turns a JSON decoding error into a message for the client.
func bodyError(err error) *requestError {
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		return badRequest("the body is larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return badRequest("the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the body ends in the middle of its JSON")
	case errors.As(err, &syntax):
		return badRequest("the body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("the body must be a JSON object, not %s", typ.Value)
		}
		if msg := numberRange(typ); msg != "" {
			return badRequest("%s", msg)
		}
		return badRequest("%s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return badRequest("unknown field %s (want limit, key, cost, checks, lease, plan or plan_table)", f)
	}
	return badRequest("the body is not valid: %s", strings.TrimPrefix(msg, "json: "))
}

// numberRange describes an integer too large or too small for its field
// (encoding/json reports it as of the wrong type), or returns "".
func numberRange(typ *json.UnmarshalTypeError) string {
	digits, ok := strings.CutPrefix(typ.Value, "number ")
	if !ok || typ.Type.Kind() != reflect.Int64 {
		return ""
	}
	neg := strings.HasPrefix(digits, "-")
	if strings.Trim(strings.TrimPrefix(digits, "-"), "0123456789") != "" {
		return "" // a fraction or an exponent: not a whole number
	}
	if neg {
		return fmt.Sprintf("%s %s is negative", typ.Field, digits)
	}
	return fmt.Sprintf("%s %s is too large (at most %d)", typ.Field, digits, int64(math.MaxInt64))
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int64":
		return "a whole number"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "bool":
		return "true or false"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

// appendResult appends one check's result as a JSON object; now is the
// time of the decision, for a calendar limit's window.
func appendResult(b []byte, r *httplimit.LimitResult, it *item, now time.Time) []byte {
	d := r.Decision
	allowed := d.Allowed || r.Shadow
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, allowed)
	if it.named {
		b = append(b, `,"policy":`...)
		b = strconv.AppendQuote(b, r.Policy.Name)
	}
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, r.Policy.Limit, 10)
	if c := r.Policy.Capacity(); c != r.Policy.Limit {
		// A bucket whose burst is not its limit: remaining counts up to
		// the burst.
		b = append(b, `,"burst":`...)
		b = strconv.AppendInt(b, c, 10)
	}
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, millis(d.RetryAfter), 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, millis(d.ResetAfter), 10)
	if d.Delay > 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, millis(d.Delay), 10)
	}
	b = appendWindow(b, &r.Policy, now)
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if d.Blocked {
		b = append(b, `,"blocked":true`...)
	}
	if d.Offence {
		b = append(b, `,"offence":true`...)
	}
	if it.override {
		b = append(b, `,"override":true`...)
	}
	if r.Shadow {
		b = append(b, `,"shadow":true`...)
		if !d.Allowed && r.Err == nil {
			b = append(b, `,"shadow_denied":true`...)
		}
		if r.Err != nil {
			b = append(b, `,"error":"the store failed to decide"`...)
		}
	}
	return append(b, '}')
}

// appendMulti appends the answer to a "checks" request, or to a plan's
// check when plan is not empty.
func appendMulti(b []byte, d sluice.Decision, results []httplimit.LimitResult, items []item, plan string, now time.Time) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	if plan != "" {
		b = append(b, `,"plan":`...)
		b = strconv.AppendQuote(b, plan)
	}
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, millis(d.RetryAfter), 10)
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	b = append(b, `,"results":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendResult(b, &results[i], &items[i], now)
	}
	return append(b, "]}"...)
}

// appendWindow appends, for a calendar limit, the window_start and
// window_end of its window that holds now, as RFC 3339 times in the
// limit's zone. (The Redis store picks the window by Redis's clock; within
// a clock skew of a boundary the two may differ, the decision's
// reset_after_ms being Redis's.)
func appendWindow(b []byte, p *sluice.Policy, now time.Time) []byte {
	if p.Calendar.Unit == sluice.NoCalendar {
		return b
	}
	start, end, ok := p.Window(now)
	if !ok {
		return b
	}
	b = append(b, `,"window_start":"`...)
	b = start.AppendFormat(b, time.RFC3339)
	b = append(b, `","window_end":"`...)
	b = end.AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

// millis returns d in whole milliseconds, rounded up; 0 for d ≤ 0 but
// -1 for sluice.Never (a request that can never be admitted, as `sluice
// simulate` writes "never"). Decisions carry whole milliseconds already.
func millis(d time.Duration) int64 {
	if d == sluice.Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// appendLease appends the lease of an admitted check and the time until
// it expires unless renewed: the shortest lease of its concurrency limits,
// all taken at the decision's time, or else the time left to settle its
// estimates. With estimates (asked for, and an enforced rate limit among
// the checks), the lease names the limit of each (encodeUsageLease) and
// the answer adds settle_within_ms, the shortest of their settle_within.
func appendLease(b []byte, lease string, items []item, asked bool) []byte {
	var in, settle time.Duration
	for i := range items {
		l := &items[i].limit
		p := &l.Policy
		switch {
		case l.Shadow:
		case p.Algorithm == sluice.ConcurrencyAlgorithm:
			if in == 0 || p.Period < in {
				in = p.Period
			}
		case asked:
			if s := l.Settle(); settle == 0 || s < settle {
				settle = s
			}
		}
	}
	if settle > 0 {
		lease = encodeUsageLease(lease, leaseEstimates(items))
		if in == 0 {
			in = settle
		}
	}
	b = append(b, `,"lease":`...)
	b = strconv.AppendQuote(b, lease)
	b = append(b, `,"lease_expires_in_ms":`...)
	b = strconv.AppendInt(b, millis(in), 10)
	if settle > 0 {
		b = append(b, `,"settle_within_ms":`...)
		b = strconv.AppendInt(b, millis(settle), 10)
	}
	return b
}

// checkOf returns the engine's check of it: a rate limit checks a budget
// even at cost 0, and with lease its cost is an estimate to settle within
// the limit's settle_within.
func checkOf(it *item, lease bool) engine.Check {
	rate := it.limit.Policy.Algorithm != sluice.ConcurrencyAlgorithm
	c := engine.Check{Request: sluice.Request{Policy: &it.limit.Policy, Key: it.key, Cost: it.cost}, Budget: rate}
	switch {
	case it.limit.Shadow:
		c.Mode = engine.Shadow
	case lease && rate && it.settle > 0:
		c.SettleWithin = it.settle
	case lease && rate:
		c.SettleWithin = it.limit.Settle()
	}
	return c
}

// leaseEstimates returns, for each request of the store call that took a
// lease with estimates (the checks engine.Sent holds for, in order), the
// limit and cost of its estimate, or no name for one that is not (a
// concurrency limit's).
func leaseEstimates(items []item) []estimate {
	ests := make([]estimate, 0, len(items))
	for i := range items {
		if c := checkOf(&items[i], true); engine.Sent(&c) {
			e := estimate{}
			if c.SettleWithin > 0 {
				e = estimate{items[i].limit.Name(), items[i].cost}
			}
			ests = append(ests, e)
		}
	}
	return ests
}
