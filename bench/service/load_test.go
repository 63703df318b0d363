package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	sluiceserver "github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestSluiceHTTPWorker drives the raw HTTP client against Sluice's real
// /v1/check handler on a loopback server: an allowed workload is allowed,
// and the mixed limit (1 per second) denies a key's second request.
func TestSluiceHTTPWorker(t *testing.T) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	h, err := sluiceserver.New(benchConfig(t), st, sluiceserver.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	tests := []struct {
		name  string
		limit limitSpec
		key   int
		want  []bool // the decisions of successive requests
	}{
		{"allowed", allowedLimit, 7, []bool{true, true, true}},
		{"mixed", mixedLimit, 8, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := sluiceHTTP(addr, 10, tt.limit).worker(0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.(*httpWorker).Close()
			for i, want := range tt.want {
				got, err := w.decide(ctx, tt.key)
				if err != nil {
					t.Fatalf("request %d: decide(%d) error: %v", i, tt.key, err)
				}
				if got != want {
					t.Errorf("request %d: decide(%d) = %v, want %v", i, tt.key, got, want)
				}
			}
		})
	}
}

// TestHTTPWorkerRejects checks that answers the client cannot read as a
// decision are errors, not decisions.
func TestHTTPWorkerRejects(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
	}{
		{"status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}, "want 200"},
		{"chunked", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"allowed":true,`))
			w.(http.Flusher).Flush()
			w.Write([]byte(`"limit":1}`))
		}, "Content-Length"},
		{"close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			w.Write([]byte(`{"allowed":true,"limit":1}`))
		}, "closes the connection"},
		{"not a decision", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"error":"x"}`))
		}, "not a decision"},
		{"degraded", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"allowed":true,"limit":1,"degraded":true}`))
		}, "degraded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			w, err := sluiceHTTP(strings.TrimPrefix(srv.URL, "http://"), 1, allowedLimit).worker(0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.(*httpWorker).Close()
			_, err = w.decide(context.Background(), 0)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("decide() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckGubernatorBody(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    bool
		wantErr bool
	}{
		{"under", `{"responses":[{"status":"UNDER_LIMIT","limit":"1","remaining":"0","reset_time":"1","error":"","metadata":{}}]}`, true, false},
		{"over", `{"responses":[{"status":"OVER_LIMIT","limit":"1","remaining":"0","reset_time":"1","error":"","metadata":{}}]}`, false, false},
		{"error", `{"responses":[{"status":"UNDER_LIMIT","error":"field 'unique_key' cannot be empty"}]}`, false, true},
		{"no status", `{"responses":[{"error":""}]}`, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := checkGubernatorBody([]byte(tt.body))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("checkGubernatorBody(%s) = %v, %v, want %v, error %v", tt.body, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestSluiceConfig checks that both generated configurations are valid
// sluice serve configurations.
func TestSluiceConfig(t *testing.T) {
	for _, store := range []string{
		"store:\n  backend: memory\n",
		"store:\n  backend: redis\n  redis:\n    addrs: [127.0.0.1:1]\n  timeout: 1s\n  on_error: deny\n",
	} {
		if _, err := config.Parse("bench.yaml", []byte(sluiceConfig(store)), config.Formats{}); err != nil {
			t.Errorf("config.Parse(sluiceConfig(%q)) error: %v", store, err)
		}
	}
}

func TestProcCPU(t *testing.T) {
	got, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self := selfCPU(); got < 0 || got > self+self/10+20e6 {
		t.Errorf("procCPU(self) = %v, want about getrusage's %v", got, self)
	}
	if _, err := machineBusy(); err != nil {
		t.Error(err)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
