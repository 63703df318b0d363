package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A worker makes decisions one after the other, each on its own
// connection or client; a run has one worker per unit of concurrency.
type worker interface {
	// decide asks for a decision on key number k and reports whether it
	// was allowed. An error is a failed request or an answer that is not
	// a decision.
	decide(ctx context.Context, k int) (allowed bool, err error)
}

// A client makes the workers of one run, and closes what they share.
type client interface {
	worker(i int) (worker, error)
	close() error
}

// keyName is the name of key number k: user:0 to user:9999.
func keyName(k int) string { return "user:" + strconv.Itoa(k) }

// floodKey is the key of the flood workload that every flood worker asks
// for (key number 0 of that workload), and that its limit refuses.
const floodKey = "attacker"

// limitSpec is one limit, as each contender is told it.
type limitSpec struct {
	name   string // the Sluice limit, the Envoy domain, the gubernator name
	limit  int64  // per second
	burst  int64
	denies bool // whether the workload is meant to be denied sometimes
	// flood, for the flood workload, is the Sluice limit of key number 0,
	// floodKey, which is then the only key that may be denied; in the
	// Envoy domain name, floodKey is the descriptor (user, attacker).
	flood string
}

// The workloads: every decision on the normal allowed path (with a token
// bucket, and with the fixed window of envoyproxy/ratelimit's
// configuration), about half denied, and one key flooded and refused
// while well-behaved keys are allowed.
var (
	allowedLimit = limitSpec{name: "bench", limit: 1_000_000, burst: 1_000_000}
	mixedLimit   = limitSpec{name: "mixed", limit: 1, burst: 1, denies: true}
	windowLimit  = limitSpec{name: "rls", limit: 1_000_000}
	floodLimit   = limitSpec{name: "flood", limit: 1_000_000, denies: true, flood: "flood_key"}
)

// request returns the limit (or Envoy domain) and the key of key number k.
func (l limitSpec) request(k int) (limit, key string) {
	if l.flood != "" && k == 0 {
		return l.flood, floodKey
	}
	return l.name, keyName(k)
}

// mayDeny reports whether a denial of key number k is a decision the
// workload expects rather than an error.
func (l limitSpec) mayDeny(k int) bool {
	return l.denies && (l.flood == "" || k == 0)
}

// httpClient is a raw HTTP/1.1 client: one keep-alive connection per
// worker, requests prepared beforehand (one per key), responses parsed
// just enough to check them, so that the load generator spends as little
// CPU as possible, the same for every server.
type httpClient struct {
	addr  string
	reqs  [][]byte                        // by key
	check func(body []byte) (bool, error) // reads the decision in a 200 body
}

func (c *httpClient) worker(int) (worker, error) {
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		return nil, err
	}
	return &httpWorker{c: c, conn: conn, br: bufio.NewReaderSize(conn, 4096)}, nil
}

func (c *httpClient) close() error { return nil }

// newHTTPClient prepares one POST to path per key, with the body body(k).
func newHTTPClient(addr, path string, keys int, body func(k int) string, check func([]byte) (bool, error)) *httpClient {
	c := &httpClient{addr: addr, check: check, reqs: make([][]byte, keys)}
	for k := range keys {
		b := body(k)
		c.reqs[k] = fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, addr, len(b), b)
	}
	return c
}

type httpWorker struct {
	c    *httpClient
	conn net.Conn
	br   *bufio.Reader
	body []byte
}

var (
	status200     = []byte("HTTP/1.1 200 ")
	contentLength = []byte("content-length:")
	transferEnc   = []byte("transfer-encoding:")
	connection    = []byte("connection:")
)

