package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/engine"
)

// Limit is one rate limit the middleware applies: a policy, the key each
// request is counted under, and what a request costs.
type Limit struct {
	// Policy is the limit's policy. Its Name labels the limit in headers,
	// problem bodies, logs and stats, and keeps its state apart from other
	// limits in the store; when empty, New names it "default" if it is the
	// only limit and "limit-N" (N its position from 1) otherwise.
	Policy sluice.Policy
	// Key returns the key a request is counted under. Nil means the client
	// IP, as Options.ClientIP finds it. A request without a key is not
	// counted by this limit.
	Key KeyFunc
	// Cost is what each request costs; 0 means 1.
	Cost int64
	// CostFunc, when set, returns the cost of a request instead of Cost
	// (a heavy endpoint costs more). A cost below 1 exempts the request
	// from this limit.
	CostFunc func(r *http.Request) int64
	// PolicyFunc, when set, chooses the policy for each request from the
	// request and its key (a plan per customer); it replaces Policy, which
	// then only provides a default name for returned policies without one.
	// Returning false exempts the request from this limit. The policies
	// returned should have distinct names, since the name appears in the
	// RateLimit-Policy field and separates their state. It may return a
	// concurrency policy, held as Handler says, except for a Shadow or
	// ChargeOn limit: such a limit then does not apply to the request,
	// and the Logger gets an error.
	PolicyFunc func(r *http.Request, key string) (sluice.Policy, bool)
	// ChargeOn, when set, charges the limit after the response instead of
	// before it, and only for the statuses it accepts: "5 failed logins per
	// account" is a limit whose ChargeOn accepts 401 and 403. Before the
	// next handler runs the limit is checked without charging (Peek), so a
	// request whose limit is already spent is refused before it reaches the
	// handler; concurrent requests that pass that check together may all
	// be charged afterwards. Only Handler charges such limits; Check only
	// checks them. ChargeOn cannot be combined with Shadow, nor with a
	// concurrency policy, which holds its units while the request runs.
	ChargeOn func(status int) bool
	// Shadow makes the limit a dry run: it is decided and charged as if it
	// were enforced, its would-be denials are counted (Stats), logged and
	// reported to Options.OnDecision, but it never refuses a request and it
	// is not shown in the response's quota fields. It is decided apart
	// from the enforced limits, so it never changes what they charge. A
	// concurrency policy cannot be a dry run: it would hold units that
	// nothing releases.
	Shadow bool
	// Usage, when set, makes the limit's cost an estimate, settled with
	// what the request actually cost once the handler has run (the tokens
	// an LLM API reports having spent). Cost, or CostFunc's result, is
	// then the estimate charged before the handler runs, and 0 is allowed
	// (0 means 0, not 1: the request is admitted while the key has a unit
	// left, and charged only what Usage reports; a CostFunc result below
	// 0 exempts the request). When next returns or panics, Handler calls
	// Usage once with the request and settles the estimate with the units
	// it reports, within SettleWithin of the decision: more than the
	// estimate is charged (the key may go into debt, and is refused until
	// it has repaid it), less is given back. When Usage reports false
	// the estimate stays charged. Only Handler settles; Check charges the
	// estimate, which then stays. Usage cannot be combined with Shadow or
	// ChargeOn, nor with a concurrency policy.
	Usage func(r *http.Request) (units int64, ok bool)
	// SettleWithin bounds how long after the decision Usage may settle
	// the estimate; a request still running then keeps its estimate. 0
	// means DefaultSettleWithin. It needs Usage.
	SettleWithin time.Duration
}

// DefaultSettleWithin is the SettleWithin of a Limit with Usage that sets
// none: long enough for a streamed answer of many minutes.
const DefaultSettleWithin = time.Hour

