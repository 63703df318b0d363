package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Per-IP limiting on a standard mux: 3 requests per minute per client
// address. The fourth request from one address gets 429 with Retry-After
// and a problem+json body; another address is unaffected.
func Example() {
	// A fixed clock keeps the output stable; real code uses
	// memstore.New(memstore.Options{}).
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})

	m, err := httplimit.New(store, []httplimit.Limit{
		{Policy: sluice.FixedWindow(3, time.Minute).Named("per-ip")},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	h := m.Handler(mux)

	for i, addr := range []string{"192.0.2.1:1000", "192.0.2.1:1001", "192.0.2.1:1002", "192.0.2.1:1003", "198.51.100.9:2000"} {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %d RateLimit: %s", i+1, w.Code, w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Printf(" Retry-After: %s\n  %s", w.Header().Get("Retry-After"), w.Body.String())
		}
		fmt.Println()
	}
	// Output:
	// 1 200 RateLimit: "per-ip";r=2;t=60
	// 2 200 RateLimit: "per-ip";r=1;t=60
	// 3 200 RateLimit: "per-ip";r=0;t=60
	// 4 429 RateLimit: "per-ip";r=0;t=60 Retry-After: 60
	//   {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Too many requests; retry in 60 seconds.","retry-after":60,"violated-policies":["per-ip"]}
	// 5 200 RateLimit: "per-ip";r=2;t=60
}

// Several levels at once, all or nothing: 10/s per client IP AND 1000/h per
// API key AND 5000/s over the whole endpoint. A request refused by one
// limit is charged to none.
func ExampleNew_levels() {
	store := memstore.New(memstore.Options{})
	apiKey, err := httplimit.ParseKey("header:X-API-Key", nil)
	if err != nil {
		log.Fatal(err)
	}
	// Behind a load balancer at 10.0.0.0/8 that sets X-Forwarded-For.
	trusted, err := httplimit.ParseTrustedProxies([]string{"10.0.0.0/8"})
	if err != nil {
		log.Fatal(err)
	}
	m, err := httplimit.New(store, []httplimit.Limit{
		{Policy: sluice.TokenBucket(10, time.Second, 0).Named("per-ip")},
		{Policy: sluice.SlidingWindow(1000, time.Hour).Named("per-key"), Key: apiKey},
		{Policy: sluice.GCRA(5000, time.Second, 0).Named("endpoint"), Key: httplimit.Route},
	}, &httplimit.Options{
		ClientIP: &httplimit.ClientIP{TrustedProxies: trusted},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))

	r := httptest.NewRequest("POST", "/v1/orders", nil)
	r.RemoteAddr = "10.1.2.3:443"
	r.Header.Set("X-Forwarded-For", "203.0.113.50")
	r.Header.Set("X-API-Key", "k-123")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code)
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", w.Header().Get("RateLimit"))
	// Output:
	// 201
	// RateLimit-Policy: "per-ip";q=10;w=1, "per-key";q=1000;w=3600, "endpoint";q=5000;w=1
	// RateLimit: "per-ip";r=9;t=1
}

// A Telegram-style outbound client: at most 30 messages per second overall
// and 1 per second per chat. The third message goes to chat 1 again, so the
// Transport holds it until a second after the first.
func ExampleNewTransport() {
	var mu sync.Mutex
	var arrived []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, r.URL.Query().Get("chat_id"))
		mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	defer api.Close()

	tr, err := httplimit.NewTransport(nil, memstore.New(memstore.Options{}), []httplimit.OutLimit{
		{Policy: sluice.TokenBucket(30, time.Second, 0).Named("bot")},
		{Policy: sluice.GCRA(1, time.Second, 0).Named("chat"), Key: httplimit.Query("chat_id")},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	start := time.Now()
	var held time.Duration
	for _, chat := range []string{"1", "2", "1"} {
		resp, err := client.PostForm(api.URL+"/bot123/sendMessage?chat_id="+chat, url.Values{"text": {"hi"}})
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		held = time.Since(start)
	}
	fmt.Println("arrived:", arrived)
	fmt.Println("third message held about a second:", held >= 990*time.Millisecond && held < 5*time.Second)
	// Output:
	// arrived: [1 2 1]
	// third message held about a second: true
}

// Telegram's Bot API gives the delay of a 429 in its JSON body, in
// parameters.retry_after. RetryDelay reads it there, and Retries sends the
// message again once that delay has passed; meanwhile every other request
// to the API waits too.
func ExampleTransportOptions() {
	var mu sync.Mutex
	calls := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1","parameters":{"retry_after":1}}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer api.Close()

	retryAfter := func(resp *http.Response) (time.Duration, bool) {
		var body struct {
			Parameters struct {
				RetryAfter int64 `json:"retry_after"`
			} `json:"parameters"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Parameters.RetryAfter <= 0 {
			return 0, false // Retry-After, then DefaultBackoff, apply
		}
		return time.Duration(body.Parameters.RetryAfter) * time.Second, true
	}
	tr, err := httplimit.NewTransport(nil, memstore.New(memstore.Options{}), []httplimit.OutLimit{
		{Policy: sluice.TokenBucket(30, time.Second, 0).Named("bot")},
		{Policy: sluice.GCRA(1, time.Second, 0).Named("chat"), Key: httplimit.Query("chat_id")},
	}, &httplimit.TransportOptions{RetryDelay: retryAfter, Retries: 2})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	start := time.Now()
	resp, err := client.PostForm(api.URL+"/bot123/sendMessage?chat_id=1", url.Values{"text": {"hi"}})
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("sent twice:", calls == 2)
	fmt.Println("the second time after retry_after:", time.Since(start) >= time.Second)
	// Output:
	// 200 {"ok":true}
	// sent twice: true
	// the second time after retry_after: true
}
