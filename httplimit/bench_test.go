package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// benchRequests are testkit's requests, each with its own API key.
func benchRequests() []*http.Request {
	return testkit.Requests(func(i int, r *http.Request) { r.Header.Set("X-API-Key", "key-"+strconv.Itoa(i)) })
}

// benchRun serves b.N allowed requests through h, one at a time, each from
// one of 1024 client addresses. Beside ns/op it reports cpu-ns/op, the
// steadier measure on a machine shared with other work.
func benchRun(b *testing.B, h http.Handler) { testkit.Serve(b, h, benchRequests(), false) }

// benchParallel is benchRun from GOMAXPROCS goroutines.
func benchParallel(b *testing.B, h http.Handler) { testkit.Serve(b, h, benchRequests(), true) }

// BenchmarkMiddleware measures allowed requests: Bare is the handler
// alone; the others add the middleware with a memory store, so their
// difference from Bare is the middleware's cost.
func BenchmarkMiddleware(b *testing.B) {
	// Limits high enough that every request is allowed. An address's
	// bucket is full again before its next request (1,024 addresses in
	// turn), so the store drops its state and tracks it anew: a server
	// whose clients stay well under their limits.
	perIP := sluice.TokenBucket(1_000_000_000, time.Hour, 0).Named("per-ip")
	b.Run("Bare", func(b *testing.B) { benchRun(b, testkit.OK) })
	b.Run("PerIP", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, nil)
		benchRun(b, m.Handler(testkit.OK))
	})
	b.Run("PerIP+Key+Route", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{
			{Policy: perIP},
			{Policy: sluice.SlidingWindow(999_999_999, time.Hour).Named("per-key"), Key: Header("X-API-Key")},
			{Policy: sluice.GCRA(999_999_998, time.Hour, 0).Named("route"), Key: Route},
		}, nil)
		benchRun(b, m.Handler(testkit.OK))
	})
	b.Run("PerIP/AllHeaders", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, &Options{Headers: HeadersIETF | HeadersLegacy | HeadersX})
		benchRun(b, m.Handler(testkit.OK))
	})
	b.Run("Parallel/Bare", func(b *testing.B) { benchParallel(b, testkit.OK) })
	b.Run("Parallel/PerIP", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, nil)
		benchParallel(b, m.Handler(testkit.OK))
	})
}

// BenchmarkDenied measures refused requests (429 with a problem body),
// the path a flood takes.
func BenchmarkDenied(b *testing.B) {
	m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.FixedWindow(1, time.Hour).Named("per-ip")}}, nil)
	h := m.Handler(testkit.OK)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := testkit.NewWriter()
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testkit.StartMeter()
	for b.Loop() {
		w.Reset()
		h.ServeHTTP(w, r)
	}
	cpu.Report(b)
	if w.Code != http.StatusTooManyRequests {
		b.Fatalf("status %d, want 429", w.Code)
	}
}

func BenchmarkClientIP(b *testing.B) {
	c := &ClientIP{TrustedProxies: mustPrefixes(b, "10.0.0.0/8")}
	for _, tt := range []struct {
		name, remote, xff string
	}{
		{"IPv4", "192.0.2.1:1234", ""},
		{"IPv6", "[2001:db8::1]:1234", ""},
		{"TrustedXFF", "10.0.0.1:1234", "198.51.100.1, 203.0.113.9, 10.1.1.1"},
	} {
		b.Run(tt.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			b.ReportAllocs()
			for b.Loop() {
				c.Key(r)
			}
		})
	}
}