func (w *httpWorker) decide(_ context.Context, k int) (bool, error) {
	if _, err := w.conn.Write(w.c.reqs[k]); err != nil {
		return false, err
	}
	line, err := w.br.ReadSlice('\n')
	if err != nil {
		return false, fmt.Errorf("reading the status line: %w", err)
	}
	if !bytes.HasPrefix(line, status200) {
		return false, fmt.Errorf("status line %q, want 200", bytes.TrimSpace(line))
	}
	n := -1
	for {
		line, err = w.br.ReadSlice('\n')
		if err != nil {
			return false, fmt.Errorf("reading the header: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
		switch {
		case hasPrefixFold(line, contentLength):
			n, err = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			if err != nil || n < 0 {
				return false, fmt.Errorf("header %q", bytes.TrimSpace(line))
			}
		case hasPrefixFold(line, transferEnc):
			return false, fmt.Errorf("header %q: only bodies with a Content-Length are read", bytes.TrimSpace(line))
		case hasPrefixFold(line, connection) && bytes.Contains(bytes.ToLower(line), []byte("close")):
			return false, errors.New("the server closes the connection")
		}
	}
	if n < 0 {
		return false, errors.New("no Content-Length")
	}
	if cap(w.body) < n {
		w.body = make([]byte, n)
	}
	body := w.body[:n]
	if _, err := io.ReadFull(w.br, body); err != nil {
		return false, fmt.Errorf("reading the body: %w", err)
	}
	return w.c.check(body)
}

func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

func (w *httpWorker) Close() error { return w.conn.Close() }

// sluiceHTTP asks POST /v1/check of a sluice serve at addr.
func sluiceHTTP(addr string, keys int, l limitSpec) *httpClient {
	return newHTTPClient(addr, "/v1/check", keys, func(k int) string {
		limit, key := l.request(k)
		return `{"limit":"` + limit + `","key":"` + key + `"}`
	}, checkSluiceBody)
}

var (
	sluiceAllowed = []byte(`{"allowed":true,`)
	sluiceDenied  = []byte(`{"allowed":false,`)
	degraded      = []byte(`"degraded":true`)
)

// checkSluiceBody reads the decision in the answer of /v1/check; a
// decision of the store's failure policy is an error.
func checkSluiceBody(b []byte) (bool, error) {
	if bytes.Contains(b, degraded) {
		return false, fmt.Errorf("a degraded decision (the failure policy decided): %s", b)
	}
	switch {
	case bytes.HasPrefix(b, sluiceAllowed):
		return true, nil
	case bytes.HasPrefix(b, sluiceDenied):
		return false, nil
	}
	return false, fmt.Errorf("not a decision: %q", b)
}

// gubernatorHTTP asks POST /v1/GetRateLimits of gubernator's HTTP/JSON
// gateway at addr, one token-bucket limit per request.
func gubernatorHTTP(addr string, keys int, l limitSpec) *httpClient {
	return newHTTPClient(addr, "/v1/GetRateLimits", keys, func(k int) string {
		return fmt.Sprintf(`{"requests":[{"name":%q,"unique_key":%q,"hits":1,"limit":%d,"burst":%d,"duration":1000,"algorithm":"TOKEN_BUCKET"}]}`,
			l.name, keyName(k), l.limit, l.burst)
	}, checkGubernatorBody)
}

var (
	guberUnder   = []byte(`"status":"UNDER_LIMIT"`)
	guberOver    = []byte(`"status":"OVER_LIMIT"`)
	guberNoError = []byte(`"error":""`)
)

// checkGubernatorBody reads the decision in the answer of
// /v1/GetRateLimits to a request of one limit.
func checkGubernatorBody(b []byte) (bool, error) {
	if !bytes.Contains(b, guberNoError) {
		return false, fmt.Errorf("an error: %s", b)
	}
	switch {
	case bytes.Contains(b, guberUnder):
		return true, nil
	case bytes.Contains(b, guberOver):
		return false, nil
	}
	return false, fmt.Errorf("not a decision: %q", b)
}

// grpcConns are the connections the workers of a gRPC run share, worker i
// using conns[i%len(conns)].
type grpcConns []*grpc.ClientConn

func dialGRPC(addr string, n int) (grpcConns, error) {
	var cs grpcConns
	for range n {
		// Each connection its own: grpc-go would otherwise share nothing
		// anyway, but say so.
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			cs.close()
			return nil, err
		}
		c.Connect()
		cs = append(cs, c)
	}
	return cs, nil
}

func (cs grpcConns) close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// grpcClient is a client of a gRPC rate limit service: the connections
// its workers share, the request of each key, and how a worker asks
// with its stub S (made on its connection by stub) and reads the answer.
type grpcClient[S any, R any] struct {
	conns grpcConns
	reqs  []R
	stub  func(grpc.ClientConnInterface) S
	ask   func(ctx context.Context, stub S, req R) (bool, error)
}

func (c *grpcClient[S, R]) worker(i int) (worker, error) {
	return grpcWorker[S, R]{c: c, stub: c.stub(c.conns[i%len(c.conns)])}, nil
}

func (c *grpcClient[S, R]) close() error { return c.conns.close() }

type grpcWorker[S any, R any] struct {
	c    *grpcClient[S, R]
	stub S
}

func (w grpcWorker[S, R]) decide(ctx context.Context, k int) (bool, error) {
	return w.c.ask(ctx, w.stub, w.c.reqs[k])
}

// newEnvoyClient calls ShouldRateLimit, Envoy's rate limit service, of a
// sluice serve or of envoyproxy/ratelimit: one descriptor (user, user:N),
// or (user, attacker) for the flood key, in the limit's domain.
func newEnvoyClient(addr string, conns, keys int, l limitSpec) (client, error) {
	cs, err := dialGRPC(addr, conns)
	if err != nil {
		return nil, err
	}
	c := &grpcClient[rlsv3.RateLimitServiceClient, *rlsv3.RateLimitRequest]{
		conns: cs, reqs: make([]*rlsv3.RateLimitRequest, keys), stub: rlsv3.NewRateLimitServiceClient, ask: askEnvoy,
	}
	for k := range keys {
		_, key := l.request(k)
		c.reqs[k] = &rlsv3.RateLimitRequest{
			Domain: l.name,
			Descriptors: []*rlscommon.RateLimitDescriptor{{
				Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: key}},
			}},
		}
	}
	return c, nil
}

