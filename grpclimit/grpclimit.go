// Package grpclimit puts Sluice in front of gRPC services and behind gRPC
// clients.
//
// A Limiter's Unary and Stream server interceptors apply several limits to
// each call, all or nothing, in one Store.AllowAll call, keyed by the
// peer's address, a metadata value (an API key) or the full method name. A
// refused call fails with codes.ResourceExhausted; its status carries a
// google.rpc.RetryInfo detail and its trailer a "retry-after" entry in
// whole seconds (rounded up, at least 1); a call that can never be
// admitted (its cost exceeds a limit's capacity) gets ResourceExhausted
// without either, since no retry can pass. When the store fails and its
// failure policy refuses the call, or the store returns an error, the call
// fails with codes.Unavailable (with retry information) and the error is
// never sent to the client.
//
// A Waiter's client interceptors do the opposite: they wait, honouring the
// call's context, until the limits admit a call before sending it, and
// after a ResourceExhausted with retry information from the server they
// hold every further call until it has passed, the calls already waiting
// for the limits included.
//
// A limit may be a concurrency one (sluice.Concurrency), which bounds the
// calls in flight rather than their rate; it cannot be a dry run. On the
// server, a unary call holds its units while the handler runs and a
// stream for its whole life, until the handler returns or panics; a
// refused call fails with ResourceExhausted as for any limit, its retry
// time the latest at which enough leases expire. On the client, a
// Waiter's unary call holds its units until the call returns, and a
// stream until it ends: RecvMsg returns an error (io.EOF at its end), a
// client-streaming call's single response arrives, or the call's context
// ends (a stream that is neither read to its end nor cancelled holds its
// units until the policy's lease expires, as it holds its own resources).
// A Waiter waits for a slot by trying again every few milliseconds, at
// most every sluice.LeasePoll, up to the call's deadline, since the
// holders' releases come sooner than the refusal's retry time. Units are
// released with a context that the call's end does not cancel, within
// ReleaseTimeout.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/engine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RetryAfterKey is the trailer metadata key that carries the retry time of
// a refused call, in whole seconds.
const RetryAfterKey = "retry-after"

// Limit is one rate limit on calls.
type Limit struct {
	// Policy is the limit's policy. Its Name labels the limit in status
	// messages, logs and stats and keeps its state apart; when empty, New
	// names it "default" if it is the only limit and "limit-N" otherwise.
	Policy sluice.Policy
	// Key returns the key a call is counted under. Nil means the peer's
	// IP address (PeerIP(64)) for server interceptors and one shared key
	// for a Waiter.
	Key KeyFunc
	// Cost is what each call costs; 0 means 1.
	Cost int64
	// CostFunc, when set, returns the cost of a call instead of Cost. A
	// cost below 1 exempts the call from this limit.
	CostFunc func(ctx context.Context, fullMethod string) int64
	// Shadow makes the limit a dry run (server interceptors only): it is
	// decided and charged apart from the enforced limits and its would-be
	// refusals are counted and reported, but it never refuses a call.
	Shadow bool
}

// Options configure a Limiter. The zero value (and nil) is valid.
type Options struct {
	// OnDecision, when set, is called once per decided call with the
	// outcome; it must not keep the Event's slices.
	OnDecision func(*Event)
	// FailOpen lets calls through when the store returns an error. The
	// default refuses them with codes.Unavailable.
	FailOpen bool
	// ErrorRetryAfter is the retry time given with codes.Unavailable when
	// the decision carries none; default 1s.
	ErrorRetryAfter time.Duration
	// Logger, when set, receives dry-run refusals (Info), store errors
	// (Warn) and refusals (Debug: "rate limit: denied", as the HTTP
	// middleware's, with the limits that refused, the method and
	// retry_after). Keys are never logged.
	Logger *slog.Logger
}

// LimitResult is one limit's part of the decision on a call, as
// Options.OnDecision sees it.
type LimitResult struct {
	// Policy is the policy applied, with its Name set.
	Policy sluice.Policy
	// Key is the key the call was counted under.
	Key string
	// Cost is the call's cost under this limit.
	Cost int64
	// Shadow reports a dry-run limit.
	Shadow bool
	// Applied reports that the limit was decided (the call had a key and
	// a cost of at least 1).
	Applied bool
	// Decision is the store's decision for this limit.
	Decision sluice.Decision
	// Err is the store's error for this limit, if any.
	Err error
}

