package httplimit

import (
	"context"
	"errors"
	"fmt"
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
}

// TransportOptions configure a Transport. The zero value (and nil) is
// valid: the defaults are given with each field.
type TransportOptions struct {
	// BackoffKey returns the key that a 429 from the remote side holds:
	// after one, requests with the same backoff key wait until its
	// Retry-After has passed. Nil means the request's URL host, which
	// holds every request to that host.
	BackoffKey KeyFunc
	// DefaultBackoff is how long a 429 without a usable Retry-After holds
	// its key; default 1s.
	DefaultBackoff time.Duration
	// MaxBackoff caps a remote Retry-After, so that a wrong or hostile
	// value cannot stop a client for days; default 10 minutes.
	MaxBackoff time.Duration
}

// Transport is an http.RoundTripper that keeps outgoing requests within
// someone else's limits. Before each request it waits until every limit
// admits it (all or nothing, as the middleware does), honouring the
// request's context: when the context ends, or its deadline would pass
// before the request fits, RoundTrip returns the context's error without
// sending anything. After a 429 Too Many Requests from the remote side, it
// holds every request with the same backoff key, those already waiting for
// the limits included, until the response's Retry-After (seconds or an
// HTTP date) has passed; the 429 itself is returned to the caller, not
// retried.
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
		holds:      make(map[string]time.Time),
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
		el := engine.Limit{Policy: l.Policy, Cost: l.Cost, VariableCost: l.CostFunc != nil}
		if err := engine.CheckLimit(where, "request", el, i, names); err != nil {
			return nil, err
		}
		l.Cost = max(l.Cost, 1)
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
// the base transport. It implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	bkey, hasBKey := t.backoffKey(req)
	reqs := make([]sluice.Request, 0, len(t.limits))
	for i := range t.limits {
		l := &t.limits[i]
		key, ok := l.Key(req)
		if !ok {
			continue
		}
		cost := l.Cost
		if l.CostFunc != nil {
			if cost = l.CostFunc(req); cost < 1 {
				continue
			}
		}
		reqs = append(reqs, sluice.Request{Policy: l.Policy, Key: key, Cost: cost})
	}
	if err := t.wait(ctx, bkey, hasBKey, reqs); err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests && hasBKey {
		d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if !ok {
			d = t.defBackoff
		}
		t.hold(bkey, time.Now().Add(min(d, t.maxBackoff)))
	}
	return resp, err
}

// wait waits until a request may be sent: until its backoff key (if it
// has one) is not held, and until the limits admit reqs. When a hold
// begins while it waits for the limits, it waits for the hold and then for
// the limits again, so that the requests that were waiting do not all
// leave together when the hold ends; what the limits charged is not given
// back.
func (t *Transport) wait(ctx context.Context, bkey string, hasBKey bool, reqs []sluice.Request) error {
	for {
		if hasBKey {
			if err := t.waitHold(ctx, bkey); err != nil {
				return err
			}
		}
		if len(reqs) > 0 {
			if _, err := sluice.WaitAll(ctx, t.store, reqs); err != nil {
				return fmt.Errorf("httplimit: transport: %w", err)
			}
		}
		if !hasBKey || !t.holdUntil(bkey).After(time.Now()) {
			return nil
		}
	}
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
