package httplimit

import (
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
	"github.com/sluicehq/sluice/memstore"
)

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