// Event is what Options.OnDecision receives.
type Event struct {
	// FullMethod is the call's method.
	FullMethod string
	// Results holds one LimitResult per limit, in order.
	Results []LimitResult
	// Allowed reports that the call proceeds.
	Allowed bool
	// Code is the status code of a refused call (ResourceExhausted or
	// Unavailable); codes.OK when Allowed.
	Code codes.Code
	// Decision is the combined decision of the enforced limits.
	Decision sluice.Decision
	// Err is the store's error for the enforced limits, if any.
	Err error
	// DryRunDenied reports that a dry-run limit would have refused.
	DryRunDenied bool
}

// Limiter applies limits to incoming calls through its interceptors. It is
// safe for concurrent use.
type Limiter struct {
	store      sluice.Store
	limits     []limit
	leases     bool // some limit is a concurrency one
	onDecision func(*Event)
	failOpen   bool
	errRetry   time.Duration
	logger     *slog.Logger
}

type limit struct {
	Limit
	denied    atomic.Uint64
	dryDenied atomic.Uint64
}

// keyCost returns the key and the cost under which lm counts a call to
// fullMethod, and false when lm does not apply: the call has no key or
// CostFunc gave a cost below 1.
func (lm *limit) keyCost(ctx context.Context, fullMethod string) (key string, cost int64, ok bool) {
	if key, ok = lm.Key(ctx, fullMethod); !ok {
		return "", 0, false
	}
	cost = lm.Cost
	if lm.CostFunc != nil {
		if cost = lm.CostFunc(ctx, fullMethod); cost < 1 {
			return "", 0, false
		}
	}
	return key, cost, true
}

// LimitStats counts one limit's refusals.
type LimitStats struct {
	Name         string
	Denied       uint64
	DryRunDenied uint64
}

func prepare(limits []Limit, defaultKey KeyFunc, where string) ([]limit, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%s: no limits", where)
	}
	out := make([]limit, len(limits))
	names := make(map[string]int, len(limits))
	for i, l := range limits {
		if l.Policy.Name == "" {
			if len(limits) == 1 {
				l.Policy.Name = "default"
			} else {
				l.Policy.Name = fmt.Sprintf("limit-%d", i+1)
			}
		}
		at := fmt.Sprintf("%s: limit %d (%q)", where, i+1, l.Policy.Name)
		el := engine.Limit{Policy: l.Policy, Cost: l.Cost, VariableCost: l.CostFunc != nil}
		if l.Shadow {
			el.Mode = engine.Shadow
		}
		if err := engine.CheckLimit(at, "call", el, i, names); err != nil {
			return nil, err
		}
		l.Cost = max(l.Cost, 1)
		if l.Key == nil {
			l.Key = defaultKey
		}
		out[i].Limit = l
	}
	return out, nil
}

// New returns a Limiter that applies limits, all or nothing, through store.
func New(store sluice.Store, limits []Limit, opts *Options) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("grpclimit: store is nil")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.ErrorRetryAfter < 0 {
		return nil, fmt.Errorf("grpclimit: ErrorRetryAfter must not be negative, got %v", opts.ErrorRetryAfter)
	}
	ls, err := prepare(limits, PeerIP(64), "grpclimit")
	if err != nil {
		return nil, err
	}
	l := &Limiter{store: store, limits: ls, leases: leases(ls), onDecision: opts.OnDecision, failOpen: opts.FailOpen,
		errRetry: opts.ErrorRetryAfter, logger: opts.Logger}
	if l.errRetry == 0 {
		l.errRetry = time.Second
	}
	return l, nil
}

// leases reports whether one of ls is a concurrency limit.
func leases(ls []limit) bool {
	for i := range ls {
		if ls[i].Policy.Algorithm == sluice.ConcurrencyAlgorithm {
			return true
		}
	}
	return false
}

// ReleaseTimeout bounds how long the interceptors wait for a store to
// release a concurrency limit's lease when a call ends.
const ReleaseTimeout = 5 * time.Second

// release releases lease, if any, with a context that the end of the
// call's context does not cancel; a failure goes to logger, if any.
func release(ctx context.Context, store sluice.Store, lease string, logger *slog.Logger) {
	if lease == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	if _, err := store.Release(ctx, time.Time{}, lease, nil); err != nil && logger != nil {
		logger.LogAttrs(ctx, slog.LevelWarn, "grpclimit: releasing a concurrency lease failed; its units are held until it expires", slog.Any("error", err))
	}
}

