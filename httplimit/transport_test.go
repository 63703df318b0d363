package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
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
	tr, err := NewTransport(handlerTransport{okHandler}, failingStore{err: errors.New("backend down")}, []OutLimit{{Policy: sluice.GCRA(1, time.Second, 0)}}, nil)
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
