package httplimit

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxsleep"
	"github.com/sluicehq/sluice/internal/engine"
)

// OutLimit is one limit on outgoing requests.
type OutLimit struct {
	// Policy is the limit's policy (the remote side's published limit).
	// When Name is empty, NewTransport names it "out-N" (N its position
	// from 1), which keeps its state apart from the other limits'.
	Policy sluice.Policy
	// Key returns the key a request is counted under (a chat id, an
	// account); nil means the request's URL host. Requests without a key
	// are not counted by this limit.
	Key KeyFunc
	// Cost is what each request costs; 0 means 1.
	Cost int64
	// CostFunc, when set, returns the cost of a request instead of Cost.
	// A cost below 1 exempts the request from this limit.
	CostFunc func(r *http.Request) int64
	// Usage makes the limit a budget charged by what each call actually
	// cost, read from the response by TransportOptions.Usage (the tokens
	// an LLM API reports): Cost, or CostFunc, is then the estimate
	// charged before the request is sent, and 0 means 0 (send while the
	// budget has a unit left). The difference is charged (even past the
	// limit, into debt, which holds the next requests until it is repaid)
	// or given back when the response's body has been read to its end or
	// closed. A response whose usage cannot be read keeps the estimate.
	Usage bool
}

// TransportOptions configure a Transport. The zero value (and nil) is
// valid: the defaults are given with each field.
type TransportOptions struct {
	// BackoffKey returns the key that a 429 from the remote side holds:
	// after one, requests with the same backoff key wait until the delay
	// it asks for (its Retry-After, or what RetryDelay reads) has passed.
	// Nil means the request's URL host, which holds every request to that
	// host.
	BackoffKey KeyFunc
	// DefaultBackoff is the delay of a 429 that gives no usable one;
	// default 1s.
	DefaultBackoff time.Duration
	// MaxBackoff caps the delay a 429 asks for, so that a wrong or hostile
	// value cannot stop a client for days; default 10 minutes.
	MaxBackoff time.Duration
	// RetryDelay, when set, reads the delay that a 429 asks for from the
	// response, for remotes that give it elsewhere than in Retry-After
	// (Telegram's Bot API puts it in the JSON body, at
	// parameters.retry_after). It returns false when the response names
	// none; Retry-After, then DefaultBackoff, apply. It may read
	// resp.Body, which holds the body's first 64 KiB: the caller still
	// reads the whole body. It is called only for 429 responses.
	RetryDelay func(resp *http.Response) (time.Duration, bool)
	// Retries is how many times a request answered 429 is sent again,
	// each time once the delay the 429 asks for has passed and the limits
	// admit it again; the responses replaced are closed. The default, 0,
	// returns the 429 to the caller. A request is retried only when its
	// body can be sent again (it has none, or GetBody, which
	// http.NewRequest sets for in-memory bodies) and the delay ends before
	// its context's deadline; otherwise the 429 is returned at once. If
	// the context ends while the retry waits, RoundTrip returns its error.
	// A remote that answers 429 has normally not acted on the request, but
	// the Transport cannot know: set Retries only for requests that are
	// safe to send twice.
	Retries int
	// Usage reads what a call cost from its response, for the limits
	// with Usage: it is called once the caller has read the response's
	// body to its end or closed it, with the body as read, of which the
	// Transport keeps the last MaxUsageBody bytes (a JSON answer whole, a
	// stream of server-sent events its last events, where LLM APIs put
	// the usage). It returns false when the response names no usage; the
	// estimate then stays charged. Required when a limit has Usage.
	Usage func(resp *http.Response, body []byte) (int64, bool)
	// SettleWithin bounds how long an estimate waits for its response's
	// body to end; a call whose body ends later keeps its estimate.
	// Default 1 hour.
	SettleWithin time.Duration
}

// MaxUsageBody is how much of a response's body, its last bytes,
// TransportOptions.Usage sees.
const MaxUsageBody = 1 << 20

// retryDelayPeek is how much of a 429's body RetryDelay sees.
const retryDelayPeek = 64 << 10

