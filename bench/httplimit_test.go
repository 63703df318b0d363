package bench

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/httprate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// Middleware benchmarks: the cost a rate-limiting middleware adds to a
// request it admits, Sluice's httplimit against go-chi/httprate, both
// keyed by the client IP from RemoteAddr (IPv6 grouped by /64), both with
// an in-memory sliding-window counter of 1e9 requests per minute, so that
// every request is admitted and no key expires during a run. Requests come
// from 1024 client addresses. The handler writes only a status; the
// response writer reuses its header map. "Bare" is the handler alone:
// subtract it to get the middleware's own cost. cpu-ns/op is the process's
// CPU time per request, which a machine busy with other work does not
// inflate as it does ns/op (it includes the garbage collector's share).

func runMiddleware(b *testing.B, h http.Handler, parallel bool) {
	testkit.Serve(b, h, testkit.Requests(nil), parallel)
}

func sluiceMiddleware(b *testing.B, headers httplimit.HeaderStyle) http.Handler {
	m, err := httplimit.New(memstore.New(memstore.Options{}), []httplimit.Limit{
		{Policy: sluice.SlidingWindow(1_000_000_000, time.Minute).Named("per-ip")},
	}, &httplimit.Options{Headers: headers})
	if err != nil {
		b.Fatal(err)
	}
	return m.Handler(testkit.OK)
}

func httprateMiddleware() http.Handler {
	byIP := func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return httprate.CanonicalizeIP(host), nil
	}
	return httprate.LimitBy(1_000_000_000, time.Minute, byIP)(testkit.OK)
}

func BenchmarkMiddleware(b *testing.B) {
	for _, mode := range []struct {
		name     string
		parallel bool
	}{{"serial", false}, {"parallel", true}} {
		b.Run("Bare/"+mode.name, func(b *testing.B) { runMiddleware(b, testkit.OK, mode.parallel) })
		b.Run("Sluice/"+mode.name, func(b *testing.B) {
			runMiddleware(b, sluiceMiddleware(b, httplimit.HeadersIETF), mode.parallel)
		})
		b.Run("Sluice-XHeaders/"+mode.name, func(b *testing.B) {
			runMiddleware(b, sluiceMiddleware(b, httplimit.HeadersX), mode.parallel)
		})
		b.Run("httprate/"+mode.name, func(b *testing.B) { runMiddleware(b, httprateMiddleware(), mode.parallel) })
	}
}