// Options configure a Middleware. The zero value (and nil) is valid: the
// defaults are given with each field.
type Options struct {
	// Headers selects the quota fields written on responses; the default
	// is HeadersIETF (RateLimit and RateLimit-Policy).
	Headers HeaderStyle
	// ClientIP finds the client address for limits without a Key. Nil
	// means the connection's remote address, IPv6 grouped by /64, no
	// trusted proxies.
	ClientIP *ClientIP
	// OnDenied writes the response to a refused request; nil means
	// WriteProblem (an RFC 9457 problem+json body).
	OnDenied DenyHandler
	// OnDecision, when set, is called once for every request the
	// middleware decides on, after the decision and before the response is
	// written or the next handler runs, for metrics and logs. It must not
	// keep the Event or its slices after it returns.
	OnDecision func(*Event)
	// OnSettle, when set, is called once for every request whose limits
	// with Usage were settled (Handler, after next returned), with what
	// each reported and what the store did. It must not keep the
	// Settlement or its slices after it returns.
	OnSettle func(*Settlement)
	// FailOpen lets requests through when the store returns an error (the
	// store's own failure policy did not decide). The default, false,
	// answers 503 Service Unavailable with Retry-After. Either way the
	// error goes to OnDecision and the Logger, never to the client.
	FailOpen bool
	// ErrorRetryAfter is the Retry-After of a 503 whose decision carries
	// no retry time; default 1s.
	ErrorRetryAfter time.Duration
	// MaxDelay bounds how long a leaky-bucket limit may hold an admitted
	// request to space requests evenly (Decision.Delay); a request that
	// would wait longer is refused. 0 means no bound beyond the bucket's
	// own.
	MaxDelay time.Duration
	// Logger, when set, receives dry-run denials (Info), store errors
	// (Warn) and denials (Debug: "rate limit: denied", with the limits that
	// denied, the method, the path and retry_after). Keys are never
	// logged; use OnDecision to see them.
	Logger *slog.Logger
	// Now returns the current time for X-RateLimit-Reset; default
	// time.Now. Decisions use the store's clock.
	Now func() time.Time
}

// LimitResult is one limit's part of the decision on a request, as
// Options.OnDecision and a DenyHandler see it.
type LimitResult struct {
	// Policy is the policy applied; its Name is always set.
	Policy sluice.Policy
	// Key is the key the request was counted under.
	Key string
	// Cost is the request's cost under this limit.
	Cost int64
	// Shadow reports a dry-run limit.
	Shadow bool
	// Applied reports that the limit was decided: false when the request
	// had no key, a cost below 1, or no policy from PolicyFunc.
	Applied bool
	// Decision is the store's decision for this limit. For a request
	// refused by another limit, it reports the state without this
	// request's charge (nothing is charged).
	Decision sluice.Decision
	// Err is the store's error for this limit, if any.
	Err error
	// Settles reports a limit with Usage that applied: its Cost is an
	// estimate, settled after the response.
	Settles bool
	// Usage is what the limit's Usage reported, when Reported; both are
	// set only for Options.OnSettle.
	Usage    int64
	Reported bool
}

func (r *LimitResult) counts() bool { return r.Applied && !r.Shadow }

// Settlement is what Options.OnSettle receives for a request whose limits
// with Usage were settled.
type Settlement struct {
	// Request is the request.
	Request *http.Request
	// Results holds one LimitResult per limit, in the order of the limits,
	// with Usage and Reported set for the limits that settle.
	Results []LimitResult
	// Settled reports that the store settled (or freed) something of the
	// request's lease; false when the settlement came after SettleWithin,
	// so that every estimate stayed charged, or when the store failed.
	Settled bool
	// Err is the store's error, if it failed to settle.
	Err error
}

// Event is what Options.OnDecision receives for a request.
type Event struct {
	// Request is the request decided on.
	Request *http.Request
	// Results holds one LimitResult per limit, in the order of the limits.
	Results []LimitResult
	// Allowed reports that the request goes on to the next handler.
	Allowed bool
	// Status is the middleware's own response status for a refused
	// request (429 or 503), 0 when Allowed.
	Status int
	// Decision is the combined decision of the enforced limits.
	Decision sluice.Decision
	// Err is the store's error for the enforced limits, if any (the
	// client never sees it).
	Err error
	// DryRunDenied reports that a dry-run limit would have refused the
	// request.
	DryRunDenied bool
}

