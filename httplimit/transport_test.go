package httplimit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// handlerTransport sends requests to an http.Handler in process, so that
// the remote side runs inside a synctest bubble.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// remote records when each request arrived, relative to start.
type remote struct {
	mu     sync.Mutex
	start  time.Time
	got    []string // "chat@elapsed"
	status func(r *http.Request) (int, string)
}

func (s *remote) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.got = append(s.got, r.URL.Query().Get("chat_id")+"@"+time.Since(s.start).String())
	s.mu.Unlock()
	if s.status != nil {
		if code, ra := s.status(r); code != 0 {
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.WriteHeader(code)
			return
		}
	}
	io.WriteString(w, `{"ok":true}`)
}

func (s *remote) arrivals() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.got, " ")
}

func telegram(t *testing.T, srv *remote, opts *TransportOptions) *http.Client {
	t.Helper()
	tr, err := NewTransport(handlerTransport{srv}, memstore.New(memstore.Options{}), []OutLimit{
		{Policy: sluice.TokenBucket(30, time.Second, 0).Named("global")},
		{Policy: sluice.GCRA(1, time.Second, 0).Named("per-chat"), Key: Query("chat_id")},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func send(t *testing.T, c *http.Client, ctx context.Context, chat string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", "https://api.telegram.example/bot1/sendMessage?chat_id="+chat, strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestTransportPerChatAndOverall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &remote{start: time.Now()}
		c := telegram(t, srv, nil)
		for _, chat := range []string{"a", "a", "b", "a", "b"} {
			if _, err := send(t, c, context.Background(), chat); err != nil {
				t.Fatal(err)
			}
		}
		// One per second per chat; b is not held by a.
		if got, want := srv.arrivals(), "a@0s a@1s b@1s a@2s b@2s"; got != want {
			t.Errorf("arrivals = %s, want %s", got, want)
		}
	})
}

func TestTransportOverallLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &remote{start: time.Now()}
		c := telegram(t, srv, nil)
		// 60 messages to 60 chats: 30 at once (the burst), then one every
		// 1/30 s, the 60th at 30/30 s.
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				if _, err := send(t, c, context.Background(), "chat"+string(rune('A'+i))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if el := time.Since(srv.start); el < time.Second || el > time.Second+30*time.Millisecond {
			t.Errorf("60 messages took %v, want 1s (+ rounding to ms)", el)
		}
		immediate := strings.Count(srv.arrivals(), "@0s")
		if immediate != 30 {
			t.Errorf("%d sent at once, want 30", immediate)
		}
	})
}

func TestTransportRemote429(t *testing.T) {
	for _, tt := range []struct {
		name       string
		retryAfter func(now time.Time) string
		want       time.Duration
	}{
		{"seconds", func(time.Time) string { return "3" }, 3 * time.Second},
		{"http date", func(now time.Time) string { return now.Add(5 * time.Second).UTC().Format(http.TimeFormat) }, 5 * time.Second},
		{"missing: default", func(time.Time) string { return "" }, time.Second},
		{"garbage: default", func(time.Time) string { return "soon" }, time.Second},
		{"huge: capped", func(time.Time) string { return "99999999999999999999" }, 10 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &remote{start: time.Now()}
				first := true
				srv.status = func(r *http.Request) (int, string) {
					if first {
						first = false
						return 429, tt.retryAfter(time.Now())
					}
					return 0, ""
				}
				c := telegram(t, srv, nil)
				resp, err := send(t, c, context.Background(), "a")
				if err != nil || resp.StatusCode != 429 {
					t.Fatalf("first: %v %v, want the remote 429", resp, err)
				}
				start := time.Now()
				if _, err := send(t, c, context.Background(), "b"); err != nil {
					t.Fatal(err)
				}
				// The whole host is held (the default backoff key).
				if el := time.Since(start); el != tt.want {
					t.Errorf("next request waited %v, want %v", el, tt.want)
				}
			})
		})
	}
}

func TestTransportBackoffKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &remote{start: time.Now()}
		srv.status = func(r *http.Request) (int, string) {
			if r.URL.Query().Get("chat_id") == "a" && time.Since(srv.start) == 0 {
				return 429, "7"
			}
			return 0, ""
		}
		c := telegram(t, srv, &TransportOptions{BackoffKey: Query("chat_id")})
		send(t, c, context.Background(), "a")
		send(t, c, context.Background(), "b") // not held
		send(t, c, context.Background(), "a") // held 7s
		if got, want := srv.arrivals(), "a@0s b@0s a@7s"; got != want {
			t.Errorf("arrivals = %s, want %s", got, want)
		}
	})
}

func TestTransportContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &remote{start: time.Now()}
		c := telegram(t, srv, nil)
		send(t, c, context.Background(), "a")
		// The next message to a fits in 1s: a 500ms deadline fails at once.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := send(t, c, ctx, "a")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(start); el != 0 {
			t.Errorf("failed after %v, want at once", el)
		}
		// Cancelled while waiting.
		ctx2, cancel2 := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel2)
		_, err = send(t, c, ctx2, "a")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want Canceled", err)
		}
		if got, want := srv.arrivals(), "a@0s"; got != want {
			t.Errorf("arrivals = %s, want %s: nothing more may be sent", got, want)
		}
	})
}