// Transport is an http.RoundTripper that keeps outgoing requests within
// someone else's limits. Before each request it waits until every limit
// admits it (all or nothing, as the middleware does), honouring the
// request's context: when the context ends, or its deadline would pass
// before the request fits, RoundTrip returns the context's error without
// sending anything. After a 429 Too Many Requests from the remote side, it
// holds every request with the same backoff key, those already waiting for
// the limits included, until the delay the response asks for (its
// Retry-After, seconds or an HTTP date, or what TransportOptions.RetryDelay
// reads) has passed. The 429 itself is returned to the caller, or, with
// TransportOptions.Retries, sent again after the delay.
//
// A concurrency limit (sluice.Concurrency) caps the calls in flight to
// the remote side: a request it admits holds its units from before it is
// sent until its response's body is closed or read to its end (the body
// is wrapped to see that), or until RoundTrip fails; a 429 that is sent
// again gives them back while it waits. A caller that neither reads nor
// closes a body holds its units until the policy's lease expires. While
// the limit is full, a request waits for a slot by trying again every
// few milliseconds, as sluice.WaitAll does (at most every
// sluice.LeasePoll), up to its context's deadline.
//
// With a shared store (redisstore), every process using the same policies
// shares one outbound budget; the backoff after a remote 429 is kept in
// each process. A Transport is safe for concurrent use.
type Transport struct {
	base       http.RoundTripper
	store      sluice.Store
	limits     []OutLimit
	backoffKey KeyFunc
	defBackoff time.Duration
	maxBackoff time.Duration
	retryDelay func(*http.Response) (time.Duration, bool)
	retries    int
	usage      func(*http.Response, []byte) (int64, bool)
	settleIn   time.Duration

	mu      sync.Mutex
	holds   map[string]time.Time // backoff key -> no request before
	inserts int
}

// NewTransport returns a Transport that sends through base (nil means
// http.DefaultTransport) once limits, kept in store, admit a request.
func NewTransport(base http.RoundTripper, store sluice.Store, limits []OutLimit, opts *TransportOptions) (*Transport, error) {
	if store == nil {
		return nil, errors.New("httplimit: transport: store is nil")
	}
	if len(limits) == 0 {
		return nil, errors.New("httplimit: transport: no limits")
	}
	if opts == nil {
		opts = &TransportOptions{}
	}
	if opts.Retries < 0 {
		return nil, fmt.Errorf("httplimit: transport: Retries must not be negative, got %d", opts.Retries)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{
		base:       base,
		store:      store,
		limits:     make([]OutLimit, len(limits)),
		backoffKey: opts.BackoffKey,
		defBackoff: opts.DefaultBackoff,
		maxBackoff: opts.MaxBackoff,
		retryDelay: opts.RetryDelay,
		retries:    opts.Retries,
		usage:      opts.Usage,
		settleIn:   cmp.Or(opts.SettleWithin, time.Hour),
		holds:      make(map[string]time.Time),
	}
	if opts.SettleWithin < 0 {
		return nil, fmt.Errorf("httplimit: transport: SettleWithin must not be negative, got %v", opts.SettleWithin)
	}
	if t.backoffKey == nil {
		t.backoffKey = urlHost
	}
	if t.defBackoff <= 0 {
		t.defBackoff = time.Second
	}
	if t.maxBackoff <= 0 {
		t.maxBackoff = 10 * time.Minute
	}
	names := make(map[string]int, len(limits))
	for i, l := range limits {
		if l.Policy.Name == "" {
			l.Policy.Name = fmt.Sprintf("out-%d", i+1)
		}
		where := fmt.Sprintf("httplimit: transport: limit %d (%q)", i+1, l.Policy.Name)
		el := engine.Limit{Policy: l.Policy, Cost: max(l.Cost, 1), VariableCost: l.CostFunc != nil}
		if !l.Usage {
			el.Cost = l.Cost
		}
		if err := engine.CheckLimit(where, "request", el, i, names); err != nil {
			return nil, err
		}
		switch {
		case !l.Usage:
			l.Cost = max(l.Cost, 1)
		case opts.Usage == nil:
			return nil, fmt.Errorf("%s: Usage needs TransportOptions.Usage, which reads what a call cost from its response", where)
		case l.Policy.Algorithm == sluice.ConcurrencyAlgorithm:
			return nil, fmt.Errorf("%s: Usage needs a rate policy: a concurrency policy holds units while the call runs, it is not charged", where)
		case l.Cost < 0:
			return nil, fmt.Errorf("%s: Cost, the estimate, must not be negative, got %d", where, l.Cost)
		}
		if l.Key == nil {
			l.Key = urlHost
		}
		t.limits[i] = l
	}
	return t, nil
}

func urlHost(r *http.Request) (string, bool) {
	if r.URL == nil || r.URL.Host == "" {
		return r.Host, r.Host != ""
	}
	return strings.ToLower(r.URL.Host), true
}

// RoundTrip waits for the limits and any backoff, then sends req through
// the base transport; after a 429 it records the backoff and, with
// Retries, sends req again. It implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	bkey, hasBKey := t.backoffKey(req)
	reqs := make([]sluice.Request, 0, len(t.limits))
	var settled []bool // whether reqs[i] is settled by the usage
	for i := range t.limits {
		l := &t.limits[i]
		key, ok := l.Key(req)
		if !ok {
			continue
		}
		cost := l.Cost
		if l.CostFunc != nil {
			if cost = l.CostFunc(req); cost < 1 && !(l.Usage && cost == 0) {
				continue
			}
		}
		r := sluice.Request{Policy: &l.Policy, Key: key, Cost: cost}
		if l.Usage {
			if settled == nil {
				settled = make([]bool, len(reqs), len(t.limits))
			}
			r.SettleWithin = t.settleIn
		}
		if settled != nil {
			settled = append(settled, l.Usage)
		}
		reqs = append(reqs, r)
	}
	var notBefore time.Time // after a 429: when req may be sent again
	for retries := t.retries; ; retries-- {
		lease, err := t.wait(ctx, bkey, hasBKey, notBefore, reqs, settled)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.base.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			return t.hand(ctx, resp, err, lease, settled)
		}
		notBefore = time.Now().Add(t.delay(resp))
		if hasBKey {
			t.hold(bkey, notBefore)
		}
		if retries == 0 {
			return t.hand(ctx, resp, nil, lease, settled)
		}
		if dl, ok := ctx.Deadline(); ok && notBefore.After(dl) {
			return t.hand(ctx, resp, nil, lease, settled)
		}
		next, ok := rewind(req)
		if !ok {
			return t.hand(ctx, resp, nil, lease, settled)
		}
		discard(resp)
		t.settle(ctx, lease, settled, 0, true) // a 429 the remote did not act on costs nothing
		req = next
	}
}