// LimitStats counts one limit's refusals since the middleware was built.
type LimitStats struct {
	// Name is the limit's policy name.
	Name string
	// Denied counts requests this limit refused (with status 429).
	Denied uint64
	// DryRunDenied counts requests a dry-run limit would have refused.
	DryRunDenied uint64
}

// Middleware limits the requests that pass through it. Build one with New;
// it is safe for concurrent use.
type Middleware struct {
	store       sluice.Store
	limits      []limit
	enforced    int // how many limits are not dry runs
	style       HeaderStyle
	deny        DenyHandler
	onDecision  func(*Event)
	onSettle    func(*Settlement)
	failOpen    bool
	errRetry    time.Duration
	maxDelay    time.Duration
	logger      *slog.Logger
	now         func() time.Time
	policyField []string // RateLimit-Policy when every enforced limit applies
	chargeOn    bool     // some limit is charged after the response
	leases      bool     // some limit's Policy is a concurrency one
	settles     bool     // some limit has Usage
	pool        sync.Pool
}

type limit struct {
	policy     sluice.Policy
	key        KeyFunc
	cost       int64
	costFunc   func(*http.Request) int64
	policyFunc func(*http.Request, string) (sluice.Policy, bool)
	chargeOn   func(int) bool
	shadow     bool
	usage      func(*http.Request) (int64, bool)
	settle     time.Duration // SettleWithin, with Usage
	denied     atomic.Uint64
	dryDenied  atomic.Uint64
}

type scratch struct {
	res    []LimitResult
	checks []engine.Check       // the limits that apply to the request
	idx    []int                // the limit of each check
	eres   []engine.CheckResult // the engine's result of each check
	eb     engine.Buffers       // the engine's buffers
	viol   []string
	ev     Event
	// holds: a check of the request is under a concurrency policy.
	holds bool
	// actual is each check's actual cost, for a settlement.
	actual []int64
	st     Settlement
}

// New returns a Middleware that applies limits, all or nothing, through
// store: a request passes only when every enforced limit admits it, and
// when one refuses, none is charged. The limits are checked in one
// Store.AllowAll call (one round trip for a remote store).
func New(store sluice.Store, limits []Limit, opts *Options) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("httplimit: store is nil")
	}
	if len(limits) == 0 {
		return nil, errors.New("httplimit: no limits")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.ErrorRetryAfter < 0 {
		return nil, fmt.Errorf("httplimit: ErrorRetryAfter must not be negative, got %v", opts.ErrorRetryAfter)
	}
	if opts.MaxDelay < 0 {
		return nil, fmt.Errorf("httplimit: MaxDelay must not be negative, got %v", opts.MaxDelay)
	}
	cip := opts.ClientIP
	if cip == nil {
		cip = &ClientIP{}
	}
	if err := cip.check(); err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	m := newMiddleware(store, len(limits), opts)
	names := make(map[string]int, len(limits))
	var field []byte
	var calendar bool
	for i, l := range limits {
		p, err := checkLimit(i, l, len(limits), names)
		if err != nil {
			return nil, err
		}
		key := l.Key
		if key == nil {
			key = cip.Key
		}
		m.limits[i] = limit{
			policy:     p,
			key:        key,
			cost:       max(l.Cost, 1),
			costFunc:   l.CostFunc,
			policyFunc: l.PolicyFunc,
			chargeOn:   l.ChargeOn,
			shadow:     l.Shadow,
		}
		if l.Usage != nil {
			m.limits[i].cost, m.limits[i].usage, m.limits[i].settle = l.Cost, l.Usage, l.SettleWithin
			if l.SettleWithin == 0 {
				m.limits[i].settle = DefaultSettleWithin
			}
			m.settles = true
		}
		m.chargeOn = m.chargeOn || l.ChargeOn != nil
		m.leases = m.leases || p.Algorithm == sluice.ConcurrencyAlgorithm
		if !l.Shadow {
			m.enforced++
			// A PolicyFunc that returns the limit's own Policy (a runtime
			// override that is not set) keeps the shared field.
			if l.PolicyFunc == nil || p.Validate() == nil {
				// A calendar window's length changes (w): no shared field.
				calendar = calendar || p.Calendar.Unit != sluice.NoCalendar
				if len(field) > 0 {
					field = append(field, ", "...)
				}
				field = AppendPolicy(field, p)
			}
		}
	}
	if len(field) > 0 && !calendar {
		// Shared by every response: a slice of capacity 1, so that Add on a
		// response's header copies it rather than writing into it.
		m.policyField = []string{string(field)}[:1:1]
	}
	n := len(limits)
	m.pool.New = func() any { return newScratch(n) }
	return m, nil
}

