package httplimit_test

import (
	"log"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/redisstore"
)

// Per-API-key limiting with a Redis store, so that every instance of a
// service shares one budget per key: 10 requests per second with bursts of
// 50, and 10,000 per day, per X-API-Key; requests without the header are
// limited per client IP instead. If Redis cannot answer, the store's
// failure policy (here: deny) decides and clients get 503, not 429.
//
// This example needs a Redis at 127.0.0.1:6379, so it is compiled but not
// run; TestRedisSharedBudget runs the same setup against a private
// redis-server.
func ExampleNew_redis() {
	store, err := redisstore.New(redisstore.Options{
		Addrs:   []string{"127.0.0.1:6379"},
		Timeout: 50 * time.Millisecond,
		Failure: redisstore.FailDeny,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	apiKey, err := httplimit.ParseKey("header:X-API-Key", nil)
	if err != nil {
		log.Fatal(err)
	}
	clientIP := &httplimit.ClientIP{}
	anonymous := func(r *http.Request) (string, bool) {
		if r.Header.Get("X-API-Key") != "" {
			return "", false
		}
		return clientIP.Key(r)
	}
	m, err := httplimit.New(store, []httplimit.Limit{
		{Policy: sluice.TokenBucket(10, time.Second, 50).Named("api-key"), Key: apiKey},
		{Policy: sluice.SlidingWindow(10_000, 24*time.Hour).Named("api-key-daily"), Key: apiKey},
		{Policy: sluice.SlidingWindow(60, time.Minute).Named("anonymous"), Key: anonymous},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("report\n"))
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", m.Handler(mux)))
}