func TestTransportStoreError(t *testing.T) {
	tr, err := NewTransport(handlerTransport{okHandler}, teststore.Failing{Err: errors.New("backend down")}, []OutLimit{{Policy: sluice.GCRA(1, time.Second, 0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", "http://example.test/", body)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "backend down") {
		t.Errorf("RoundTrip = %v, want the store error", err)
	}
	if !body.closed {
		t.Error("the request body was not closed")
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"Thu, 02 Jan 2025 03:04:15 GMT", 10 * time.Second, true},
		{"Thu, 02 Jan 2025 03:00:00 GMT", 0, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"", 0, false},
		{"tomorrow", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v, want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNewTransportErrors(t *testing.T) {
	store := memstore.New(memstore.Options{})
	ok := sluice.GCRA(1, time.Second, 0)
	for _, tt := range []struct {
		name   string
		store  sluice.Store
		limits []OutLimit
		opts   *TransportOptions
		want   string
	}{
		{"nil store", nil, []OutLimit{{Policy: ok}}, nil, "store is nil"},
		{"no limits", store, nil, nil, "no limits"},
		{"invalid", store, []OutLimit{{Policy: sluice.GCRA(0, time.Second, 0)}}, nil, `limit 1 ("out-1"): invalid policy`},
		{"duplicate", store, []OutLimit{{Policy: ok.Named("x")}, {Policy: ok.Named("x")}}, nil, "already used"},
		{"cost", store, []OutLimit{{Policy: ok, Cost: 5}}, nil, "exceeds the policy's capacity"},
		{"retries", store, []OutLimit{{Policy: ok}}, &TransportOptions{Retries: -1}, "Retries must not be negative, got -1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewTransport(nil, tt.store, tt.limits, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewTransport = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// loopback is a real HTTP server on a loopback port, for clients that run
// in a synctest bubble. The server runs outside the bubble; the client's
// transport (Client, made inside the bubble) opens a connection per
// request, so that no goroutine of the bubble waits on the network between
// requests, and stamps each request with the bubble's time. The bubble's
// clock stands still while a request is on the network, so that stamp is
// the time the server got the request on the bubble's clock.
type loopback struct {
	url string
	// answer, when set, returns the status, Retry-After and body of the
	// nth request (from 0), sent at the bubble's time at; 0 means 200
	// {"ok":true}.
	answer func(n int, at time.Time) (status int, retryAfter, body string)

	mu   sync.Mutex
	got  []arrival
	open int // response bodies the client has not closed
}

type arrival struct {
	at     time.Time
	status int
	body   string
}

const sentAt = "X-Sent-At"

func newLoopback(t *testing.T, answer func(n int, at time.Time) (int, string, string)) *loopback {
	t.Helper()
	s := &loopback{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *loopback) serve(w http.ResponseWriter, r *http.Request) {
	at, err := time.Parse(time.RFC3339Nano, r.Header.Get(sentAt))
	if err != nil {
		http.Error(w, "no "+sentAt, http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.got)
	code, retryAfter, out := http.StatusOK, "", `{"ok":true}`
	if s.answer != nil {
		if c, ra, b := s.answer(n, at); c != 0 {
			code, retryAfter, out = c, ra, b
		}
	}
	s.got = append(s.got, arrival{at: at, status: code, body: string(body)})
	s.mu.Unlock()
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(code)
	io.WriteString(w, out)
}

// arrivals returns the requests the server got, as status@time since
// start, in the order they came.
func (s *loopback) arrivals(start time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i, a := range s.got {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d@%v", a.status, a.at.Sub(start))
	}
	return b.String()
}

func (s *loopback) openBodies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Client returns the base transport that reaches s; call it inside the
// bubble.
func (s *loopback) Client() http.RoundTripper {
	return stamper{s: s, base: &http.Transport{DisableKeepAlives: true}}
}

type stamper struct {
	s    *loopback
	base http.RoundTripper
}

func (t stamper) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set(sentAt, time.Now().Format(time.RFC3339Nano))
	resp, err := t.base.RoundTrip(r2)
	if err != nil {
		return nil, err
	}
	t.s.mu.Lock()
	t.s.open++
	t.s.mu.Unlock()
	resp.Body = &trackedBody{ReadCloser: resp.Body, s: t.s}
	return resp, nil
}

type trackedBody struct {
	io.ReadCloser
	s    *loopback
	once sync.Once
}

func (b *trackedBody) Close() error {
	b.once.Do(func() {
		b.s.mu.Lock()
		b.s.open--
		b.s.mu.Unlock()
	})
	return b.ReadCloser.Close()
}

func TestTransportHoldsWaitingRequests(t *testing.T) {
	// 150 messages to 150 chats under 30/s overall: 30 at once, then one
	// every 1/30s. The remote answers the first request it gets at 340ms
	// or later with 429 and Retry-After: 3. The requests that were already
	// waiting for the limit must wait those 3s as well.
	var at429 time.Time
	srv := newLoopback(t, func(n int, at time.Time) (int, string, string) {
		if at429.IsZero() && at.Sub(bubbleStart) >= 340*time.Millisecond {
			at429 = at
			return http.StatusTooManyRequests, "3", `{"ok":false}`
		}
		return 0, "", ""
	})
	synctest.Test(t, func(t *testing.T) {
		tr, err := NewTransport(srv.Client(), memstore.New(memstore.Options{}), []OutLimit{
			{Policy: sluice.TokenBucket(30, time.Second, 0).Named("global")},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for i := range 150 {
			wg.Go(func() {
				resp, err := c.Post(fmt.Sprintf("%s/bot1/sendMessage?chat_id=%d", srv.url, i), "text/plain", strings.NewReader("hi"))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codes[200] != 149 || codes[429] != 1 {
			t.Errorf("statuses %v, want 149 200s and the remote's one 429", codes)
		}
	})
	if at429.IsZero() {
		t.Fatal("the remote never answered 429")
	}
	var prev time.Time
	for _, a := range srv.got {
		if !a.at.After(at429) {
			continue
		}
		if a.at.Before(at429.Add(3 * time.Second)) {
			t.Fatalf("a request reached the remote %v after its 429 with Retry-After: 3\narrivals: %s",
				a.at.Sub(at429), srv.arrivals(bubbleStart))
		}
		// The held requests leave at the limit's pace, not together.
		if a.at.Equal(prev) {
			t.Fatalf("two requests reached the remote together %v after its 429\narrivals: %s",
				a.at.Sub(at429), srv.arrivals(bubbleStart))
		}
		prev = a.at
	}
}

// bubbleStart is the time at which a synctest bubble starts.
var bubbleStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// telegramRetryAfter reads the delay of a Telegram Bot API 429 from its
// body: {"ok":false,"error_code":429,"parameters":{"retry_after":3}}.
func telegramRetryAfter(resp *http.Response) (time.Duration, bool) {
	var v struct {
		Parameters struct {
			RetryAfter int64 `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Parameters.RetryAfter <= 0 {
		return 0, false
	}
	return time.Duration(v.Parameters.RetryAfter) * time.Second, true
}

func TestTransportRetries(t *testing.T) {
	const telegram429 = `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 2","parameters":{"retry_after":2}}`
	first := func(retryAfter, body string) func(int, time.Time) (int, string, string) {
		return func(n int, at time.Time) (int, string, string) {
			if n == 0 {
				return http.StatusTooManyRequests, retryAfter, body
			}
			return 0, "", ""
		}
	}
	for _, tt := range []struct {
		name    string
		opts    TransportOptions
		answer  func(n int, at time.Time) (int, string, string)
		method  string // default POST with the body "hi", which GetBody can send again
		noRetry bool   // a POST body without GetBody
		timeout time.Duration
		status  int
		want    string // arrivals
		after   time.Duration
	}{
		{name: "off by default", answer: first("3", ""),
			status: 429, want: "429@0s"},
		{name: "retry-after seconds", opts: TransportOptions{Retries: 1}, answer: first("3", ""),
			status: 200, want: "429@0s 200@3s", after: 3 * time.Second},
		{name: "retry-after date", opts: TransportOptions{Retries: 1},
			answer: func(n int, at time.Time) (int, string, string) {
				if n == 0 {
					return 429, at.Add(5 * time.Second).UTC().Format(http.TimeFormat), ""
				}
				return 0, "", ""
			},
			status: 200, want: "429@0s 200@5s", after: 5 * time.Second},
		{name: "default backoff", opts: TransportOptions{Retries: 1, DefaultBackoff: 1500 * time.Millisecond}, answer: first("", ""),
			status: 200, want: "429@0s 200@1.5s", after: 1500 * time.Millisecond},
		{name: "capped", opts: TransportOptions{Retries: 1, MaxBackoff: time.Second}, answer: first("60", ""),
			status: 200, want: "429@0s 200@1s", after: time.Second},
		{name: "delay from the body", opts: TransportOptions{Retries: 1, RetryDelay: telegramRetryAfter}, answer: first("", telegram429),
			status: 200, want: "429@0s 200@2s", after: 2 * time.Second},
		{name: "the body before Retry-After", opts: TransportOptions{Retries: 1, RetryDelay: telegramRetryAfter}, answer: first("9", telegram429),
			status: 200, want: "429@0s 200@2s", after: 2 * time.Second},
		{name: "no delay in the body: Retry-After", opts: TransportOptions{Retries: 1, RetryDelay: telegramRetryAfter}, answer: first("4", `{"ok":false}`),
			status: 200, want: "429@0s 200@4s", after: 4 * time.Second},
		{name: "at most Retries times", opts: TransportOptions{Retries: 2},
			answer: func(int, time.Time) (int, string, string) { return 429, "1", "" },
			status: 429, want: "429@0s 429@1s 429@2s", after: 2 * time.Second},
		{name: "no body", opts: TransportOptions{Retries: 1}, answer: first("1", ""), method: "GET",
			status: 200, want: "429@0s 200@1s", after: time.Second},
		{name: "body cannot be sent again", opts: TransportOptions{Retries: 1}, answer: first("1", ""), noRetry: true,
			status: 429, want: "429@0s"},
		{name: "delay past the deadline", opts: TransportOptions{Retries: 1}, answer: first("3", ""), timeout: 2 * time.Second,
			status: 429, want: "429@0s"},
		{name: "delay before the deadline", opts: TransportOptions{Retries: 1}, answer: first("3", ""), timeout: 4 * time.Second,
			status: 200, want: "429@0s 200@3s", after: 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLoopback(t, tt.answer)
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				tr, err := NewTransport(srv.Client(), memstore.New(memstore.Options{}), []OutLimit{
					{Policy: sluice.GCRA(10, time.Second, 0)},
				}, &tt.opts)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				var body io.Reader = strings.NewReader("hi")
				switch {
				case tt.method == "GET":
					body = nil
				case tt.noRetry:
					body = io.NopCloser(body) // NewRequest sets no GetBody
				}
				req, err := http.NewRequestWithContext(ctx, cmp.Or(tt.method, "POST"), srv.url+"/send", body)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := (&http.Client{Transport: tr}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tt.status {
					t.Errorf("status %d (%s), want %d", resp.StatusCode, got, tt.status)
				}
				if el := time.Since(start); el != tt.after {
					t.Errorf("returned after %v, want %v", el, tt.after)
				}
				if n := srv.openBodies(); n != 0 {
					t.Errorf("%d response bodies left open", n)
				}
			})
			if got := srv.arrivals(bubbleStart); got != tt.want {
				t.Errorf("arrivals %s, want %s", got, tt.want)
			}
			want := "hi"
			if tt.method == "GET" {
				want = ""
			}
			for i, a := range srv.got {
				if a.body != want {
					t.Errorf("request %d carried the body %q, want %q", i+1, a.body, want)
				}
			}
		})
	}
}

func TestTransportRetryCancelled(t *testing.T) {
	srv := newLoopback(t, func(int, time.Time) (int, string, string) { return 429, "3", "" })
	synctest.Test(t, func(t *testing.T) {
		tr, err := NewTransport(srv.Client(), memstore.New(memstore.Options{}), []OutLimit{
			{Policy: sluice.GCRA(10, time.Second, 0)},
		}, &TransportOptions{Retries: 5})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.url+"/send", strings.NewReader("hi"))
		start := time.Now()
		if _, err := (&http.Client{Transport: tr}).Do(req); !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want Canceled", err)
		}
		if el := time.Since(start); el != time.Second {
			t.Errorf("returned after %v, want 1s (when the context ended)", el)
		}
		if n := srv.openBodies(); n != 0 {
			t.Errorf("%d response bodies left open", n)
		}
	})
	if got, want := srv.arrivals(bubbleStart), "429@0s"; got != want {
		t.Errorf("arrivals %s, want %s", got, want)
	}
}

func TestTransportRetryDelayKeepsBody(t *testing.T) {
	// A 429 body longer than what RetryDelay may read: the function sees
	// its first 64 KiB, the caller reads all of it.
	big := `{"ok":false,"pad":"` + strings.Repeat("x", 100<<10) + `"}`
	srv := newLoopback(t, func(int, time.Time) (int, string, string) { return 429, "", big })
	synctest.Test(t, func(t *testing.T) {
		var seen int
		tr, err := NewTransport(srv.Client(), memstore.New(memstore.Options{}), []OutLimit{
			{Policy: sluice.GCRA(10, time.Second, 0)},
		}, &TransportOptions{RetryDelay: func(resp *http.Response) (time.Duration, bool) {
			b, _ := io.ReadAll(resp.Body)
			seen = len(b)
			return 2 * time.Second, true
		}})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		resp, err := c.Get(srv.url + "/a")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, []byte(big)) {
			t.Errorf("the caller read %d bytes (%v), want the whole body of %d", len(got), err, len(big))
		}
		if seen != 64<<10 {
			t.Errorf("RetryDelay read %d bytes, want 64 KiB", seen)
		}
		// The delay it returned holds the next request.
		start := time.Now()
		if resp, err := c.Get(srv.url + "/b"); err == nil {
			resp.Body.Close()
		}
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("the next request waited %v, want 2s", el)
		}
		if n := srv.openBodies(); n != 0 {
			t.Errorf("%d response bodies left open", n)
		}
	})
}