// newMiddleware returns a Middleware of n limits with opts and their
// defaults, its limits still to fill.
func newMiddleware(store sluice.Store, n int, opts *Options) *Middleware {
	m := &Middleware{
		store:      store,
		limits:     make([]limit, n),
		style:      opts.Headers,
		deny:       opts.OnDenied,
		onDecision: opts.OnDecision,
		onSettle:   opts.OnSettle,
		failOpen:   opts.FailOpen,
		errRetry:   opts.ErrorRetryAfter,
		maxDelay:   opts.MaxDelay,
		logger:     opts.Logger,
		now:        opts.Now,
	}
	if m.deny == nil {
		m.deny = WriteProblem
	}
	if m.errRetry == 0 {
		m.errRetry = time.Second
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// checkLimit validates limit i of n and names its policy ("default" or
// "limit-N" when it has no name); names holds the names of the limits
// before it, and gets this one's.
func checkLimit(i int, l Limit, n int, names map[string]int) (sluice.Policy, error) {
	p := l.Policy
	if p.Name == "" {
		if n == 1 {
			p.Name = "default"
		} else {
			p.Name = fmt.Sprintf("limit-%d", i+1)
		}
	}
	where := fmt.Sprintf("httplimit: limit %d (%q)", i+1, p.Name)
	if !validPolicyName(p.Name) {
		return sluice.Policy{}, fmt.Errorf("%s: name must be printable ASCII", where)
	}
	if l.ChargeOn != nil && l.Shadow {
		return sluice.Policy{}, fmt.Errorf("%s: ChargeOn cannot be combined with Shadow", where)
	}
	switch {
	case l.SettleWithin < 0:
		return sluice.Policy{}, fmt.Errorf("%s: SettleWithin must not be negative, got %v", where, l.SettleWithin)
	case l.SettleWithin > 0 && l.Usage == nil:
		return sluice.Policy{}, fmt.Errorf("%s: SettleWithin needs Usage, the usage that settles the estimate", where)
	case l.Usage != nil && l.Shadow:
		return sluice.Policy{}, fmt.Errorf("%s: Usage cannot be combined with Shadow: a dry run is charged apart from the request and not settled", where)
	case l.Usage != nil && l.ChargeOn != nil:
		return sluice.Policy{}, fmt.Errorf("%s: Usage cannot be combined with ChargeOn: both say what the request is charged after the response", where)
	case l.Usage != nil && p.Algorithm == sluice.ConcurrencyAlgorithm:
		return sluice.Policy{}, fmt.Errorf("%s: Usage cannot be combined with a concurrency policy: it holds units while the request runs, and charges nothing to settle", where)
	}
	el := engine.Limit{Policy: p, Cost: l.Cost, VariablePolicy: l.PolicyFunc != nil, VariableCost: l.CostFunc != nil, Mode: mode(l)}
	if err := engine.CheckLimit(where, "request", el, i, names); err != nil {
		return sluice.Policy{}, err
	}
	return p, nil
}

// mode returns the engine's mode of l.
func mode(l Limit) engine.Mode {
	switch {
	case l.Shadow:
		return engine.Shadow
	case l.ChargeOn != nil:
		return engine.Deferred
	}
	return engine.Enforced
}

// newScratch returns the buffers of one request under n limits.
func newScratch(n int) *scratch {
	return &scratch{
		res:    make([]LimitResult, n),
		checks: make([]engine.Check, 0, n),
		idx:    make([]int, 0, n),
		eres:   make([]engine.CheckResult, n),
	}
}

// Handler returns next wrapped by the middleware: requests that the limits
// admit go on to next with the quota fields set on the response; refused
// ones get the DenyHandler's response.
//
// A request admitted under a concurrency limit holds its units (the
// decision's Lease) while next runs, and Handler releases them once when
// next returns or panics (the panic then goes on). When the client goes
// away, the request's context ends and the units are released when next
// returns, which a handler that honours its context does at once: never
// while next still runs, so that no more requests than the limit are
// ever inside next together. The release is not bound to the request's
// context, which may have ended, but to a context of its own that ends
// after ReleaseTimeout. A handler that runs longer than the policy's
// lease loses its units when the lease expires: choose a lease longer
// than the slowest request.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if !m.chargeOn && !m.settles {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sc := m.pool.Get().(*scratch)
			lease, ok := m.check(w, r, sc)
			m.release(sc)
			if !ok {
				return
			}
			if lease != "" {
				defer m.releaseLease(r, lease)
			}
			next.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := m.pool.Get().(*scratch)
		defer m.release(sc)
		lease, ok := m.check(w, r, sc)
		if !ok {
			return
		}
		switch {
		case lease != "" && m.settles:
			defer m.settleUsage(r, sc, lease)
		case lease != "":
			defer m.releaseLease(r, lease)
		}
		if !m.chargeOn {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		m.settle(r, sc.res, sw.status)
	})
}

