package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// strictStore is a memory store whose Release fails when its context has
// ended, as a remote store's would, so that a release made with the
// request's cancelled context is seen.
type strictStore struct {
	*memstore.Store
	releases atomic.Int64 // releases that freed something
}

func newStrictStore() *strictStore {
	return &strictStore{Store: memstore.New(memstore.Options{})}
}

func (s *strictStore) Release(ctx context.Context, now time.Time, lease string, usage []int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok, err := s.Store.Release(ctx, now, lease, usage)
	if ok {
		s.releases.Add(1)
	}
	return ok, err
}

// gate is a handler that, on path /block, says it entered and waits until
// it is let go or the request's context ends, and answers other paths at
// once.
type gate struct {
	entered chan struct{}
	letGo   chan struct{}
	left    chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 16), letGo: make(chan struct{}), left: make(chan struct{}, 16)}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/block" {
		w.Write([]byte("ok"))
		return
	}
	defer func() { g.left <- struct{}{} }()
	g.entered <- struct{}{}
	select {
	case <-g.letGo:
	case <-r.Context().Done():
	}
}

func TestHandlerHoldsLease(t *testing.T) {
	store := newStrictStore()
	m := mustNew(t, store, []Limit{{Policy: sluice.Concurrency(1, time.Hour).Named("conc")}}, nil)
	g := newGate()
	h := m.Handler(g)
	done := make(chan *http.Response)
	go func() { done <- serve(h, httptest.NewRequest("GET", "/block", nil)) }()
	testkit.Receive(t, 10*time.Second, "the first request to enter", g.entered)

	resp := serve(h, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("while the first runs: status %d, want 429", resp.StatusCode)
	}
	for field, want := range map[string]string{
		"Retry-After":      "3600",
		"Ratelimit-Policy": `"conc";q=1`,
		"Ratelimit":        `"conc";r=0;t=3600`,
	} {
		if got := resp.Header.Get(field); got != want {
			t.Errorf("refused: %s = %q, want %q", field, got, want)
		}
	}

	close(g.letGo)
	if resp := <-done; resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	resp = serve(h, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first returned: status %d, want 200 (the lease released)", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Ratelimit"), `"conc";r=0;t=3600`; got != want {
		t.Errorf("admitted: RateLimit = %q, want %q", got, want)
	}
	if got := store.releases.Load(); got != 2 {
		t.Errorf("releases = %d, want 2", got)
	}
}

func TestHandlerReleasesOnPanic(t *testing.T) {
	for _, chargeOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "with a ChargeOn limit"}[chargeOn], func(t *testing.T) {
			store := newStrictStore()
			limits := []Limit{{Policy: sluice.Concurrency(1, time.Hour).Named("conc")}}
			if chargeOn {
				limits = append(limits, Limit{Policy: sluice.FixedWindow(100, time.Hour).Named("fails"), ChargeOn: func(int) bool { return true }})
			}
			m := mustNew(t, store, limits, nil)
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/panic" {
					panic(http.ErrAbortHandler)
				}
			}))
			func() {
				defer func() {
					if p := recover(); p != http.ErrAbortHandler {
						t.Errorf("recovered %v, want the handler's panic", p)
					}
				}()
				serve(h, httptest.NewRequest("GET", "/panic", nil))
			}()
			if resp := serve(h, httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
				t.Errorf("after a panic: status %d, want 200 (the lease released)", resp.StatusCode)
			}
		})
	}
}

func TestHandlerReleasesWhenClientGoes(t *testing.T) {
	store := newStrictStore()
	m := mustNew(t, store, []Limit{{Policy: sluice.Concurrency(1, time.Hour).Named("conc")}}, nil)
	g := newGate()
	srv := httptest.NewServer(m.Handler(g))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/block", nil)
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Receive(t, 10*time.Second, "the request to enter", g.entered)
	if got := get(t, srv, "/"); got != http.StatusTooManyRequests {
		t.Fatalf("while the request runs: status %d, want 429", got)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	testkit.Receive(t, 10*time.Second, "the handler to return after the client went", g.left)
	// The release follows the handler's return: poll until it is seen.
	deadline := time.Now().Add(10 * time.Second)
	for get(t, srv, "/") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the lease was not released after the client went away")
		}
		runtime.Gosched()
	}
	if got := store.releases.Load(); got < 1 {
		t.Errorf("releases = %d, want the cancelled request's", got)
	}
}