// Unary returns the unary server interceptor. A call admitted under a
// concurrency limit holds its units until the handler returns or panics.
func (l *Limiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lease, md, err := l.check(ctx, info.FullMethod)
		if err != nil {
			if md != nil {
				grpc.SetTrailer(ctx, md)
			}
			return nil, err
		}
		if lease != "" {
			defer release(ctx, l.store, lease, l.logger)
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor; a stream is decided once,
// when it opens, and one admitted under a concurrency limit holds its
// units until the handler returns or panics.
func (l *Limiter) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		lease, md, err := l.check(ctx, info.FullMethod)
		if err != nil {
			if md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		if lease != "" {
			defer release(ctx, l.store, lease, l.logger)
		}
		return handler(srv, ss)
	}
}

// Check decides on a call. It returns nil when the call may proceed;
// otherwise a status error (ResourceExhausted or Unavailable) and the
// trailer metadata to send with it, for callers that are not one of the
// interceptors.
//
// Check cannot tell when the call ends, so it cannot hold a concurrency
// limit's lease: on a Limiter with a concurrency limit it decides nothing
// and fails every call with codes.Internal, saying so; use the
// interceptors.
func (l *Limiter) Check(ctx context.Context, fullMethod string) (metadata.MD, error) {
	if l.leases {
		return nil, status.Error(codes.Internal, "a concurrency limit needs the call to run behind the interceptors; Check cannot hold a lease")
	}
	_, md, err := l.check(ctx, fullMethod)
	return md, err
}

// check is Check, which also returns the lease of an admitted call, if
// any, for the caller to release when the call ends.
func (l *Limiter) check(ctx context.Context, fullMethod string) (string, metadata.MD, error) {
	res := make([]LimitResult, len(l.limits))
	var cbuf [4]engine.Check
	var ibuf [4]int
	checks, idx := cbuf[:0], ibuf[:0]
	for i := range l.limits {
		lm := &l.limits[i]
		res[i] = LimitResult{Policy: lm.Policy, Shadow: lm.Shadow}
		key, cost, ok := lm.keyCost(ctx, fullMethod)
		if !ok {
			continue
		}
		res[i].Key, res[i].Cost, res[i].Applied = key, cost, true
		c := engine.Check{Request: sluice.Request{Policy: &lm.Policy, Key: key, Cost: cost}}
		if lm.Shadow {
			c.Mode = engine.Shadow
		}
		checks = append(checks, c)
		idx = append(idx, i)
	}
	eres := make([]engine.CheckResult, len(checks))
	var o engine.Outcome
	engine.Decide(ctx, l.store, time.Time{}, checks, eres, &o)
	dry := false
	for j, i := range idx {
		res[i].Decision, res[i].Err = eres[j].Decision, eres[j].Err
		if res[i].Shadow && eres[j].Denied {
			dry = true
			l.limits[i].dryDenied.Add(1)
			if l.logger != nil {
				l.logger.LogAttrs(ctx, slog.LevelInfo, "grpclimit: dry-run limit would deny",
					slog.String("limit", res[i].Policy.Name), slog.String("method", fullMethod))
			}
		}
	}
	code, retry := l.verdict(ctx, &o)
	if l.onDecision != nil {
		l.onDecision(&Event{FullMethod: fullMethod, Results: res, Allowed: code == codes.OK, Code: code, Decision: o.Decision, Err: o.Err, DryRunDenied: dry})
	}
	if code == codes.OK {
		return o.Decision.Lease, nil, nil
	}
	var violated []string
	if code == codes.ResourceExhausted {
		for i := range res {
			if res[i].Applied && !res[i].Shadow && !res[i].Decision.Allowed {
				violated = append(violated, res[i].Policy.Name)
				l.limits[i].denied.Add(1)
			}
		}
		if l.logger != nil && l.logger.Enabled(ctx, slog.LevelDebug) {
			l.logger.LogAttrs(ctx, slog.LevelDebug, "rate limit: denied", slog.Any("limits", violated),
				slog.String("method", fullMethod), slog.Duration("retry_after", retry))
		}
	}
	md, err := refusal(code, retry, violated)
	return "", md, err
}

// verdict returns the status code of a call decided as o (codes.OK when
// it proceeds) and its retry time (sluice.Never for a call that can never
// pass).
func (l *Limiter) verdict(ctx context.Context, o *engine.Outcome) (codes.Code, time.Duration) {
	d := o.Decision
	switch {
	case o.NotAtomic():
		// As in httplimit: a configuration problem, never failed open,
		// with no retry information.
		if l.logger != nil {
			l.logger.LogAttrs(ctx, slog.LevelError, "grpclimit: the store cannot decide this call's limits all or nothing; give them one key", slog.Any("error", o.Err))
		}
		return codes.Internal, sluice.Never
	case o.Err != nil:
		if l.logger != nil {
			l.logger.LogAttrs(ctx, slog.LevelWarn, "grpclimit: store failed", slog.Any("error", o.Err), slog.Bool("fail_open", l.failOpen))
		}
		if l.failOpen {
			return codes.OK, 0
		}
		return codes.Unavailable, l.errRetry
	case o.Allowed:
		return codes.OK, 0
	case d.Degraded && d.RetryAfter <= 0:
		return codes.Unavailable, l.errRetry
	case d.Degraded:
		return codes.Unavailable, d.RetryAfter
	}
	return codes.ResourceExhausted, d.RetryAfter
}

// refusal builds the status error and trailer of a refused call.
func refusal(code codes.Code, retry time.Duration, violated []string) (metadata.MD, error) {
	var msg string
	switch {
	case code == codes.Unavailable:
		msg = "rate limiter unavailable"
	case code == codes.Internal:
		msg = "the rate limiter cannot decide this call's limits all or nothing with its store; see the server's log"
	case retry == sluice.Never:
		msg = fmt.Sprintf("rate limit exceeded (%s): the call costs more than the quota allows at once", joinNames(violated))
	default:
		msg = fmt.Sprintf("rate limit exceeded (%s)", joinNames(violated))
	}
	st := status.New(code, msg)
	if retry == sluice.Never {
		return nil, st.Err()
	}
	secs := retryAfterSeconds(retry)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)}); err == nil {
		st = withInfo
	}
	return metadata.Pairs(RetryAfterKey, strconv.FormatInt(secs, 10)), st.Err()
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(n)
	}
	return s
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Stats returns each limit's refusal counts, in order.
func (l *Limiter) Stats() []LimitStats {
	out := make([]LimitStats, len(l.limits))
	for i := range l.limits {
		out[i] = LimitStats{Name: l.limits[i].Policy.Name, Denied: l.limits[i].denied.Load(), DryRunDenied: l.limits[i].dryDenied.Load()}
	}
	return out
}

