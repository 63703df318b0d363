package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/metrics"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLocalRefusalsVisible floods one key over a Redis store: the metrics
// count the local refusals of the limit and the entries held, and the
// status page shows the share of decisions that never reached Redis.
func TestLocalRefusalsVisible(t *testing.T) {
	srv := testkit.StartRedis(t)
	// A timeout above the default 50ms: on a loaded machine the first call,
	// which dials, can take longer, and FailError would answer it 503.
	store, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr}, Failure: redisstore.FailError, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	local := func() metrics.LocalRefusals {
		s := store.LocalRefusalStats()
		return metrics.LocalRefusals{Decisions: s.Decisions, Local: s.Local, ByLimit: s.ByPolicy, Entries: s.Entries, Bytes: s.Bytes}
	}
	ms, opts := measured(t, store, Options{Registry: reg, LocalRefusals: local}, metrics.StoreGauges{LocalRefusals: local})
	h, err := New(parse(t, "store: {backend: redis, redis: {addrs: ['"+srv.Addr+"']}, on_error: error}\n"+testYAML), ms, opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, reg: reg}
	// tiny admits 2 a minute: the third check is refused by Redis, the
	// next 7 locally.
	for i := range 10 {
		rec := f.check(`{"limit":"tiny","key":"flood"}`)
		if want := i < 2; rec.Code != 200 || strings.HasPrefix(rec.Body.String(), `{"allowed":true`) != want {
			t.Fatalf("check %d = %d %s, want allowed %t", i, rec.Code, rec.Body, want)
		}
	}
	if got := counter(t, reg, "sluice_store_local_refusals_total", "tiny"); got != 7 {
		t.Errorf("sluice_store_local_refusals_total{limit=tiny} = %v, want 7", got)
	}
	if body := scrape(t, h); !strings.Contains(body, "sluice_store_local_refusal_entries 1") {
		t.Errorf("metrics lack the entry held:\n%s", body)
	}
	rec := f.do("GET", "/v1/status", "")
	var st struct {
		Store struct {
			Local *struct {
				Share     float64 `json:"share"`
				Decisions uint64  `json:"decisions"`
				Local     uint64  `json:"local"`
				Entries   int     `json:"entries"`
			} `json:"local_refusals"`
		} `json:"store"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Store.Local == nil {
		t.Fatalf("/v1/status = %s (%v), want store.local_refusals", rec.Body, err)
	}
	if l := st.Store.Local; l.Decisions != 10 || l.Local != 7 || l.Share != 0.7 || l.Entries != 1 {
		t.Errorf("store.local_refusals = %+v, want 7 of 10 decisions local, 1 entry", *l)
	}
	if page := f.do("GET", "/", "").Body.String(); !strings.Contains(page, "never reached Redis") || !strings.Contains(page, "70.0% of 10 decisions") {
		t.Errorf("the status page does not show the share of decisions that never reached Redis")
	}
}
