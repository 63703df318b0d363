// Command service benchmarks the Sluice service, `sluice serve`, from a
// load generator in another process: decisions per second, p50 and p99
// latency and CPU time per decision of POST /v1/check and of Envoy's
// ShouldRateLimit (gRPC), with the memory store and with a private Redis,
// side by side with gubernator v2.13.0 (gubernatord, in its own process)
// on the same workload, with Sluice's Redis store called as a library
// from this process, and with bared, a server that decides nothing over
// the same net/http and grpc-go servers (the transport's floor).
//
// This process is the load generator. It starts every server itself: a
// redis-server on a free loopback port (no persistence), two `sluice serve`
// (memory store; Redis store), gubernatord and bared, each with a ready file, and
// stops them at the end. Each run holds a fixed number of workers, each
// with its own connection (HTTP/1.1 keep-alive) or sharing a few gRPC
// connections, making one decision after the other on keys drawn at random
// from 10,000; after a warm-up it counts decisions, latencies and the CPU
// time of every process for a fixed duration. Rounds run every contender
// of a concurrency level one after the other, in reverse order every other
// round, so that the load of a shared machine falls on all alike.
//
// bench/service/run.sh builds the binaries and runs it as
// docs/BENCHMARKS.md reports; see there for what the numbers mean.
//
//	service --sluice BIN --gubernatord BIN [--bared BIN] --out DIR [--rounds 3] [--duration 10s] ...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// redisTimeout bounds each Redis call of the service and of the library
// alike; their failure policy is deny, so that a failed call shows as an
// error of the run rather than as a decision.
const redisTimeout = time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

type options struct {
	sluice, gubernatord, bared string
	redis                      string
	out                        string
	rounds                     int
	duration, warmup           time.Duration
	conc, mixedConc            []int
	keys, grpcConns            int
	only                       *regexp.Regexp
	between                    string
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.sluice, "sluice", "", "the sluice binary (go build ./cmd/sluice)")
	fs.StringVar(&o.gubernatord, "gubernatord", "", "the gubernatord binary (go build ./service/gubernatord)")
	fs.StringVar(&o.bared, "bared", "", "the bared binary (go build ./service/bared): the transport floor; empty to leave it out")
	fs.StringVar(&o.redis, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.out, "out", "", "the directory for raw results, logs and the table")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up of each run, not measured")
	conc := fs.String("conc", "16,64", "concurrency levels (workers) of the allowed workload")
	mixed := fs.String("mixed-conc", "64", "concurrency levels of the mixed (about half denied) workload; empty for none")
	fs.IntVar(&o.keys, "keys", 10_000, "keys the decisions are spread over")
	fs.IntVar(&o.grpcConns, "grpc-conns", 4, "gRPC connections the workers of a gRPC run share")
	only := fs.String("only", "", "run only the runs whose name (workload/api/cN/contender) matches this regexp")
	fs.StringVar(&o.between, "between", "", "a shell command run after each round, its output appended to OUT/between.txt")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.sluice == "" || o.gubernatord == "" || o.out == "" {
		return nil, errors.New("--sluice, --gubernatord and --out are required")
	}
	var err error
	if o.conc, err = parseInts(*conc); err != nil {
		return nil, fmt.Errorf("--conc: %w", err)
	}
	if o.mixedConc, err = parseInts(*mixed); err != nil {
		return nil, fmt.Errorf("--mixed-conc: %w", err)
	}
	if o.only, err = regexp.Compile(*only); err != nil {
		return nil, fmt.Errorf("--only: %w", err)
	}
	if o.rounds < 1 || o.keys < 1 || o.grpcConns < 1 || o.duration <= 0 || o.warmup < 0 {
		return nil, errors.New("--rounds, --keys and --grpc-conns must be at least 1, --duration positive, --warmup not negative")
	}
	return o, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// sluiceConfig is the configuration of both sluice serve: the two
// workloads' limits for /v1/check and the same as Envoy domains, and the
// store.
func sluiceConfig(store string) string {
	limit := func(l limitSpec) string {
		return fmt.Sprintf("  %s:\n    algorithm: token_bucket\n    limit: %d\n    period: 1s\n    burst: %d\n", l.name, l.limit, l.burst)
	}
	domain := func(l limitSpec) string {
		return fmt.Sprintf("  - domain: %s\n    descriptors:\n      - key: user\n        rate_limit: {unit: second, requests_per_unit: %d, algorithm: token_bucket, burst: %d}\n", l.name, l.limit, l.burst)
	}
	return "listen:\n  http: 127.0.0.1:0\n  grpc: 127.0.0.1:0\n" + store +
		"limits:\n" + limit(allowedLimit) + limit(mixedLimit) +
		"envoy:\n" + domain(allowedLimit) + domain(mixedLimit)
}