// RetryDelay returns the retry time a refused call's error carries in its
// google.rpc.RetryInfo detail.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// WaiterOptions configure a Waiter. The zero value (and nil) is valid.
type WaiterOptions struct {
	// MaxBackoff caps the retry time from a server's refusal that holds
	// further calls; default 10 minutes.
	MaxBackoff time.Duration
}

// Waiter keeps outgoing calls within limits: its interceptors wait until
// the limits admit a call before sending it. After a call fails with
// ResourceExhausted and a RetryInfo detail (as a Limiter's refusals do), no
// call is sent until that retry time has passed (at most MaxBackoff),
// whether it started before or after the refusal: see Wait. It is safe for
// concurrent use.
type Waiter struct {
	store      sluice.Store
	limits     []limit
	leases     bool // some limit is a concurrency one
	maxBackoff time.Duration

	mu   sync.Mutex
	hold time.Time // no call before, after a server's refusal
}

// NewWaiter returns a Waiter applying limits through store. Limits without
// a Key share one key ("").
func NewWaiter(store sluice.Store, limits []Limit, opts *WaiterOptions) (*Waiter, error) {
	if store == nil {
		return nil, errors.New("grpclimit: waiter: store is nil")
	}
	if opts == nil {
		opts = &WaiterOptions{}
	}
	ls, err := prepare(limits, Constant(""), "grpclimit: waiter")
	if err != nil {
		return nil, err
	}
	for i := range ls {
		if ls[i].Shadow {
			return nil, fmt.Errorf("grpclimit: waiter: limit %d (%q): a waiter has no dry run", i+1, ls[i].Policy.Name)
		}
	}
	w := &Waiter{store: store, limits: ls, leases: leases(ls), maxBackoff: opts.MaxBackoff}
	if w.maxBackoff <= 0 {
		w.maxBackoff = 10 * time.Minute
	}
	return w, nil
}