func get(t *testing.T, srv *httptest.Server, path string) int {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestHandlerNeverMoreThanLimit(t *testing.T) {
	const limit, clients = 3, 24
	store := memstore.New(memstore.Options{})
	m := mustNew(t, store, []Limit{{Policy: sluice.Concurrency(limit, time.Hour), Key: Constant("all")}}, nil)
	var inside, most, refused atomic.Int64
	full, denied := make(chan struct{}), make(chan struct{})
	var fullOnce, deniedOnce sync.Once
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		defer inside.Add(-1)
		for {
			old := most.Load()
			if n <= old || most.CompareAndSwap(old, n) {
				break
			}
		}
		if n == limit {
			fullOnce.Do(func() { close(full) })
		}
		// Every handler stays until the limit has been reached and a
		// request refused, so that a limit that never fills, or never
		// refuses, shows as a timeout.
		timeout := time.After(10 * time.Second)
		for _, c := range []chan struct{}{full, denied} {
			select {
			case <-c:
			case <-timeout:
				t.Error("the limit was never reached, or refused nothing")
				return
			}
		}
	}))
	var wg sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second)
	for range clients {
		wg.Go(func() {
			for {
				if time.Now().After(deadline) {
					t.Error("a client never got in")
					return
				}
				resp := serve(h, httptest.NewRequest("GET", "/", nil))
				if resp.StatusCode == http.StatusOK {
					return
				}
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
				refused.Add(1)
				deniedOnce.Do(func() { close(denied) })
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != limit {
		t.Errorf("at most %d handlers ran at once, want exactly %d", got, limit)
	}
}

func TestCheckCannotHoldLease(t *testing.T) {
	decode := func(t *testing.T, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("Check: status %d, %s; want 500 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var p struct{ Detail string }
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Detail != checkLeaseDetail {
			t.Errorf("detail = %q, want %q", p.Detail, checkLeaseDetail)
		}
		if resp.Header.Get("Ratelimit") != "" {
			t.Errorf("quota fields on a 500: %v", resp.Header)
		}
	}
	check := func(m *Middleware) *http.Response {
		rec := httptest.NewRecorder()
		if m.Check(rec, httptest.NewRequest("GET", "/", nil)) {
			t.Error("Check admitted a request under a concurrency limit")
		}
		return rec.Result()
	}
	t.Run("static", func(t *testing.T) {
		store := memstore.New(memstore.Options{})
		m := mustNew(t, store, []Limit{{Policy: sluice.Concurrency(1, time.Hour)}}, nil)
		decode(t, check(m))
		if resp := serve(m.Handler(okHandler), httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
			t.Errorf("Handler after Check: status %d, want 200 (Check held nothing)", resp.StatusCode)
		}
	})
	t.Run("from a PolicyFunc", func(t *testing.T) {
		store := memstore.New(memstore.Options{})
		m := mustNew(t, store, []Limit{{
			Policy:     sluice.GCRA(100, time.Second, 0).Named("plan"),
			PolicyFunc: func(*http.Request, string) (sluice.Policy, bool) { return sluice.Concurrency(1, time.Hour), true },
		}}, nil)
		decode(t, check(m))
		if resp := serve(m.Handler(okHandler), httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
			t.Errorf("Handler after Check: status %d, want 200 (Check released its lease)", resp.StatusCode)
		}
	})
}

func TestPolicyFuncConcurrency(t *testing.T) {
	store := memstore.New(memstore.Options{})
	conc := func(*http.Request, string) (sluice.Policy, bool) {
		return sluice.Concurrency(1, time.Hour).Named("plan"), true
	}
	var shadowApplied atomic.Bool
	m := mustNew(t, store, []Limit{
		{Policy: sluice.GCRA(100, time.Second, 0).Named("plan"), PolicyFunc: conc},
		{Policy: sluice.GCRA(100, time.Second, 0).Named("dry"), PolicyFunc: conc, Shadow: true},
	}, &Options{OnDecision: func(ev *Event) { shadowApplied.Store(ev.Results[1].Applied) }})
	g := newGate()
	h := m.Handler(g)
	done := make(chan struct{})
	go func() {
		serve(h, httptest.NewRequest("GET", "/block", nil))
		close(done)
	}()
	testkit.Receive(t, 10*time.Second, "the first request to enter", g.entered)
	if shadowApplied.Load() {
		t.Error("a dry-run limit decided a concurrency policy from its PolicyFunc")
	}
	if resp := serve(h, httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("while the first runs: status %d, want 429", resp.StatusCode)
	}
	close(g.letGo)
	<-done
	if resp := serve(h, httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("after the first returned: status %d, want 200", resp.StatusCode)
	}
}

func TestTransportConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		remote := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := calls.Add(1)
			switch r.URL.Path {
			case "/fail":
				panic("not reached") // failT answers it
			case "/429":
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
			}
			io.WriteString(w, "ok")
		})
		base := failT{handlerTransport{remote}}
		tr, err := NewTransport(base, memstore.New(memstore.Options{}), []OutLimit{{Policy: sluice.Concurrency(1, time.Hour), Key: Constant("api")}}, &TransportOptions{Retries: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		call := func(path string, timeout time.Duration) (*http.Response, time.Duration, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test"+path, nil)
			start := time.Now()
			resp, err := c.Do(req)
			return resp, time.Since(start), err
		}

		held, _, err := call("/", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The body is open: the next call waits, until its deadline.
		if _, took, err := call("/", time.Second); !errors.Is(err, context.DeadlineExceeded) || took != time.Second {
			t.Fatalf("while a body is open: %v after %v, want DeadlineExceeded after 1s", err, took)
		}
		// A call that waits proceeds soon after the body is closed.
		done := make(chan time.Duration)
		go func() {
			resp, took, err := call("/", time.Minute)
			if err != nil {
				t.Error(err)
			} else {
				resp.Body.Close()
			}
			done <- took
		}()
		time.Sleep(100 * time.Millisecond) // the bubble's clock: the waiter polls meanwhile
		held.Body.Close()
		if took := <-done; took <= 100*time.Millisecond || took > 100*time.Millisecond+sluice.LeasePoll {
			t.Errorf("a waiting call went on after %v, want within %v of the Close at 100ms", took, sluice.LeasePoll)
		}
		// A body read to its end releases too, and a Close after it
		// releases nothing more.
		resp, _, err := call("/", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
			t.Fatalf("body %q", b)
		}
		next, took, err := call("/", time.Minute)
		if err != nil || took != 0 {
			t.Fatalf("after the body was read to its end: %v after %v, want at once", err, took)
		}
		resp.Body.Close()
		if _, _, err := call("/", time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second Close freed another call's slot: %v", err)
		}
		next.Body.Close()
		// A failed round trip releases at once.
		if _, _, err := call("/fail", time.Minute); err == nil {
			t.Fatal("/fail succeeded")
		}
		// A 429 sent again gives its slot back while it waits.
		calls.Store(0)
		resp, took, err = call("/429", time.Minute)
		if err != nil || resp.StatusCode != http.StatusOK || took != time.Second {
			t.Fatalf("429 then retry: %v, %v after %v; want 200 after 1s", resp, err, took)
		}
		resp.Body.Close()
		if resp, took, err := call("/", time.Minute); err != nil || took != 0 {
			t.Fatalf("after all: %v after %v, want at once", err, took)
		} else {
			resp.Body.Close()
		}
	})
}

// failT fails every request to /fail and sends the others through T.
type failT struct{ T http.RoundTripper }

func (f failT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/fail" {
		return nil, errors.New("connection refused")
	}
	return f.T.RoundTrip(r)
}
