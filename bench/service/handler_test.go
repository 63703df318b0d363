package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/service/rls"
	sluiceserver "github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/memstore"
)

// These benchmarks split the service's CPU per decision: the decision
// handlers of sluice serve called in-process, without the network and
// net/http or gRPC around them, on the benchmark's configuration and the
// memory store. With -cpuprofile they show where a decision's time goes.
//
//	cd bench && go test ./service -run '^$' -bench . -benchmem

const benchKeys = 10_000

func benchConfig(tb testing.TB) *config.Config {
	tb.Helper()
	cfg, err := config.Parse("bench.yaml", []byte(sluiceConfig("store:\n  backend: memory\n")), config.Formats{})
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// benchEnvoy returns the envoy section of the benchmark's configuration,
// decoded and compiled.
func benchEnvoy(tb testing.TB, cfg *config.Config) *rls.Config {
	tb.Helper()
	section, ok := cfg.Envoy()
	if !ok {
		tb.Fatal("the benchmark's configuration has no envoy section")
	}
	decoded, problems := rls.DecodeSection(section, "envoy")
	envoy, err := rls.CompileSection(decoded)
	if len(problems) > 0 || err != nil {
		tb.Fatalf("the envoy section: %v %v", problems, err)
	}
	return envoy
}

// measuredMemory returns a memory store, closed when tb ends, wrapped in
// the metrics' Store decorator, as sluice serve hands its store to every
// front door, with those metrics and their registry: the handlers then pay
// for the sluice_store_* series as they do in the service.
func measuredMemory(tb testing.TB) (*metrics.Store, *metrics.Metrics, *prometheus.Registry) {
	tb.Helper()
	st := memstore.New(memstore.Options{})
	tb.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		tb.Fatal(err)
	}
	return m.Store(st), m, reg
}

// recorder is a ResponseWriter that keeps only the status and reuses its
// header map, so that the benchmark counts the handler's allocations only.
type recorder struct {
	h      http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(s int)   { r.status = s }
func (r *recorder) Write(b []byte) (int, error) {
	r.body = append(r.body[:0], b...)
	return len(b), nil
}

// checkHandler returns the service's HTTP handler on the benchmark's
// configuration and a measured memory store.
func checkHandler(b *testing.B) *sluiceserver.Handler {
	b.Helper()
	cfg := benchConfig(b)
	ms, m, reg := measuredMemory(b)
	h, err := sluiceserver.New(cfg, ms, sluiceserver.Options{Registry: reg, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkCheckHandler is POST /v1/check through the service's handler.
func BenchmarkCheckHandler(b *testing.B) {
	h := checkHandler(b)
	bodies := make([][]byte, benchKeys)
	for k := range bodies {
		bodies[k] = []byte(`{"limit":"bench","key":"` + keyName(k) + `"}`)
	}
	u, _ := url.Parse("http://127.0.0.1/v1/check")
	rd := bytes.NewReader(nil)
	req := &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Host: "127.0.0.1", RemoteAddr: "127.0.0.1:1234"}
	req = req.WithContext(context.Background())
	w := &recorder{h: http.Header{}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		body := bodies[i%benchKeys]
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		clear(w.h)
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK || !bytes.HasPrefix(w.body, sluiceAllowed) {
			b.Fatalf("POST /v1/check = %d %s, want 200 allowed", w.status, w.body)
		}
	}
}

// rlsService returns the service's Envoy rate limit service on the
// benchmark's configuration and a measured memory store, closed when b
// ends, counting its decisions as sluice serve does.
func rlsService(b *testing.B) *rls.Service {
	b.Helper()
	cfg := benchConfig(b)
	ms, m, _ := measuredMemory(b)
	return rls.New(ms, benchEnvoy(b, cfg), rls.Options{OnDecision: func(ev rls.Event) {
		m.RLSDecision(ev.Domain, ev.Key, ev.Outcome.String())
	}})
}

// BenchmarkShouldRateLimit is Envoy's ShouldRateLimit through the
// service's implementation, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	svc := rlsService(b)
	reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
	for k := range reqs {
		reqs[k] = &rlsv3.RateLimitRequest{Domain: allowedLimit.name, Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: keyName(k)}},
		}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%benchKeys])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatalf("ShouldRateLimit = %v, %v, want OK", resp, err)
		}
	}
}

// BenchmarkMemstoreAllow is the decision alone: the memory store's Allow
// on the same limit and keys.
func BenchmarkMemstoreAllow(b *testing.B) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	p := sluice.TokenBucket(allowedLimit.limit, time.Second, allowedLimit.burst)
	p.Name = allowedLimit.name
	keys := make([]string, benchKeys)
	for k := range keys {
		keys[k] = keyName(k)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: keys[i%benchKeys], Cost: 1})
		if err != nil || !d.Allowed {
			b.Fatalf("Allow = %+v, %v, want allowed", d, err)
		}
	}
}

// BenchmarkCheckHandlerFlood is POST /v1/check for the flood workload's
// refused key (limit flood_key, key attacker) through the service's
// handler, from parallel callers: the service's part of a refused flood.
func BenchmarkCheckHandlerFlood(b *testing.B) {
	h := checkHandler(b)
	limit, key := floodLimit.request(0)
	body := []byte(`{"limit":"` + limit + `","key":"` + key + `"}`)
	u, _ := url.Parse("http://127.0.0.1/v1/check")
	var allowed atomic.Int64
	defer checkFlood(b, time.Now(), &allowed)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rd := bytes.NewReader(nil)
		req := &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json"}}, Host: "127.0.0.1", RemoteAddr: "127.0.0.1:1234"}
		req = req.WithContext(context.Background())
		w := &recorder{h: http.Header{}}
		for pb.Next() {
			rd.Reset(body)
			req.Body = io.NopCloser(rd)
			req.ContentLength = int64(len(body))
			clear(w.h)
			h.ServeHTTP(w, req)
			if w.status != http.StatusOK {
				b.Fatalf("POST /v1/check = %d %s, want 200", w.status, w.body)
			}
			if !bytes.HasPrefix(w.body, []byte(`{"allowed":false`)) {
				allowed.Add(1)
			}
		}
	})
}

// BenchmarkShouldRateLimitFlood is Envoy's ShouldRateLimit for the flood
// workload's refused descriptor (domain flood, user attacker), without
// gRPC, from parallel callers.
func BenchmarkShouldRateLimitFlood(b *testing.B) {
	svc := rlsService(b)
	_, key := floodLimit.request(0)
	req := &rlsv3.RateLimitRequest{Domain: floodLimit.name, Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: key}},
	}}}
	ctx := context.Background()
	var allowed atomic.Int64
	defer checkFlood(b, time.Now(), &allowed)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(ctx, req)
			if err != nil {
				b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				allowed.Add(1)
			}
		}
	})
}

// checkFlood fails a flood benchmark that began at start if its key was
// allowed more often than the flood key's limit (a fixed window of
// floodPerMinute a minute) allows in the minutes it ran through.
func checkFlood(b *testing.B, start time.Time, allowed *atomic.Int64) {
	windows := int64(time.Now().Truncate(time.Minute).Sub(start.Truncate(time.Minute))/time.Minute) + 1
	if n := allowed.Load(); n > windows*floodPerMinute {
		b.Fatalf("the flood key was allowed %d times in %d windows, want at most %d a window", n, windows, floodPerMinute)
	}
}