// Wait blocks until the limits admit a call to fullMethod and no hold
// from a server's refusal is in force, honouring ctx: it returns ctx's
// error when ctx ends first, and fails at once with an error wrapping
// context.DeadlineExceeded when the wait would pass ctx's deadline. When
// a hold begins while the call waits for the limits, the call waits for
// the hold and then for the limits again (what they charged is not given
// back), so that the calls that were waiting do not all leave together
// when it ends. Key functions read the outgoing context.
//
// Wait cannot tell when the call ends, so it cannot hold a concurrency
// limit's lease: on a Waiter with a concurrency limit it fails at once
// with an error wrapping sluice.ErrNotSupported; use the interceptors.
func (w *Waiter) Wait(ctx context.Context, fullMethod string) error {
	if w.leases {
		return fmt.Errorf("grpclimit: waiter: %w: a concurrency limit needs the call to go through the interceptors; Wait cannot hold a lease", sluice.ErrNotSupported)
	}
	_, err := w.acquire(ctx, fullMethod)
	return err
}

// acquire is Wait, which also returns the lease the call then holds, if
// any, for the caller to release when the call ends. A lease taken before
// a hold began is released while the call waits for the hold.
func (w *Waiter) acquire(ctx context.Context, fullMethod string) (string, error) {
	reqs := make([]sluice.Request, 0, len(w.limits))
	for i := range w.limits {
		lm := &w.limits[i]
		key, cost, ok := lm.keyCost(ctx, fullMethod)
		if !ok {
			continue
		}
		reqs = append(reqs, sluice.Request{Policy: &lm.Policy, Key: key, Cost: cost})
	}
	for {
		if err := w.waitHold(ctx); err != nil {
			return "", err
		}
		if len(reqs) == 0 {
			return "", nil
		}
		d, err := sluice.WaitAll(ctx, w.store, reqs)
		if err != nil {
			return "", fmt.Errorf("grpclimit: %w", err)
		}
		if !w.holdUntil().After(time.Now()) {
			return d.Lease, nil
		}
		release(ctx, w.store, d.Lease, nil)
	}
}

// holdUntil returns the time before which no call may start.
func (w *Waiter) holdUntil() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hold
}

// waitHold sleeps until the hold, if any, has passed, and fails at once
// when it would pass ctx's deadline.
func (w *Waiter) waitHold(ctx context.Context) error {
	for {
		hold := w.holdUntil()
		d := time.Until(hold)
		if d <= 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && hold.After(dl) {
			return fmt.Errorf("grpclimit: held for %v after the server's refusal, past the deadline: %w", d, context.DeadlineExceeded)
		}
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// observe holds further calls after a refusal that carries a retry time.
func (w *Waiter) observe(err error) {
	if status.Code(err) != codes.ResourceExhausted {
		return
	}
	d, ok := RetryDelay(err)
	if !ok {
		return
	}
	until := time.Now().Add(min(d, w.maxBackoff))
	w.mu.Lock()
	if until.After(w.hold) {
		w.hold = until
	}
	w.mu.Unlock()
}

// Unary returns the unary client interceptor. A call admitted under a
// concurrency limit holds its units until it returns.
func (w *Waiter) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		lease, err := w.acquire(ctx, method)
		if err != nil {
			return waitStatus(err)
		}
		if lease != "" {
			defer release(ctx, w.store, lease, nil)
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		w.observe(err)
		return err
	}
}

// Stream returns the stream client interceptor; a stream waits once,
// before it opens, and one admitted under a concurrency limit holds its
// units until it ends (see the package documentation).
func (w *Waiter) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		lease, err := w.acquire(ctx, method)
		if err != nil {
			return nil, waitStatus(err)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		w.observe(err)
		if lease == "" {
			return cs, err
		}
		if err != nil {
			release(ctx, w.store, lease, nil)
			return cs, err
		}
		ls := &leaseStream{ClientStream: cs, single: !desc.ServerStreams}
		var once sync.Once
		ls.release = func() { once.Do(func() { release(ctx, w.store, lease, nil) }) }
		ls.stop = context.AfterFunc(ctx, ls.release)
		return ls, nil
	}
}

// leaseStream is a client stream that releases its call's lease once,
// when it ends: RecvMsg fails (io.EOF at the end), the single response of
// a stream without server streaming arrives, or the call's context ends.
type leaseStream struct {
	grpc.ClientStream
	single  bool // the server answers with one message
	release func()
	stop    func() bool // stops the release at the context's end
}

func (s *leaseStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.single {
		s.stop()
		s.release()
	}
	return err
}

// waitStatus turns a Wait error into a status error: DeadlineExceeded or
// Canceled when the context ended, Unavailable when the store failed.
func waitStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}
