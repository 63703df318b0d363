package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/service/tracing"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkCheckTracing is BenchmarkCheck/single through the door as
// cmd/sluice builds it, with tracing off and on, sampling 1% and every
// request, exporting over OTLP/HTTP to a receiver in the process that
// discards what it gets (docs/BENCHMARKS.md, "Per request: time and
// allocations").
func BenchmarkCheckTracing(b *testing.B) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(recv.Close)
	for _, bc := range []struct {
		name  string
		ratio float64
		on    bool
	}{{"off", 0, false}, {"ratio=0.01", 0.01, true}, {"ratio=1", 1, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var tr *tracing.Tracing
			if bc.on {
				var err error
				tr, err = tracing.Setup(context.Background(), tracing.Options{Getenv: func(string) string { return "" },
					Section: &config.Tracing{Endpoint: recv.URL, Protocol: "http/protobuf", SampleRatio: bc.ratio, SampleSet: true}})
				if err != nil || tr == nil {
					b.Fatalf("Setup = %v, %v", tr, err)
				}
				b.Cleanup(func() { tr.Shutdown(context.Background()) })
			}
			yaml := strings.Replace(testYAML, "limit: 100, period: 1m", "limit: 1000000000, period: 1s", 1)
			c := teststore.NewClock(start)
			ms := memstore.New(memstore.Options{Now: c.Now})
			store, opts := measured(b, ms, Options{Registry: prometheus.NewRegistry(), Now: c.Now, Tracing: tr}, metrics.StoreGauges{Keys: ms.Len})
			h, err := New(parse(b, yaml), tr.Store(store, "memory"), opts)
			if err != nil {
				b.Fatal(err)
			}
			benchCheck(b, tr.HTTP(h), []byte(`{"limit":"per-ip","key":"203.0.113.7"}`))
		})
	}
}
