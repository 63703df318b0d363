package main

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/rls"
	sluiceserver "github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// TestSluiceHTTPWorker drives the raw HTTP client against Sluice's real
// /v1/check handler on a loopback server: an allowed workload is allowed,
// the mixed limit (1 per second) denies a key's second request, and the
// flood workload's limits refuse the flood key after floodPerMinute
// requests and never a well-behaved key.
func TestSluiceHTTPWorker(t *testing.T) {
	awayFromMinuteEnd()
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
		{"flood key", floodLimit, 0, floodAnswers()},
		{"well-behaved key", floodLimit, 5, []bool{true, true, true, true, true, true, true, true, true, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := sluiceHTTP(addr, 10, tt.limit).worker(0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.(*httpWorker).Close()
			checkAnswers(t, ctx, w, tt.key, tt.want)
		})
	}
}

// awayFromMinuteEnd waits for the next minute when the flood key's fixed
// window (a calendar minute) could restart during a test, that is in the
// last 5 seconds of a minute. The service keeps that window on the wall
// clock, which only waiting moves.
func awayFromMinuteEnd() {
	if s := time.Now().Second(); s >= 55 {
		time.Sleep(time.Duration(61-s) * time.Second) // into the next minute
	}
}

// floodAnswers are the decisions of the flood key's first requests in a
// fresh minute: floodPerMinute allowed, then refused.
func floodAnswers() []bool {
	want := make([]bool, floodPerMinute+3)
	for i := range floodPerMinute {
		want[i] = true
	}
	return want
}

// checkAnswers sends w one decision for key per element of want, in order,
// and checks each answer.
func checkAnswers(t *testing.T, ctx context.Context, w worker, key int, want []bool) {
	t.Helper()
	for i, want := range want {
		got, err := w.decide(ctx, key)
		if err != nil {
			t.Fatalf("request %d: decide(%d) error: %v", i, key, err)
		}
		if got != want {
			t.Errorf("request %d: decide(%d) = %v, want %v", i, key, got, want)
		}
	}
}

// TestEnvoyWorker drives the gRPC client against Sluice's real
// ShouldRateLimit on a loopback gRPC server, configured with the Envoy
// domains envoyproxy/ratelimit reads in the comparison: the flood key is
// refused after floodPerMinute requests, a well-behaved key of the same
// domain never, and every key of the allowed-window domain is allowed.
func TestEnvoyWorker(t *testing.T) {
	awayFromMinuteEnd()
	st := memstore.New(memstore.Options{})
	defer st.Close()
	gs := grpc.NewServer()
	rls.New(st, benchEnvoy(t, benchConfig(t)), rls.Options{}).Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	ctx := context.Background()

	tests := []struct {
		name  string
		limit limitSpec
		key   int
		want  []bool
	}{
		{"window", windowLimit, 3, []bool{true, true, true}},
		{"flood key", floodLimit, 0, floodAnswers()},
		{"well-behaved key", floodLimit, 4, []bool{true, true, true, true, true, true, true, true, true, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newEnvoyClient(ln.Addr().String(), 1, 10, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			w, err := c.worker(0)
			if err != nil {
				t.Fatal(err)
			}
			checkAnswers(t, ctx, w, tt.key, tt.want)
		})
	}
}

func TestMayDeny(t *testing.T) {
	tests := []struct {
		l    limitSpec
		k    int
		want bool
	}{
		{allowedLimit, 0, false},
		{windowLimit, 0, false},
		{mixedLimit, 3, true},
		{floodLimit, 0, true},
		{floodLimit, 1, false},
	}
	for _, tt := range tests {
		if got := tt.l.mayDeny(tt.k); got != tt.want {
			t.Errorf("%s.mayDeny(%d) = %v, want %v", tt.l.name, tt.k, got, tt.want)
		}
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\ncmdstat_incrby:calls=7,usec=1\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"evalsha": 12, "incrby": 7}; !maps.Equal(got, want) {
		t.Errorf("parseCommandStats = %v, want %v", got, want)
	}
	for _, bad := range []string{"cmdstat_get\r\n", "cmdstat_get:usec=1\r\n", "cmdstat_get:calls=x,usec=1\r\n", "cmdstat_get:calls=-1\r\n"} {
		if _, err := parseCommandStats(bad); err == nil {
			t.Errorf("parseCommandStats(%q) = nil error, want one", bad)
		}
	}
	d, sum := commandsBetween(map[string]int64{"evalsha": 10, "info": 3}, map[string]int64{"evalsha": 15, "info": 5, "ping": 2})
	if want := map[string]int64{"evalsha": 5, "ping": 2}; !maps.Equal(d, want) || sum != 7 {
		t.Errorf("commandsBetween = %v, %d, want %v, 7", d, sum, want)
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
	// The files envoyproxy/ratelimit reads are Sluice's envoy format too.
	for _, d := range envoyDomains() {
		if _, problems := rls.Parse([]byte(d.yaml), d.file); len(problems) > 0 {
			t.Errorf("rls.Parse(%s) problems: %v", d.file, problems)
		}
	}
}

func TestProcCPU(t *testing.T) {
	got, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self := testkit.Process(); got < 0 || got > self+self/10+20e6 {
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