// ReleaseTimeout bounds how long the middleware and the Transport wait
// for a store to release a lease when a request ends.
const ReleaseTimeout = 5 * time.Second

// releaseLease releases lease, taken for r, with a context that r's
// ending does not cancel; a failure is logged.
func (m *Middleware) releaseLease(r *http.Request, lease string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ReleaseTimeout)
	defer cancel()
	if _, err := m.store.Release(ctx, time.Time{}, lease, nil); err != nil && m.logger != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: releasing a concurrency lease failed; its units are held until it expires",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
	}
}

// settleUsage settles the estimates of the limits with Usage of r, which
// the decision kept in sc took under lease, with what each Usage reports
// (or keeps them, for one that reports nothing), freeing the lease's
// holds; a context of its own bounds it as releaseLease's does. It tells
// Options.OnSettle.
func (m *Middleware) settleUsage(r *http.Request, sc *scratch, lease string) {
	actual := sc.actual[:0]
	for _, i := range sc.idx {
		a := int64(-1)
		if rs := &sc.res[i]; rs.Settles {
			if n, ok := m.limits[i].usage(r); ok && n >= 0 {
				a, rs.Usage, rs.Reported = n, n, true
			}
		}
		actual = append(actual, a)
	}
	sc.actual = actual
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ReleaseTimeout)
	defer cancel()
	settled, err := engine.Settle(ctx, m.store, time.Time{}, lease, sc.checks, actual)
	if err != nil && m.logger != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: settling the usage failed; the estimates stay charged",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	if m.onSettle != nil {
		st := &sc.st
		*st = Settlement{Request: r, Results: sc.res, Settled: settled, Err: err}
		m.onSettle(st)
	}
}

// settle charges the ChargeOn limits that status calls for, after the
// response.
func (m *Middleware) settle(r *http.Request, res []LimitResult, status int) {
	ctx := context.WithoutCancel(r.Context()) // the client may be gone; the charge still counts
	for i := range m.limits {
		l := &m.limits[i]
		if l.chargeOn == nil || !res[i].Applied || status == 0 || !l.chargeOn(status) {
			continue
		}
		req := sluice.Request{Policy: &res[i].Policy, Key: res[i].Key, Cost: res[i].Cost}
		if _, err := m.store.Allow(ctx, time.Time{}, req); err != nil && m.logger != nil {
			m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: charging after the response failed",
				slog.String("limit", res[i].Policy.Name), slog.Any("error", err))
		}
	}
}