// hand returns what the base transport answered to a request that holds
// lease (none when it is empty): on an error the lease is released at
// once, its estimates kept; on a response it is held until the response's
// body is closed or read to its end, and its estimates (the requests
// settled marks) are then settled with the usage the response reports.
func (t *Transport) hand(ctx context.Context, resp *http.Response, err error, lease string, settled []bool) (*http.Response, error) {
	if lease == "" {
		return resp, err
	}
	if err != nil || resp.Body == nil {
		t.release(ctx, lease)
		return resp, err
	}
	lb := &leaseBody{ReadCloser: resp.Body, release: func() { t.release(ctx, lease) }}
	if settled != nil {
		lb.tail = new(tail)
		lb.release = func() {
			n, ok := t.usage(resp, lb.tail.bytes())
			t.settle(ctx, lease, settled, n, ok && n >= 0)
		}
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
		// A 101 Switching Protocols body is written to as well.
		resp.Body = leaseRWBody{lb, rw}
	} else {
		resp.Body = lb
	}
	return resp, nil
}

// release releases lease, if any, with a context that the end of the
// request's context does not cancel.
func (t *Transport) release(ctx context.Context, lease string) {
	if lease == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	t.store.Release(ctx, time.Time{}, lease, nil) // a lease not released expires
}

// settle ends lease: it frees what it holds and settles the requests
// that settled marks with usage n, when ok, or keeps their estimates.
func (t *Transport) settle(ctx context.Context, lease string, settled []bool, n int64, ok bool) {
	if lease == "" {
		return
	}
	if !ok {
		t.release(ctx, lease)
		return
	}
	usage := make([]int64, len(settled))
	for i, s := range settled {
		usage[i] = -1
		if s {
			usage[i] = n
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	t.store.Release(ctx, time.Time{}, lease, usage) // an estimate not settled stays charged
}

// tail keeps the last MaxUsageBody bytes written to it, in at most twice
// that much memory, copying each byte at most twice.
type tail struct{ buf []byte }

func (t *tail) Write(p []byte) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*MaxUsageBody {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-MaxUsageBody:]...)
	}
}

func (t *tail) bytes() []byte { return t.buf[max(len(t.buf)-MaxUsageBody, 0):] }

// leaseBody is a response body that releases its request's lease once,
// on Close or when a Read reaches the end; with tail, it keeps the end of
// what was read, for the usage.
type leaseBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
	tail    *tail
}

