// Package httplimit puts Sluice in front of net/http handlers and behind
// net/http clients.
//
// # Inbound: the middleware
//
// PerIP is the shortest way in: one policy per client address, counted in
// process, as middleware ready to wrap a handler:
//
//	mux.Handle("/", httplimit.PerIP(sluice.SlidingWindow(100, time.Minute))(handler))
//
// New builds a Middleware from a sluice.Store and a list of Limits. Each
// Limit is a policy, a KeyFunc that says what a request is counted under
// (client IP, API key header, route, tenant from the context, or a Join of
// several), a cost, and optionally a dry-run flag. A request passes only if
// every enforced limit admits it; when one refuses, none is charged, and
// all of them are decided in one Store.AllowAll call. So "10/s per IP AND
// 1000/h per user AND 5000/s per endpoint" is three Limits:
//
//	m, err := httplimit.New(store, []httplimit.Limit{
//		{Policy: sluice.TokenBucket(10, time.Second, 0).Named("per-ip")},
//		{Policy: sluice.SlidingWindow(1000, time.Hour).Named("per-user"), Key: httplimit.Context(userKey)},
//		{Policy: sluice.GCRA(5000, time.Second, 0).Named("per-route"), Key: httplimit.Route},
//	}, nil)
//	mux.Handle("GET /items/{id}", m.Handler(items))
//
// The middleware works with anything built on net/http: the standard mux,
// chi, gorilla. Key specs as written in configuration files ("ip",
// "header:X-API-Key", "ip+path") are parsed by ParseKey.
//
// A limit can be a dry run (Limit.Shadow: decided, counted and reported,
// never refusing), and a limit can be charged only after the response, for
// chosen statuses (Limit.ChargeOn: "5 failed logins per account per 15
// minutes" charges 401 and 403, and refuses the sixth attempt before it
// reaches the handler).
//
// # Concurrency limits
//
// A Limit whose policy is sluice.Concurrency bounds how many requests of a
// key run at once rather than how often they start. Handler holds an
// admitted request's units (the decision's lease) while the next handler
// runs and releases them once when it returns, panics, or, after the
// client went away, returns on its ended context; never while it still
// runs. A PolicyFunc may return such a policy too. A concurrency limit
// cannot be a dry run nor use ChargeOn, and Middleware.Check, which
// cannot tell when a request ends, answers 500 on a middleware that has
// one. A refused request gets 429 with Retry-After, the time when enough
// leases expire at the latest (a release usually makes room sooner).
// RateLimit-Policy writes such a policy as `"conc";q=10`, q the units a
// key may hold at once and no w (its Period is the lease, not a window);
// RateLimit's r is the units left, and t, on an admitted request, when
// every lease held expires if none is released.
//
// # Budgets charged by usage
//
// A Limit with Usage is a budget whose cost is known only once the
// handler has run, such as the tokens an LLM call used. Its Cost (or
// CostFunc) is the estimate charged before the handler runs, and may be
// 0: admit while the budget has a unit left. When the handler returns
// (or panics), Handler asks the limit's Usage what the request cost and
// settles the estimate with it, within the limit's SettleWithin: the
// difference is charged, even past the limit, or given back; a Usage
// that reports nothing keeps the estimate. A budget that went past its
// limit refuses the next requests with 429 until it is repaid.
// Options.OnSettle sees what each request reported and what the store
// did with it.
//
// An OutLimit with Usage is a budget whose cost is known only once the
// call has run, such as the tokens an LLM call used. Its Cost (or
// CostFunc) is the estimate charged before the request is sent, and may
// be 0: send while the budget has a unit left. TransportOptions.Usage
// reads what the call used from the response once its body has been read
// or closed, and the Transport settles it: the difference from the
// estimate is charged, even past the limit, or given back. A budget that
// went past its limit holds the next requests until it is repaid.
//
// Client addresses are never taken from headers a client can forge:
// ClientIP reads X-Forwarded-For, X-Real-IP or Forwarded only when the
// connection comes from a configured trusted proxy, and groups IPv6
// clients by /64.
//
// # Responses
//
// Admitted requests carry the quota fields of
// draft-ietf-httpapi-ratelimit-headers-10:
//
//	RateLimit-Policy: "per-ip";q=10;w=1, "per-user";q=1000;w=3600
//	RateLimit: "per-ip";r=7;t=1
//
// (RateLimit reports the policy closest to its limit), and, when selected
// with Options.Headers, the older RateLimit-Limit/-Remaining/-Reset and
// X-RateLimit-* fields. A refused request gets 429 Too Many Requests,
// Retry-After in whole seconds (rounded up, at least 1), Cache-Control:
// no-store and an RFC 9457 application/problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded; the body
// is written by a replaceable DenyHandler. A request that can never be
// admitted (its cost exceeds a limit's capacity, or limits that charge the
// same policy and key sum above it) gets 429 without Retry-After and
// without quota fields, which would invite a retry that cannot pass, and
// nothing is charged.
//
// When the store fails, its failure policy decides (Decision.Degraded): a
// request it refuses gets 503 Service Unavailable with Retry-After, not 429.
// A store error with no failure policy also answers 503, or passes the
// request with Options.FailOpen. The error is reported to
// Options.OnDecision and Options.Logger and never sent to the client.
//
// # Outbound: the Transport
//
// Transport is an http.RoundTripper that waits, honouring the request's
// context, until every limit admits a request before sending it (30/s
// overall AND 1/s per chat for the Telegram Bot API), and after a 429 from
// the remote side holds every request to the same key, those already
// waiting included, until its Retry-After has passed. With a shared store
// (Redis) several processes share one outbound budget.
//
// A concurrency limit on the Transport caps the calls in flight to the
// remote side: a request holds its units until its response body is
// closed or read to its end, and a request that finds the limit full
// waits for a slot, trying again every few milliseconds up to its
// deadline.
//
// A remote that gives the delay of a 429 elsewhere, as Telegram's Bot API
// does in its JSON body (parameters.retry_after), is read by
// TransportOptions.RetryDelay, which sees the body's first 64 KiB and
// leaves all of it to the caller. By default the 429 goes back to the
// caller; TransportOptions.Retries sends the request again once the delay
// has passed, at most that many times, if its body can be sent again and
// the delay ends before the request's deadline (otherwise the 429 is
// returned at once):
//
//	t, err := httplimit.NewTransport(nil, store, limits, &httplimit.TransportOptions{
//		RetryDelay: telegramRetryAfter, // see the TransportOptions example
//		Retries:    2,
//	})
package httplimit