// statusWriter records the status of a response for settle. Unwrap lets
// http.ResponseController reach the writer's other abilities.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack implements http.Hijacker for handlers that assert it (WebSocket
// upgrades); the status of a hijacked connection is not known, so nothing
// is charged for it.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Flush implements http.Flusher for handlers that assert it.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Check decides on r, for code that is not a plain handler chain (a
// forward-auth endpoint, a proxy): it sets the quota fields on w's header
// and reports true when the request may proceed; when it is refused, Check
// writes the whole response and reports false. For a leaky-bucket limit it
// waits the admitted request's Delay first, and reports false, writing
// nothing, if r's context ends meanwhile. Limits with ChargeOn are only
// checked, never charged, by Check.
//
// Check cannot hold a concurrency limit's lease, since it cannot tell when
// the request ends: on a Middleware with a limit whose Policy is a
// concurrency one, Check decides nothing and answers every request with
// 500 Internal Server Error and a problem+json body that says so (a
// forward-auth endpoint cannot enforce such a limit; put the middleware's
// Handler in front of the work instead). A limit with Usage is charged its
// estimate by Check, which stays charged: Check never sees the response. A concurrency policy that a
// PolicyFunc returns is found only when the request is decided: Check
// then releases the lease at once and answers the same 500; the rate
// limits of that decision stay charged.
func (m *Middleware) Check(w http.ResponseWriter, r *http.Request) bool {
	if m.leases {
		m.refuseLease(w, r)
		return false
	}
	sc := m.pool.Get().(*scratch)
	defer m.release(sc)
	lease, ok := m.check(w, r, sc)
	switch {
	case lease != "" && sc.holds:
		m.releaseLease(r, lease)
		m.refuseLease(w, r)
		return false
	case lease != "":
		m.releaseLease(r, lease) // the estimates stand
	}
	return ok
}