func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.tail != nil && n > 0 {
		b.tail.Write(p[:n])
	}
	if err == io.EOF {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// leaseRWBody is a leaseBody that can be written to.
type leaseRWBody struct {
	*leaseBody
	w io.Writer
}

func (b leaseRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// wait waits until a request may be sent: until notBefore, until its
// backoff key (if it has one) is not held, and until the limits admit
// reqs, and returns the lease the limits' decision holds, if any. When a
// hold begins while it waits for the limits, it waits for the hold and
// then for the limits again, so that the requests that were waiting do
// not all leave together when the hold ends; what the rate limits charged
// is not given back, and what a concurrency limit holds is, as are the
// estimates of the limits with Usage (those settled marks): nothing was
// sent, so nothing was used.
func (t *Transport) wait(ctx context.Context, bkey string, hasBKey bool, notBefore time.Time, reqs []sluice.Request, settled []bool) (string, error) {
	if err := sleepUntil(ctx, notBefore, "the retry after a 429"); err != nil {
		return "", err
	}
	for {
		if hasBKey {
			if err := t.waitHold(ctx, bkey); err != nil {
				return "", err
			}
		}
		var lease string
		if len(reqs) > 0 {
			d, err := sluice.WaitAll(ctx, t.store, reqs)
			if err != nil {
				return "", fmt.Errorf("httplimit: transport: %w", err)
			}
			lease = d.Lease
		}
		if !hasBKey || !t.holdUntil(bkey).After(time.Now()) {
			return lease, nil
		}
		t.settle(ctx, lease, settled, 0, settled != nil)
	}
}

// delay returns how long a 429 response asks the client to wait: what
// RetryDelay reads, else its Retry-After, else DefaultBackoff; at most
// MaxBackoff.
func (t *Transport) delay(resp *http.Response) time.Duration {
	d, ok := time.Duration(0), false
	if t.retryDelay != nil {
		d, ok = t.peekDelay(resp)
	}
	if !ok {
		d, ok = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	if !ok {
		d = t.defBackoff
	}
	return min(max(d, 0), t.maxBackoff)
}

// peekDelay calls RetryDelay with the first retryDelayPeek bytes of resp's
// body, and leaves the whole body to be read from resp.Body again.
func (t *Transport) peekDelay(resp *http.Response) (time.Duration, bool) {
	body := resp.Body
	if body == nil {
		return t.retryDelay(resp)
	}
	head, err := io.ReadAll(io.LimitReader(body, retryDelayPeek))
	resp.Body = io.NopCloser(bytes.NewReader(head))
	d, ok := t.retryDelay(resp)
	rest := io.Reader(body)
	if err != nil {
		rest = errReader{err} // the caller meets the error where it happened
	}
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), rest), body}
	return d, ok
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// rewind returns a copy of req to send again, with a fresh body, and false
// when req's body cannot be sent again.
func rewind(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Clone(req.Context()), true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	next := req.Clone(req.Context())
	next.Body = body
	return next, true
}

// discard reads a little of a response that is not returned, so that its
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hold records that no request with key may start before until.
func (t *Transport) hold(key string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev, ok := t.holds[key]; !ok || until.After(prev) {
		t.holds[key] = until
	}
	// Drop expired holds now and then, so the map only keeps live ones.
	t.inserts++
	if t.inserts >= 64 && t.inserts >= len(t.holds) {
		t.inserts = 0
		now := time.Now()
		for k, u := range t.holds {
			if !u.After(now) {
				delete(t.holds, k)
			}
		}
	}
}

// holdUntil returns the time before which no request with key may start
// (zero when key is not held).
func (t *Transport) holdUntil(key string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holds[key]
}

// waitHold sleeps until key's hold, if any, has passed.
func (t *Transport) waitHold(ctx context.Context, key string) error {
	for {
		until := t.holdUntil(key)
		if !until.After(time.Now()) {
			return nil
		}
		if err := sleepUntil(ctx, until, fmt.Sprintf("%q, held after a 429,", key)); err != nil {
			return err
		}
	}
}

// sleepUntil sleeps until until (not at all when it has passed), and
// fails at once when it would pass ctx's deadline; what names what waits,
// for the error.
func sleepUntil(ctx context.Context, until time.Time, what string) error {
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && until.After(dl) {
		return fmt.Errorf("httplimit: transport: %s would wait %v, past the deadline: %w", what, d, context.DeadlineExceeded)
	}
	return ctxsleep.Sleep(ctx, d)
}

// ParseRetryAfter parses a Retry-After field value (RFC 9110 section
// 10.2.3): delay-seconds or an HTTP date, which is taken relative to now.
// A date in the past gives 0.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return 1<<63 - 1, true
			}
			return 0, false
		}
		if n > uint64((1<<63-1)/time.Second) {
			return 1<<63 - 1, true
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}
