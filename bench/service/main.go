// Command service benchmarks the Sluice service, `sluice serve`, from a
// load generator in another process: decisions per second, p50 and p99
// latency and CPU time per decision of POST /v1/check and of Envoy's
// ShouldRateLimit (gRPC), with the memory store and with a private Redis,
// side by side with gubernator v2.13.0 (gubernatord, in its own process)
// on the same workload, with Sluice's Redis store called as a library
// from this process, and with bared, a server that decides nothing over
// the same net/http and grpc-go servers (the transport's floor). On Redis,
// through Envoy's gRPC API, it sets Sluice beside envoyproxy/ratelimit
// (its own process on the same redis-server, configured by environment
// variables and the same Envoy domain files): every decision allowed
// (allowed-window), and a flood of one refused key with well-behaved keys
// beside it against envoyproxy/ratelimit with its local cache (flood,
// flood-alone, calm), counting Redis's commands (INFO commandstats).
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
//	service --sluice BIN --gubernatord BIN [--bared BIN] [--ratelimit BIN] --out DIR [--rounds 3] [--duration 10s] ...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
	ratelimit                  string
	redis                      string
	out                        string
	rounds                     int
	duration, warmup           time.Duration
	conc, mixedConc            []int
	floodConc                  []int
	floodCalm, floodKeys       int
	calmPause                  time.Duration
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
	fs.StringVar(&o.ratelimit, "ratelimit", "", "the envoyproxy/ratelimit binary (built in ./service/ratelimitd); empty to leave it, and the flood and allowed-window workloads, out")
	fs.StringVar(&o.redis, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.out, "out", "", "the directory for raw results, logs and the table")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up of each run, not measured")
	conc := fs.String("conc", "16,64", "concurrency levels (workers) of the allowed workload")
	mixed := fs.String("mixed-conc", "64", "concurrency levels of the mixed (about half denied) workload; empty for none")
	flood := fs.String("flood-conc", "64", "concurrency levels (flood workers) of the flood workload (one key refused, on Redis; needs --ratelimit); empty for none")
	fs.IntVar(&o.floodCalm, "flood-calm", 8, "well-behaved workers beside the flood workers of the flood workload; 0 for none")
	fs.IntVar(&o.floodKeys, "flood-keys", 1000, "well-behaved keys of the flood workload")
	fs.DurationVar(&o.calmPause, "calm-pause", 2*time.Millisecond, "the pause of a well-behaved worker after each of its decisions")
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
	if o.floodConc, err = parseInts(*flood); err != nil {
		return nil, fmt.Errorf("--flood-conc: %w", err)
	}
	if o.only, err = regexp.Compile(*only); err != nil {
		return nil, fmt.Errorf("--only: %w", err)
	}
	if o.rounds < 1 || o.keys < 1 || o.floodKeys < 1 || o.grpcConns < 1 || o.duration <= 0 || o.warmup < 0 || o.floodCalm < 0 || o.calmPause < 0 {
		return nil, errors.New("--rounds, --keys, --flood-keys and --grpc-conns must be at least 1, --duration positive, --warmup, --flood-calm and --calm-pause not negative")
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

// sluiceConfig is the configuration of both sluice serve: the workloads'
// limits for /v1/check and the same as Envoy domains (those of the
// comparison with envoyproxy/ratelimit as its own configuration files
// are), and the store.
func sluiceConfig(store string) string {
	limit := func(l limitSpec) string {
		return fmt.Sprintf("  %s:\n    algorithm: token_bucket\n    limit: %d\n    period: 1s\n    burst: %d\n", l.name, l.limit, l.burst)
	}
	window := func(name string, limit int64, period string) string {
		return fmt.Sprintf("  %s:\n    algorithm: fixed_window\n    limit: %d\n    period: %s\n", name, limit, period)
	}
	domain := func(l limitSpec) string {
		return fmt.Sprintf("  - domain: %s\n    descriptors:\n      - key: user\n        rate_limit: {unit: second, requests_per_unit: %d, algorithm: token_bucket, burst: %d}\n", l.name, l.limit, l.burst)
	}
	cfg := "listen:\n  http: 127.0.0.1:0\n  grpc: 127.0.0.1:0\n" + store +
		"limits:\n" + limit(allowedLimit) + limit(mixedLimit) +
		window(floodLimit.name, floodLimit.limit, "1s") + window(floodLimit.flood, floodPerMinute, "1m") +
		"envoy:\n" + domain(allowedLimit) + domain(mixedLimit)
	for _, d := range envoyDomains() {
		cfg += asListItem(d.yaml, "  ")
	}
	return cfg
}

// ratelimitCacheBytes is envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES
// in the flood workload: 100 MiB.
const ratelimitCacheBytes = 100 << 20

// env is the running servers.
type env struct {
	redis              *redisServer
	sluiceMem, sluiceR *server
	guber              *server
	bare               *server // nil without --bared
	// rl is envoyproxy/ratelimit with its defaults, rlCache with its local
	// cache of over-limit keys; both nil without --ratelimit.
	rl, rlCache *server
}

func (e *env) stop() error {
	var errs []error
	for _, s := range []*server{e.sluiceMem, e.sluiceR, e.guber, e.bare, e.rl, e.rlCache} {
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
	if o.ratelimit != "" {
		if e.rl, err = startRatelimit("ratelimit", o.out, o.ratelimit, e.redis.addr, 0); err != nil {
			return nil, err
		}
		if e.rlCache, err = startRatelimit("ratelimit-cache", o.out, o.ratelimit, e.redis.addr, ratelimitCacheBytes); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// contender is one server and API under load.
type contender struct {
	name   string  // sluice-memory, gubernator, sluice-redis, redisstore, bare, ratelimit, ratelimit-cache
	api    string  // http, grpc, library
	server *server // nil for the library
	redis  bool    // whether the decisions go to Redis
	client func(l limitSpec, keys int) (client, error)
}

func contenders(o *options, e *env) []contender {
	httpTo := func(s *server) func(limitSpec, int) (client, error) {
		return func(l limitSpec, keys int) (client, error) { return sluiceHTTP(s.ready.HTTP, keys, l), nil }
	}
	envoyTo := func(s *server) func(limitSpec, int) (client, error) {
		return func(l limitSpec, keys int) (client, error) { return newEnvoyClient(s.ready.GRPC, o.grpcConns, keys, l) }
	}
	var cs []contender
	if e.bare != nil {
		cs = append(cs, contender{"bare", "http", e.bare, false, httpTo(e.bare)},
			contender{"bare", "grpc", e.bare, false, envoyTo(e.bare)})
	}
	cs = append(cs, []contender{
		{"sluice-memory", "http", e.sluiceMem, false, httpTo(e.sluiceMem)},
		{"gubernator", "http", e.guber, false, func(l limitSpec, keys int) (client, error) {
			return gubernatorHTTP(e.guber.ready.HTTP, keys, l), nil
		}},
		{"sluice-memory", "grpc", e.sluiceMem, false, envoyTo(e.sluiceMem)},
		{"gubernator", "grpc", e.guber, false, func(l limitSpec, keys int) (client, error) {
			return newGuberClient(e.guber.ready.GRPC, o.grpcConns, keys, l)
		}},
		{"sluice-redis", "http", e.sluiceR, true, httpTo(e.sluiceR)},
		{"sluice-redis", "grpc", e.sluiceR, true, envoyTo(e.sluiceR)},
		{"redisstore", "library", nil, true, func(l limitSpec, keys int) (client, error) {
			return newLibClient(e.redis.addr, keys, l)
		}},
	}...)
	if e.rl != nil {
		cs = append(cs, contender{"ratelimit", "grpc", e.rl, true, envoyTo(e.rl)},
			contender{"ratelimit-cache", "grpc", e.rlCache, true, envoyTo(e.rlCache)})
	}
	return cs
}

// plan is one run: a contender under a workload at a concurrency.
type plan struct {
	workload string
	limit    limitSpec
	conc     int // workers; in the flood workload, the flood's
	calm     int // well-behaved workers beside the flood's (flood workload)
	keys     int // keys the workers draw from; in the flood workload key 0 is the flood's
	c        contender
}

func (p plan) name() string {
	return fmt.Sprintf("%s/%s/c%d/%s", p.workload, p.c.api, p.conc, p.c.name)
}

// The workloads and the contenders that run each.
var workloads = []struct {
	name  string
	limit limitSpec
	keep  func(contender) bool
}{
	// allowed: every contender but envoyproxy/ratelimit, which cannot
	// express a token bucket (it runs allowed-window).
	{"allowed", allowedLimit, func(c contender) bool { return !strings.HasPrefix(c.name, "ratelimit") }},
	// mixed: the memory store and gubernator.
	{"mixed", mixedLimit, func(c contender) bool { return !c.redis && c.name != "bare" }},
	// allowed-window: Sluice on Redis against envoyproxy/ratelimit (its
	// defaults) through Envoy's gRPC API, on the same configuration file.
	{"allowed-window", windowLimit, func(c contender) bool {
		return c.api == "grpc" && (c.name == "sluice-redis" || c.name == "ratelimit")
	}},
	// flood: Sluice on Redis over both APIs against envoyproxy/ratelimit
	// with its local cache: the flood with well-behaved keys beside it,
	// the flood alone (what Redis does for it) and the well-behaved keys
	// alone (their latency without the flood).
	{"flood", floodLimit, func(c contender) bool { return floodContender(c) || c.name == "bare" }},
	{"flood-alone", floodLimit, floodContender},
	{"calm", floodLimit, floodContender},
}

// floodContender picks Sluice on Redis and envoyproxy/ratelimit with its
// local cache for the flood workloads; the flood beside the well-behaved
// keys runs on bare too, the floor: a server that decides nothing over the
// same stack, the most decisions/s any server on it can reach against the
// same load generator on these cores.
func floodContender(c contender) bool {
	return c.name == "sluice-redis" && c.api != "library" || c.name == "ratelimit-cache"
}

// roundPlan returns the runs of one round in their order.
func roundPlan(o *options, cs []contender) []plan {
	var ps []plan
	withRatelimit := slices.ContainsFunc(cs, func(c contender) bool { return c.name == "ratelimit" })
	for _, w := range workloads {
		concs, calm, keys := o.conc, 0, o.keys
		switch w.name {
		case "mixed":
			concs = o.mixedConc
		case "allowed-window":
			if !withRatelimit {
				continue
			}
		case "flood", "flood-alone", "calm":
			if !withRatelimit || len(o.floodConc) == 0 {
				continue
			}
			concs, calm, keys = o.floodConc, o.floodCalm, 1+o.floodKeys
			switch {
			case w.name == "flood-alone":
				calm = 0
			case w.name == "calm" && calm == 0:
				continue
			case w.name == "calm":
				concs = []int{0}
			}
		}
		for _, n := range concs {
			for _, c := range cs {
				p := plan{w.name, w.limit, n, calm, keys, c}
				if w.keep(c) && o.only.MatchString(p.name()) {
					ps = append(ps, p)
				}
			}
		}
	}
	return ps
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
	if e.rl != nil {
		fmt.Fprintf(stdout, "ratelimit pid %d, ratelimit-cache pid %d\n", e.rl.pid(), e.rlCache.pid())
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
			fmt.Fprintf(stdout, "round %d %-44s %9.0f/s p50 %7.0fµs p99 %7.0fµs cpu/dec server %5.1fµs client %5.1fµs redis %5.1fµs denied %4.1f%% others %.2f cores load %.1f%s%s\n",
				round, p.name(), r.PerSec, r.P50us, r.P99us, r.ServerCPUus, r.ClientCPUus, r.RedisCPUus,
				100*float64(r.Denied)/float64(max(1, r.Decisions)), r.OthersCores, r.Load1End, floodSuffix(r), errSuffix(r.Error))
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

// floodSuffix returns what the console line of a run adds for the flood
// workload's well-behaved keys and for Redis's commands.
func floodSuffix(r result) string {
	s := ""
	if r.CalmDecisions > 0 {
		s += fmt.Sprintf(" well-behaved %.0f/s p99 %.0fµs", r.CalmPerSec, r.CalmP99us)
	}
	if r.RedisCommands != nil {
		s += fmt.Sprintf(" redis commands/1k %.1f", r.RedisPer1k)
	}
	return s
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
