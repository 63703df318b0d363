// Command cpuab measures the server CPU time per decision of several
// servers (builds of `sluice serve` with the memory store, and of bared)
// under the same fixed number of decisions, interleaved in rounds, so that
// two builds can be compared on a machine that others load: the service
// benchmark's allowed workload (one descriptor (user, user:N) in domain
// bench over Envoy's gRPC API on 4 shared connections, or POST /v1/check
// on one keep-alive connection per worker), with a fixed count instead of
// a fixed duration.
//
//	cpuab --server NAME=BIN[@VAR=VALUE...] [--server ...] [--n 200000] [--conc 64] [--rounds 5] [--api grpc,http]
//
// A server whose NAME starts with "bare" runs as bared (BIN --ready-file
// F); any other as `BIN serve --config C --ready-file F` with the memory
// store.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const config = `listen:
  http: 127.0.0.1:0
  grpc: 127.0.0.1:0
store:
  backend: memory
limits:
  bench:
    algorithm: token_bucket
    limit: 1000000
    period: 1s
    burst: 1000000
envoy:
  - domain: bench
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket, burst: 1000000}
`

type serverFlag []string

func (s *serverFlag) String() string     { return strings.Join(*s, ",") }
func (s *serverFlag) Set(v string) error { *s = append(*s, v); return nil }

type srv struct {
	name       string
	cmd        *exec.Cmd
	http, grpc string
}

func main() {
	var servers serverFlag
	flag.Var(&servers, "server", "NAME=BIN, repeated")
	n := flag.Int("n", 200000, "decisions per run")
	conc := flag.Int("conc", 64, "workers")
	conns := flag.Int("conns", 4, "gRPC connections")
	rounds := flag.Int("rounds", 5, "rounds")
	apis := flag.String("api", "grpc,http", "APIs")
	keys := flag.Int("keys", 10000, "keys")
	flag.Parse()
	dir, err := os.MkdirTemp("", "cpuab")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		panic(err)
	}
	var ss []*srv
	defer func() {
		for _, s := range ss {
			s.cmd.Process.Signal(syscall.SIGTERM)
			s.cmd.Wait()
		}
	}()
	for _, spec := range servers {
		name, bin, ok := strings.Cut(spec, "=")
		if !ok {
			fmt.Fprintln(os.Stderr, "--server NAME=BIN")
			os.Exit(2)
		}
		ss = append(ss, startServer(dir, cfg, name, bin))
	}
	res, order := runRounds(ss, *rounds, strings.Split(*apis, ","), *n, *conc, *conns, *keys)
	report(ss, res, order)
}

// startServer starts the server name from bin (BIN[@VAR=VALUE...]): bared
// when name starts with "bare", else `sluice serve` with the configuration
// file cfg; it waits for its ready file in dir.
func startServer(dir, cfg, name, bin string) *srv {
	bin, envs, _ := strings.Cut(bin, "@")
	ready := filepath.Join(dir, name+".ready")
	var cmd *exec.Cmd
	if strings.HasPrefix(name, "bare") {
		cmd = exec.Command(bin, "--ready-file", ready)
	} else {
		cmd = exec.Command(bin, "serve", "--config", cfg, "--ready-file", ready, "--log-level", "warn")
	}
	cmd.Stderr = os.Stderr
	if envs != "" {
		cmd.Env = append(os.Environ(), strings.Split(envs, "@")...)
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	s := &srv{name: name, cmd: cmd}
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var r struct{ HTTP, GRPC string }
			if err := json.Unmarshal(b, &r); err != nil {
				panic(err)
			}
			s.http, s.grpc = r.HTTP, r.GRPC
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runKey names the runs of one server over one API.
type runKey struct{ name, api string }

// runRounds runs every server over every API once a round, the order of
// the servers reversed every other round, and returns each one's CPU per
// decision (µs) by round, and the order the keys were first seen in.
func runRounds(ss []*srv, rounds int, apis []string, n, conc, conns, keys int) (map[runKey][]float64, []runKey) {
	res := map[runKey][]float64{}
	var order []runKey
	for round := 1; round <= rounds; round++ {
		o := slices.Clone(ss)
		if round%2 == 0 {
			slices.Reverse(o)
		}
		for _, api := range apis {
			for _, s := range o {
				us, wall, err := run(s, api, n, conc, conns, keys)
				if err != nil {
					fmt.Fprintln(os.Stderr, s.name, api, err)
					os.Exit(1)
				}
				k := runKey{s.name, api}
				if _, ok := res[k]; !ok {
					order = append(order, k)
				}
				res[k] = append(res[k], us)
				fmt.Printf("round %d %-5s %-12s %6.2f µs/decision  %7.0f/s  load %s\n", round, api, s.name, us, float64(n)/wall.Seconds(), load())
			}
		}
	}
	return res, order
}

// report prints, per server and API, the median CPU per decision over
// the rounds, and the median of its within-round ratios to the first
// server's.
func report(ss []*srv, res map[runKey][]float64, order []runKey) {
	fmt.Println()
	for _, k := range order {
		v := slices.Clone(res[k])
		sort.Float64s(v)
		first := res[runKey{ss[0].name, k.api}]
		var ratios []float64
		for i := range v {
			ratios = append(ratios, res[k][i]/first[i])
		}
		sort.Float64s(ratios)
		fmt.Printf("%-5s %-12s median %6.2f µs  min %6.2f  ×%.2f of %s (median within-round ratio)  all %v\n",
			k.api, k.name, v[len(v)/2], v[0], ratios[len(ratios)/2], ss[0].name, fmtAll(res[k]))
	}
}

func fmtAll(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(x, 'f', 1, 64))
	}
	return strings.Join(s, " ")
}

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) > 0 {
		return f[0]
	}
	return "?"
}

type decider func(k int) error

func run(s *srv, api string, n, conc, nconns, keys int) (float64, time.Duration, error) {
	var workers []decider
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var err error
	switch api {
	case "grpc":
		workers, closers, err = grpcWorkers(s, conc, nconns, keys)
	case "http":
		workers, closers, err = httpWorkers(s, conc, keys)
	default:
		err = fmt.Errorf("api %q", api)
	}
	if err != nil {
		return 0, 0, err
	}
	// Warm up: each worker a few decisions.
	for _, w := range workers {
		if err := w(0); err != nil {
			return 0, 0, err
		}
	}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	cpu0, err := procCPU(s.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for i, w := range workers {
		wg.Go(func() {
			k := i * 7919
			for left.Add(-1) >= 0 {
				k = (k + 40503) % keys
				if err := w(k); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpu1, err := procCPU(s.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	if e := firstErr.Load(); e != nil {
		return 0, 0, e.(error)
	}
	return float64(cpu1-cpu0) / 1e3 / float64(n), wall, nil
}

// grpcWorkers returns conc workers that call ShouldRateLimit over nconns
// shared connections to s, and the connections to close.
func grpcWorkers(s *srv, conc, nconns, keys int) ([]decider, []io.Closer, error) {
	var workers []decider
	var closers []io.Closer
	var clients []rlsv3.RateLimitServiceClient
	for range nconns {
		c, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, closers, err
		}
		closers = append(closers, c)
		clients = append(clients, rlsv3.NewRateLimitServiceClient(c))
	}
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for k := range reqs {
		reqs[k] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "user:" + strconv.Itoa(k)}}}}}
	}
	for i := range conc {
		c := clients[i%len(clients)]
		workers = append(workers, func(k int) error {
			resp, err := c.ShouldRateLimit(context.Background(), reqs[k])
			if err != nil {
				return err
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 {
				return fmt.Errorf("answer %v", resp)
			}
			return nil
		})
	}
	return workers, closers, nil
}

// httpWorkers returns conc workers that each POST /v1/check on a
// keep-alive connection of their own to s, and the connections to close.
func httpWorkers(s *srv, conc, keys int) ([]decider, []io.Closer, error) {
	var workers []decider
	var closers []io.Closer
	reqs := make([][]byte, keys)
	for k := range reqs {
		b := `{"limit":"bench","key":"user:` + strconv.Itoa(k) + `"}`
		reqs[k] = fmt.Appendf(nil, "POST /v1/check HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.http, len(b), b)
	}
	for range conc {
		conn, err := net.Dial("tcp", s.http)
		if err != nil {
			return nil, closers, err
		}
		closers = append(closers, conn)
		br := bufio.NewReaderSize(conn, 4096)
		body := make([]byte, 4096)
		workers = append(workers, func(k int) error {
			if _, err := conn.Write(reqs[k]); err != nil {
				return err
			}
			return readAllowed(br, body)
		})
	}
	return workers, closers, nil
}

// readAllowed reads one HTTP/1.1 answer of POST /v1/check from br into
// body and checks that it is a 200 that allows the request.
func readAllowed(br *bufio.Reader, body []byte) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("status %q", line)
	}
	cl := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
		if len(line) > 15 && strings.EqualFold(string(line[:15]), "content-length:") {
			cl, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
	}
	if cl < 0 || cl > len(body) {
		return errors.New("content-length")
	}
	_, err = io.ReadFull(br, body[:cl])
	if !bytes.HasPrefix(body, []byte(`{"allowed":true`)) {
		return fmt.Errorf("body %q", body[:cl])
	}
	return err
}

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