// refuseLease answers a request that Check cannot admit because a
// concurrency limit needs it to run behind the middleware's Handler.
func (m *Middleware) refuseLease(w http.ResponseWriter, r *http.Request) {
	if m.logger != nil {
		m.logger.LogAttrs(r.Context(), slog.LevelError, "httplimit: a concurrency limit needs the request to run behind the middleware's Handler; Check cannot hold a lease",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
	}
	h := w.Header()
	for _, k := range quotaFields {
		delete(h, k)
	}
	h["Cache-Control"] = []string{"no-store"}
	writeProblem500(w, checkLeaseDetail)
}

// checkLeaseDetail says why Check refuses a request under a concurrency
// limit.
const checkLeaseDetail = "A concurrency limit needs the request to run behind the middleware; Check cannot hold a lease."

// check is Check with the caller's scratch, whose results stay valid until
// it is released. It reports whether the request proceeds and the lease
// it then holds, if any, which the caller must release.
func (m *Middleware) check(w http.ResponseWriter, r *http.Request, sc *scratch) (lease string, ok bool) {
	ctx := r.Context()
	res := sc.res
	static := m.prepare(r, sc)
	var o engine.Outcome
	sc.eb.Decide(ctx, m.store, time.Time{}, sc.checks, sc.eres, &o)
	for j, i := range sc.idx {
		res[i].Decision, res[i].Err = sc.eres[j].Decision, sc.eres[j].Err
	}
	dryDenied := o.DryRunDenied && m.dryRuns(r, sc)
	status, retry := m.verdict(ctx, &o)
	if m.onDecision != nil {
		ev := &sc.ev
		*ev = Event{Request: r, Results: res, Allowed: status == 0, Status: status, Decision: o.Decision, Err: o.Err, DryRunDenied: dryDenied}
		m.onDecision(ev)
	}
	h := w.Header()
	pf := m.policyField
	if !static {
		pf = nil
	}
	if status == 0 {
		if o.Err == nil && !o.Decision.Degraded {
			writeHeaders(h, m.style, res, pf, m.now)
		}
		if o.Decision.Delay > 0 && ctxsleep.Sleep(ctx, o.Decision.Delay) != nil {
			if o.Decision.Lease != "" {
				m.releaseLease(r, o.Decision.Lease)
			}
			return "", false
		}
		return o.Decision.Lease, true
	}
	return "", m.refuse(w, r, sc, status, retry, pf, o.Never())
}

// prepare fills sc with the limits that apply to r: sc.res for every
// limit, sc.checks (and sc.idx, their limits) for those that apply. It
// reports whether every enforced limit applies with its static policy.
//
// A check the previous request of sc left at the same place for the same
// limit, with its static policy, is kept but for its key and cost: its
// policy, mode and MaxDelay are the limit's, and only release touches the
// checks between requests (their keys).
func (m *Middleware) prepare(r *http.Request, sc *scratch) (static bool) {
	res := sc.res
	prev := sc.idx // the limit of each check of the previous request
	checks, idx := sc.checks[:0], sc.idx[:0]
	static, sc.holds = true, false
	for i := range m.limits {
		l := &m.limits[i]
		rs := &res[i]
		rs.Policy, rs.Shadow = l.policy, l.shadow
		rs.Settles, rs.Usage, rs.Reported = false, 0, false
		key, ok := l.key(r)
		cost := l.cost
		if ok && l.costFunc != nil {
			cost = l.costFunc(r)
			ok = cost >= 1 || l.usage != nil && cost >= 0
		}
		if ok && l.policyFunc != nil {
			var p sluice.Policy
			if p, ok = l.policyFunc(r, key); ok {
				if p.Name == "" {
					p.Name = l.policy.Name
				}
				rs.Policy = p
				static = static && (p == l.policy || l.shadow)
				if l.shadow || l.chargeOn != nil || l.usage != nil {
					ok = m.leaseless(r, l, p)
				}
			}
		}
		if !ok {
			rs.Key, rs.Cost, rs.Applied, rs.Decision, rs.Err = "", 0, false, sluice.Decision{}, nil
			static = static && l.shadow
			continue
		}
		rs.Key, rs.Cost, rs.Applied = key, cost, true
		rs.Settles = l.usage != nil
		sc.holds = sc.holds || rs.Policy.Algorithm == sluice.ConcurrencyAlgorithm
		n := len(checks)
		checks = checks[:n+1]
		c := &checks[n]
		if n < len(prev) && prev[n] == i && l.policyFunc == nil {
			c.Key, c.Cost = key, cost
		} else {
			*c = engine.Check{Request: sluice.Request{Policy: &rs.Policy, Key: key, Cost: cost, MaxDelay: m.maxDelay}}
			if l.usage != nil {
				c.Budget, c.SettleWithin = true, l.settle
			}
			switch {
			case l.shadow:
				c.Mode = engine.Shadow
			case l.chargeOn != nil:
				c.Mode, c.MaxDelay = engine.Deferred, 0
			}
		}
		idx = append(idx, i)
	}
	sc.checks, sc.idx = checks, idx
	if cap(sc.eres) < len(checks) {
		sc.eres = make([]engine.CheckResult, len(checks))
	}
	sc.eres = sc.eres[:len(checks)]
	return static
}

// leaseless reports whether p, which the PolicyFunc of l (a dry run, a
// limit charged after the response or one settled by its usage) returned
// for r, can be decided: a concurrency policy cannot, and is logged.
func (m *Middleware) leaseless(r *http.Request, l *limit, p sluice.Policy) bool {
	err := engine.Leases(p, mode(Limit{Shadow: l.shadow, ChargeOn: l.chargeOn}), "request")
	if err == nil && l.usage != nil && p.Algorithm == sluice.ConcurrencyAlgorithm {
		err = fmt.Errorf("%w: a concurrency policy cannot settle a usage: it holds units while the request runs, and charges nothing", sluice.ErrNotSupported)
	}
	if err != nil && m.logger != nil {
		m.logger.LogAttrs(r.Context(), slog.LevelError, "httplimit: the limit does not apply to the request",
			slog.String("limit", p.Name), slog.Any("error", err))
	}
	return err == nil
}

// dryRuns counts and logs the dry-run limits that would have refused r,
// and reports whether one did.
func (m *Middleware) dryRuns(r *http.Request, sc *scratch) bool {
	denied := false
	for j, i := range sc.idx {
		if !m.limits[i].shadow || !sc.eres[j].Denied {
			continue
		}
		denied = true
		m.limits[i].dryDenied.Add(1)
		if m.logger != nil {
			m.logger.LogAttrs(r.Context(), slog.LevelInfo, "httplimit: dry-run limit would deny",
				slog.String("limit", sc.res[i].Policy.Name), slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.Duration("retry_after", sc.eres[j].Decision.RetryAfter))
		}
	}
	return denied
}

// verdict returns the status of the response to a request decided as o
// (0 when it proceeds) and its retry time (sluice.Never for a request
// that can never pass).
func (m *Middleware) verdict(ctx context.Context, o *engine.Outcome) (status int, retry time.Duration) {
	d := o.Decision
	switch {
	case o.NotAtomic():
		// The limits' keys can never be decided together by this store
		// (Redis Cluster slots): a configuration problem, not an outage.
		// Failing open would lift the limits for good, and a 503 would
		// invite retries that fail the same way.
		if m.logger != nil {
			m.logger.LogAttrs(ctx, slog.LevelError, "httplimit: the store cannot decide this request's limits all or nothing; give them one key", slog.Any("error", o.Err))
		}
		return http.StatusInternalServerError, sluice.Never
	case o.Err != nil:
		if m.logger != nil {
			m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: store failed", slog.Any("error", o.Err),
				slog.Bool("fail_open", m.failOpen))
		}
		if !m.failOpen {
			return http.StatusServiceUnavailable, m.errRetry
		}
		return 0, 0
	case o.Allowed:
		return 0, 0
	case d.Degraded:
		if d.RetryAfter <= 0 {
			return http.StatusServiceUnavailable, m.errRetry
		}
		return http.StatusServiceUnavailable, d.RetryAfter
	}
	return http.StatusTooManyRequests, d.RetryAfter
}

