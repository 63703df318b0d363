// This file serves requests to an http.Handler in benchmarks: a
// ResponseWriter that reuses its header map, so that a benchmark measures
// the handler and not a recorder, a handler that only writes 200, and the
// loops that send requests from many client addresses, one at a time or
// from GOMAXPROCS goroutines. httplimit's benchmarks, internal/service/server's
// and the bench module's middleware comparison share it.

package testkit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Writer is a ResponseWriter that keeps only the status and reuses its
// header map: Reset clears both between requests.
type Writer struct {
	h    http.Header
	Code int
}

// NewWriter returns a Writer with room for a few headers.
func NewWriter() *Writer { return &Writer{h: make(http.Header, 8)} }

// Header returns the reused header map.
func (w *Writer) Header() http.Header { return w.h }

// Write discards b.
func (w *Writer) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader keeps code.
func (w *Writer) WriteHeader(code int) { w.Code = code }

// Reset forgets the last response's headers and status.
func (w *Writer) Reset() {
	clear(w.h)
	w.Code = 0
}

// OK is a handler that only writes 200: the bare handler whose cost a
// benchmark subtracts to get a middleware's own.
var OK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// Requests returns 1024 requests for GET /items/7, each from its own
// client address (10.0.x.y:1234); each passes through with, when not nil,
// which may set more (a header).
func Requests(with func(i int, r *http.Request)) []*http.Request {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/items/7", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
		if with != nil {
			with(i, reqs[i])
		}
	}
	return reqs
}

// Serve serves b.N of reqs (1024, from Requests), in turn, through h, one
// at a time or, when parallel, from GOMAXPROCS goroutines, and fails b
// unless every answer is 200. Beside ns/op it reports cpu-ns/op
// (internal/cputime), the steadier measure on a machine shared with other
// work.
func Serve(b *testing.B, h http.Handler, reqs []*http.Request, parallel bool) {
	b.ReportAllocs()
	if !parallel {
		w := NewWriter()
		i := 0
		cpu := StartMeter()
		for b.Loop() {
			w.Reset()
			h.ServeHTTP(w, reqs[i&1023])
			i++
		}
		cpu.Report(b)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d, want 200", w.Code)
		}
		return
	}
	b.ResetTimer()
	cpu := StartMeter()
	b.RunParallel(func(pb *testing.PB) {
		w := NewWriter()
		i := 0
		for pb.Next() {
			w.Reset()
			h.ServeHTTP(w, reqs[i&1023])
			if w.Code != http.StatusOK {
				b.Errorf("status %d, want 200", w.Code)
				return
			}
			i++
		}
	})
	cpu.Report(b)
}
