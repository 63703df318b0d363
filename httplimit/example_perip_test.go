package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// The one-line way in: 100 requests per minute per client address, counted
// in process. The 101st request from one address within the minute is
// refused; another address has its own budget.
func ExamplePerIP() {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	mux := http.NewServeMux()
	mux.Handle("/", httplimit.PerIP(sluice.SlidingWindow(100, time.Minute))(hello))

	statuses := map[int]int{}
	for range 101 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		statuses[w.Code]++
	}
	fmt.Println("192.0.2.1:", statuses)

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.7:1234"
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println("198.51.100.7:", w.Code)
	// Output:
	// 192.0.2.1: map[200:100 429:1]
	// 198.51.100.7: 200
}