// refuse writes the response to a refused request. A request that can
// never pass (never) gets no quota fields and no Retry-After, which would
// invite a retry that cannot succeed.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, sc *scratch, status int, retry time.Duration, pf []string, never bool) bool {
	ctx := r.Context()
	res := sc.res
	h := w.Header()
	viol := sc.viol[:0]
	for i := range res {
		if res[i].counts() && !res[i].Decision.Allowed {
			if status == http.StatusTooManyRequests {
				m.limits[i].denied.Add(1)
			}
			viol = append(viol, res[i].Policy.Name)
		}
	}
	sc.viol = viol
	if status == http.StatusTooManyRequests {
		if !never {
			writeHeaders(h, m.style, res, pf, m.now)
		}
		if m.logger != nil && m.logger.Enabled(ctx, slog.LevelDebug) {
			m.logger.LogAttrs(ctx, slog.LevelDebug, "rate limit: denied", slog.Any("limits", viol),
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Duration("retry_after", retry))
		}
	} else {
		viol = nil
	}
	if retry != sluice.Never {
		h[hdrRetryAfter] = []string{strconv.FormatInt(RetryAfterSeconds(retry), 10)}
	}
	h["Cache-Control"] = []string{"no-store"}
	m.deny(w, r, Denial{Status: status, RetryAfter: retry, Violated: viol, Results: res})
	return false
}

// release puts sc back in the pool without what could keep a request's
// data alive there (the request, its keys, errors); the rest is written
// anew by the next request, so it is not cleared.
func (m *Middleware) release(sc *scratch) {
	for i := range sc.res {
		sc.res[i].Key, sc.res[i].Err = "", nil
	}
	for i := range sc.checks { // this request's; those past them were cleared before
		sc.checks[i].Key = ""
	}
	for i := range sc.eres {
		sc.eres[i].Err = nil
	}
	clear(sc.viol)
	sc.ev.Request, sc.ev.Results, sc.ev.Err = nil, nil, nil
	sc.st = Settlement{}
	m.pool.Put(sc)
}

// Stats returns each limit's refusal counts, in the order of the limits.
func (m *Middleware) Stats() []LimitStats {
	out := make([]LimitStats, len(m.limits))
	for i := range m.limits {
		l := &m.limits[i]
		out[i] = LimitStats{Name: l.policy.Name, Denied: l.denied.Load(), DryRunDenied: l.dryDenied.Load()}
	}
	return out
}
