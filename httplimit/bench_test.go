package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/memstore"
)

// benchWriter is a ResponseWriter that reuses its header map, so that the
// benchmarks measure the middleware, not the recorder.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }

var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
})

func benchRequests() []*http.Request {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/items/7", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
		reqs[i].Header.Set("X-API-Key", "key-"+strconv.Itoa(i))
	}
	return reqs
}

// benchRun serves b.N allowed requests through h, one at a time, each from
// one of 1024 client addresses. Beside ns/op it reports cpu-ns/op, the
// steadier measure on a machine shared with other work.
func benchRun(b *testing.B, h http.Handler) {
	reqs := benchRequests()
	w := &benchWriter{h: make(http.Header, 4)}
	b.ReportAllocs()
	i := 0
	cpu := cputime.Start()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, reqs[i&1023])
		i++
	}
	cpu.Report(b)
	if w.code != http.StatusOK {
		b.Fatalf("status %d", w.code)
	}
}

// benchParallel is benchRun from GOMAXPROCS goroutines.
func benchParallel(b *testing.B, h http.Handler) {
	reqs := benchRequests()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cputime.Start()
	b.RunParallel(func(pb *testing.PB) {
		w := &benchWriter{h: make(http.Header, 4)}
		i := 0
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i&1023])
			if w.code != http.StatusOK {
				b.Errorf("status %d", w.code)
				return
			}
			i++
		}
	})
	cpu.Report(b)
}

// BenchmarkMiddleware measures allowed requests: Bare is the handler
// alone; the others add the middleware with a memory store, so their
// difference from Bare is the middleware's cost.
func BenchmarkMiddleware(b *testing.B) {
	// Limits high enough that every request is allowed, and slow enough
	// that the keys stay tracked (the steady state of a busy server).
	perIP := sluice.TokenBucket(1_000_000_000, time.Hour, 0).Named("per-ip")
	b.Run("Bare", func(b *testing.B) { benchRun(b, bareHandler) })
	b.Run("PerIP", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, nil)
		benchRun(b, m.Handler(bareHandler))
	})
	b.Run("PerIP+Key+Route", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{
			{Policy: perIP},
			{Policy: sluice.SlidingWindow(999_999_999, time.Hour).Named("per-key"), Key: Header("X-API-Key")},
			{Policy: sluice.GCRA(999_999_998, time.Hour, 0).Named("route"), Key: Route},
		}, nil)
		benchRun(b, m.Handler(bareHandler))
	})
	b.Run("PerIP/AllHeaders", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, &Options{Headers: HeadersIETF | HeadersLegacy | HeadersX})
		benchRun(b, m.Handler(bareHandler))
	})
	b.Run("Parallel/Bare", func(b *testing.B) { benchParallel(b, bareHandler) })
	b.Run("Parallel/PerIP", func(b *testing.B) {
		m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: perIP}}, nil)
		benchParallel(b, m.Handler(bareHandler))
	})
}

// BenchmarkDenied measures refused requests (429 with a problem body),
// the path a flood takes.
func BenchmarkDenied(b *testing.B) {
	m, _ := New(memstore.New(memstore.Options{}), []Limit{{Policy: sluice.FixedWindow(1, time.Hour).Named("per-ip")}}, nil)
	h := m.Handler(bareHandler)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := &benchWriter{h: make(http.Header, 8)}
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cputime.Start()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	cpu.Report(b)
	if w.code != http.StatusTooManyRequests {
		b.Fatalf("status %d, want 429", w.code)
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