// env is the running servers.
type env struct {
	redis              *redisServer
	sluiceMem, sluiceR *server
	guber              *server
	bare               *server // nil without --bared
}

func (e *env) stop() error {
	var errs []error
	for _, s := range []*server{e.sluiceMem, e.sluiceR, e.guber, e.bare} {
		if s != nil {
			errs = append(errs, s.stop())
		}
	}
	if e.redis != nil {
		errs = append(errs, e.redis.stop())
	}
	return errors.Join(errs...)
}

func startEnv(o *options) (_ *env, err error) {
	e := &env{}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	if e.redis, err = startRedis(o.redis, o.out); err != nil {
		return nil, err
	}
	memCfg := filepath.Join(o.out, "sluice-memory.yaml")
	redisCfg := filepath.Join(o.out, "sluice-redis.yaml")
	if err := os.WriteFile(memCfg, []byte(sluiceConfig("store:\n  backend: memory\n")), 0o644); err != nil {
		return nil, err
	}
	redisStore := fmt.Sprintf("store:\n  backend: redis\n  redis:\n    addrs: [%s]\n    prefix: \"sluice:\"\n  timeout: %v\n  on_error: deny\n", e.redis.addr, redisTimeout)
	if err := os.WriteFile(redisCfg, []byte(sluiceConfig(redisStore)), 0o644); err != nil {
		return nil, err
	}
	if e.sluiceMem, err = startServer("sluice-memory", o.out, o.sluice, "serve", "--config", memCfg); err != nil {
		return nil, err
	}
	if e.sluiceR, err = startServer("sluice-redis", o.out, o.sluice, "serve", "--config", redisCfg); err != nil {
		return nil, err
	}
	if e.guber, err = startServer("gubernator", o.out, o.gubernatord); err != nil {
		return nil, err
	}
	if o.bared != "" {
		if e.bare, err = startServer("bare", o.out, o.bared); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// contender is one server and API under load.
type contender struct {
	name   string  // sluice-memory, gubernator, sluice-redis, redisstore, bare
	api    string  // http, grpc, library
	server *server // nil for the library
	redis  bool    // whether the decisions go to Redis
	client func(l limitSpec) (client, error)
}

func contenders(o *options, e *env) []contender {
	var bare []contender
	if e.bare != nil {
		bare = []contender{
			{"bare", "http", e.bare, false, func(l limitSpec) (client, error) {
				return sluiceHTTP(e.bare.ready.HTTP, o.keys, l), nil
			}},
			{"bare", "grpc", e.bare, false, func(l limitSpec) (client, error) {
				return newEnvoyClient(e.bare.ready.GRPC, o.grpcConns, o.keys, l)
			}},
		}
	}
	return append(bare, []contender{
		{"sluice-memory", "http", e.sluiceMem, false, func(l limitSpec) (client, error) {
			return sluiceHTTP(e.sluiceMem.ready.HTTP, o.keys, l), nil
		}},
		{"gubernator", "http", e.guber, false, func(l limitSpec) (client, error) {
			return gubernatorHTTP(e.guber.ready.HTTP, o.keys, l), nil
		}},
		{"sluice-memory", "grpc", e.sluiceMem, false, func(l limitSpec) (client, error) {
			return newEnvoyClient(e.sluiceMem.ready.GRPC, o.grpcConns, o.keys, l)
		}},
		{"gubernator", "grpc", e.guber, false, func(l limitSpec) (client, error) {
			return newGuberClient(e.guber.ready.GRPC, o.grpcConns, o.keys, l)
		}},
		{"sluice-redis", "http", e.sluiceR, true, func(l limitSpec) (client, error) {
			return sluiceHTTP(e.sluiceR.ready.HTTP, o.keys, l), nil
		}},
		{"sluice-redis", "grpc", e.sluiceR, true, func(l limitSpec) (client, error) {
			return newEnvoyClient(e.sluiceR.ready.GRPC, o.grpcConns, o.keys, l)
		}},
		{"redisstore", "library", nil, true, func(l limitSpec) (client, error) {
			return newLibClient(e.redis.addr, o.keys, l)
		}},
	}...)
}

// plan is one run: a contender under a workload at a concurrency.
type plan struct {
	workload string
	limit    limitSpec
	conc     int
	c        contender
}

func (p plan) name() string {
	return fmt.Sprintf("%s/%s/c%d/%s", p.workload, p.c.api, p.conc, p.c.name)
}

// roundPlan returns the runs of one round in their order.
func roundPlan(o *options, cs []contender) []plan {
	var ps []plan
	add := func(workload string, l limitSpec, concs []int, keep func(contender) bool) {
		for _, n := range concs {
			for _, c := range cs {
				p := plan{workload, l, n, c}
				if keep(c) && o.only.MatchString(p.name()) {
					ps = append(ps, p)
				}
			}
		}
	}
	add("allowed", allowedLimit, o.conc, func(contender) bool { return true })
	add("mixed", mixedLimit, o.mixedConc, func(c contender) bool { return !c.redis && c.name != "bare" })
	return ps
}

// result is what one run measured; the raw output has one per line.
type result struct {
	Round     int     `json:"round"`
	Workload  string  `json:"workload"`
	API       string  `json:"api"`
	Conc      int     `json:"conc"`
	Contender string  `json:"contender"`
	Seconds   float64 `json:"seconds"`
	Decisions int64   `json:"decisions"`
	Allowed   int64   `json:"allowed"`
	Denied    int64   `json:"denied"`
	PerSec    float64 `json:"decisions_per_s"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
	// CPU time per decision, µs: the server process's (for the library,
	// this process's, which decides), the load generator's (0 for the
	// library: it is in ServerCPU), and redis-server's.
	ServerCPUus float64 `json:"server_cpu_us"`
	ClientCPUus float64 `json:"client_cpu_us"`
	RedisCPUus  float64 `json:"redis_cpu_us"`
	// OthersCores is the CPU the rest of the machine (other engineers'
	// builds and tests) used during the run, in cores.
	OthersCores float64 `json:"others_cores"`
	Load1Start  float64 `json:"load1_start"`
	Load1End    float64 `json:"load1_end"`
	Error       string  `json:"error,omitempty"`
}

// counters are the CPU times read before and after a run.
type counters struct {
	server, self, redis, machine time.Duration
	at                           time.Time
}

func readCounters(ctx context.Context, p plan, e *env) (counters, error) {
	c := counters{self: selfCPU()}
	var err error
	if p.c.server != nil {
		if c.server, err = procCPU(p.c.server.pid()); err != nil {
			return c, err
		}
	}
	if p.c.redis {
		if c.redis, err = e.redis.cpu(ctx); err != nil {
			return c, err
		}
	}
	if c.machine, err = machineBusy(); err != nil {
		return c, err
	}
	c.at = time.Now()
	return c, nil
}

// The phases of a run.
const (
	warming int32 = iota
	measuring
	stopping
)

// measure runs p once.
func measure(ctx context.Context, o *options, e *env, round int, p plan) (result, error) {
	r := result{Round: round, Workload: p.workload, API: p.c.api, Conc: p.conc, Contender: p.c.name, Load1Start: loadAvg()}
	cl, err := p.c.client(p.limit)
	if err != nil {
		return r, err
	}
	defer cl.close()
	workers := make([]worker, p.conc)
	for i := range workers {
		if workers[i], err = cl.worker(i); err != nil {
			return r, err
		}
		if c, ok := workers[i].(io.Closer); ok {
			defer c.Close()
		}
	}

	var phase atomic.Int32
	type tally struct {
		lat             []time.Duration
		allowed, denied int64
		err             error
	}
	tallies := make([]tally, p.conc)
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			t := &tallies[i]
			t.lat = make([]time.Duration, 0, 1<<15)
			rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
			for {
				ph := phase.Load()
				if ph == stopping {
					return
				}
				k := rng.IntN(o.keys)
				start := time.Now()
				allowed, err := w.decide(ctx, k)
				took := time.Since(start)
				if err == nil && !allowed && !p.limit.denies {
					err = fmt.Errorf("key %s denied under a limit that should allow everything", keyName(k))
				}
				if err != nil {
					t.err = err
					return
				}
				if ph == measuring && phase.Load() == measuring {
					t.lat = append(t.lat, took)
					if allowed {
						t.allowed++
					} else {
						t.denied++
					}
				}
			}
		})
	}
	sleep(ctx, o.warmup)
	c0, err0 := readCounters(ctx, p, e)
	phase.Store(measuring)
	sleep(ctx, o.duration)
	phase.Store(stopping)
	c1, err1 := readCounters(ctx, p, e)
	wg.Wait()
	r.Load1End = loadAvg()
	if err := errors.Join(err0, err1, ctx.Err()); err != nil {
		return r, err
	}

	var all []time.Duration
	var errs []error
	for i := range tallies {
		t := &tallies[i]
		all = append(all, t.lat...)
		r.Allowed += t.allowed
		r.Denied += t.denied
		if t.err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", i, t.err))
		}
	}
	if len(errs) > 0 {
		r.Error = errors.Join(errs...).Error()
	}
	r.Decisions = r.Allowed + r.Denied
	r.Seconds = c1.at.Sub(c0.at).Seconds()
	if r.Decisions == 0 {
		if r.Error == "" {
			r.Error = "no decision was measured"
		}
		return r, nil
	}
	slices.Sort(all)
	pct := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))]) / 1e3
	}
	r.PerSec = float64(r.Decisions) / r.Seconds
	r.P50us, r.P90us, r.P99us, r.P999us = pct(0.50), pct(0.90), pct(0.99), pct(0.999)
	r.MaxUs = float64(all[len(all)-1]) / 1e3
	per := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(r.Decisions) }
	if p.c.server != nil {
		r.ServerCPUus = per(c1.server - c0.server)
		r.ClientCPUus = per(c1.self - c0.self)
	} else {
		r.ServerCPUus = per(c1.self - c0.self)
	}
	r.RedisCPUus = per(c1.redis - c0.redis)
	ours := (c1.server - c0.server) + (c1.self - c0.self) + (c1.redis - c0.redis)
	r.OthersCores = max(0, (c1.machine-c0.machine-ours).Seconds()/r.Seconds)
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	raw, err := os.Create(filepath.Join(o.out, "raw.jsonl"))
	if err != nil {
		return err
	}
	defer raw.Close()

	e, err := startEnv(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.stop()) }()
	cs := contenders(o, e)
	ps := roundPlan(o, cs)
	if len(ps) == 0 {
		return errors.New("--only matches no run")
	}
	fmt.Fprintf(stdout, "servers: sluice-memory pid %d, sluice-redis pid %d, gubernator pid %d, redis-server pid %d at %s\n",
		e.sluiceMem.pid(), e.sluiceR.pid(), e.guber.pid(), e.redis.pid(), e.redis.addr)
	if e.bare != nil {
		fmt.Fprintf(stdout, "bare pid %d\n", e.bare.pid())
	}
	fmt.Fprintf(stdout, "%d runs per round, %d rounds, %v + %v warm-up each\n", len(ps), o.rounds, o.duration, o.warmup)

	var results []result
	failed := 0
	enc := json.NewEncoder(raw)
	for round := 1; round <= o.rounds; round++ {
		order := slices.Clone(ps)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, p := range order {
			r, err := measure(ctx, o, e, round, p)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, p.name(), err)
			}
			if err := enc.Encode(r); err != nil {
				return err
			}
			if r.Error != "" {
				failed++
			}
			results = append(results, r)
			fmt.Fprintf(stdout, "round %d %-38s %9.0f/s p50 %7.0fµs p99 %7.0fµs cpu/dec server %5.1fµs client %5.1fµs redis %5.1fµs denied %4.1f%% others %.2f cores load %.1f%s\n",
				round, p.name(), r.PerSec, r.P50us, r.P99us, r.ServerCPUus, r.ClientCPUus, r.RedisCPUus,
				100*float64(r.Denied)/float64(max(1, r.Decisions)), r.OthersCores, r.Load1End, errSuffix(r.Error))
		}
		if o.between != "" {
			if err := runBetween(ctx, o, round); err != nil {
				return err
			}
		}
	}
	table := report(results)
	if err := os.WriteFile(filepath.Join(o.out, "table.md"), []byte(table), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, "\n", table)
	if failed > 0 {
		return fmt.Errorf("%d runs had errors; see %s", failed, raw.Name())
	}
	return nil
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return " ERROR: " + s
}

// runBetween runs the --between command, its output appended to
// OUT/between.txt.
func runBetween(ctx context.Context, o *options, round int) error {
	f, err := os.OpenFile(filepath.Join(o.out, "between.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "# round %d, load %.1f: %s\n", round, loadAvg(), o.between)
	cmd := exec.CommandContext(ctx, "sh", "-c", o.between)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("after round %d: %s: %w", round, o.between, err)
	}
	return nil
}