func askEnvoy(ctx context.Context, rls rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (bool, error) {
	resp, err := rls.ShouldRateLimit(ctx, req)
	if err != nil {
		return false, err
	}
	if len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil {
		return false, fmt.Errorf("the descriptor matched no limit: %v", resp)
	}
	switch resp.OverallCode {
	case rlsv3.RateLimitResponse_OK:
		return true, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("overall_code %v", resp.OverallCode)
}

// newGuberClient calls gubernator's gRPC GetRateLimits, one token-bucket
// limit per request.
func newGuberClient(addr string, conns, keys int, l limitSpec) (client, error) {
	cs, err := dialGRPC(addr, conns)
	if err != nil {
		return nil, err
	}
	c := &grpcClient[gubernator.V1Client, *gubernator.GetRateLimitsReq]{
		conns: cs, reqs: make([]*gubernator.GetRateLimitsReq, keys), stub: gubernator.NewV1Client, ask: askGubernator,
	}
	for k := range keys {
		c.reqs[k] = &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
			Name:      l.name,
			UniqueKey: keyName(k),
			Hits:      1,
			Limit:     l.limit,
			Burst:     l.burst,
			Duration:  1000, // ms
			Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
		}}}
	}
	return c, nil
}

func askGubernator(ctx context.Context, v1 gubernator.V1Client, req *gubernator.GetRateLimitsReq) (bool, error) {
	resp, err := v1.GetRateLimits(ctx, req)
	if err != nil {
		return false, err
	}
	if len(resp.Responses) != 1 {
		return false, fmt.Errorf("%d responses to one request", len(resp.Responses))
	}
	r := resp.Responses[0]
	if r.Error != "" {
		return false, errors.New(r.Error)
	}
	switch r.Status {
	case gubernator.Status_UNDER_LIMIT:
		return true, nil
	case gubernator.Status_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("status %v", r.Status)
}

// libClient decides in this process with Sluice's Redis store, the
// library the service's Redis backend is: the baseline the service's
// Redis numbers are compared with.
type libClient struct {
	st     *redisstore.Store
	policy sluice.Policy
	keys   []string
}

// newLibClient opens a Redis store on addr configured as sluice serve
// configures it from the benchmark's configuration file.
func newLibClient(addr string, keys int, l limitSpec) (*libClient, error) {
	st, err := redisstore.New(redisstore.Options{
		Addrs:   []string{addr},
		Prefix:  "sluicelib:",
		Timeout: redisTimeout,
		Failure: redisstore.FailDeny,
	})
	if err != nil {
		return nil, err
	}
	p := sluice.TokenBucket(l.limit, time.Second, l.burst)
	p.Name = l.name
	c := &libClient{st: st, policy: p, keys: make([]string, keys)}
	for k := range keys {
		c.keys[k] = keyName(k)
	}
	return c, nil
}

func (c *libClient) worker(int) (worker, error) { return c, nil }

func (c *libClient) close() error { return c.st.Close() }

func (c *libClient) decide(ctx context.Context, k int) (bool, error) {
	d, err := c.st.Allow(ctx, time.Time{}, sluice.Request{Policy: &c.policy, Key: c.keys[k], Cost: 1})
	if err != nil {
		return false, err
	}
	if d.Degraded {
		return false, fmt.Errorf("a degraded decision (the failure policy decided): %+v", d)
	}
	return d.Allowed, nil
}
