package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// result is what one run measured; the raw output has one per line.
type result struct {
	Round     int     `json:"round"`
	Workload  string  `json:"workload"`
	API       string  `json:"api"`
	Conc      int     `json:"conc"`
	Contender string  `json:"contender"`
	Seconds   float64 `json:"seconds"`
	// Decisions, their rate and latencies: in the flood workload, those of
	// the flood key only.
	Decisions int64   `json:"decisions"`
	Allowed   int64   `json:"allowed"`
	Denied    int64   `json:"denied"`
	PerSec    float64 `json:"decisions_per_s"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
	// The well-behaved keys' decisions in the flood workload (every one
	// allowed), their rate and latencies.
	CalmDecisions int64   `json:"calm_decisions,omitempty"`
	CalmPerSec    float64 `json:"calm_decisions_per_s,omitempty"`
	CalmP50us     float64 `json:"calm_p50_us,omitempty"`
	CalmP99us     float64 `json:"calm_p99_us,omitempty"`
	// CPU time per decision (in the flood workload, per decision of the
	// flood key and of the well-behaved keys together), µs: the server
	// process's (for the library, this process's, which decides), the load
	// generator's (0 for the library: it is in ServerCPU), and
	// redis-server's.
	ServerCPUus float64 `json:"server_cpu_us"`
	ClientCPUus float64 `json:"client_cpu_us"`
	RedisCPUus  float64 `json:"redis_cpu_us"`
	// RedisCommands is what Redis ran during the run (INFO commandstats,
	// the harness's own INFO left out), by command; RedisPer1k is their
	// sum per 1,000 decisions (as the CPU times, all decisions).
	RedisCommands map[string]int64 `json:"redis_commands,omitempty"`
	RedisPer1k    float64          `json:"redis_commands_per_1k,omitempty"`
	// OthersCores is the CPU the rest of the machine (other engineers'
	// builds and tests) used during the run, in cores.
	OthersCores float64 `json:"others_cores"`
	Load1Start  float64 `json:"load1_start"`
	Load1End    float64 `json:"load1_end"`
	Error       string  `json:"error,omitempty"`
}

// counters are the CPU times and Redis command counts read before and
// after a run.
type counters struct {
	server, self, redis, machine time.Duration
	commands                     map[string]int64
	at                           time.Time
}

func readCounters(ctx context.Context, p plan, e *env) (counters, error) {
	c := counters{self: testkit.Process()}
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
		if c.commands, err = e.redis.commands(ctx); err != nil {
			return c, err
		}
	}
	if c.machine, err = machineBusy(); err != nil {
		return c, err
	}
	c.at = time.Now()
	return c, nil
}

// commandsBetween returns the commands Redis ran between c0 and c1, less
// the harness's own INFO, leaving out those it did not run.
func commandsBetween(c0, c1 map[string]int64) (map[string]int64, int64) {
	if c1 == nil {
		return nil, 0
	}
	d := map[string]int64{}
	var sum int64
	for name, n := range c1 {
		if n -= c0[name]; n > 0 && name != "info" {
			d[name] = n
			sum += n
		}
	}
	return d, sum
}

// The phases of a run.
const (
	warming int32 = iota
	measuring
	stopping
)

// tally is what one worker measured.
type tally struct {
	lat             []time.Duration
	allowed, denied int64
	err             error
}

// measure runs p once.
func measure(ctx context.Context, o *options, e *env, round int, p plan) (result, error) {
	r := result{Round: round, Workload: p.workload, API: p.c.api, Conc: p.conc, Contender: p.c.name, Load1Start: loadAvg()}
	cl, err := p.c.client(p.limit, p.keys)
	if err != nil {
		return r, err
	}
	defer cl.close()
	workers := make([]worker, p.conc+p.calm)
	for i := range workers {
		if workers[i], err = cl.worker(i); err != nil {
			return r, err
		}
		if c, ok := workers[i].(io.Closer); ok {
			defer c.Close()
		}
	}

	var phase atomic.Int32
	tallies := make([]tally, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() { drive(ctx, o, p, round, i, w, &phase, &tallies[i]) })
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
	r.Seconds = c1.at.Sub(c0.at).Seconds()
	summarize(&r, p, tallies, c0, c1)
	return r, nil
}

// drive is worker i's loop: one decision after the other until the phase
// is stopping, tallied while it is measuring. In the flood workload the
// first p.conc workers ask for the flood key (key 0) only, the others for
// the well-behaved keys, pausing o.calmPause after each decision.
func drive(ctx context.Context, o *options, p plan, round, i int, w worker, phase *atomic.Int32, t *tally) {
	t.lat = make([]time.Duration, 0, 1<<15)
	rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
	flooder := p.limit.flood != ""
	calm := flooder && i >= p.conc
	for {
		ph := phase.Load()
		if ph == stopping {
			return
		}
		var k int
		switch {
		case calm:
			k = 1 + rng.IntN(p.keys-1)
		case flooder:
			k = 0
		default:
			k = rng.IntN(p.keys)
		}
		start := time.Now()
		allowed, err := w.decide(ctx, k)
		took := time.Since(start)
		if err == nil && !allowed && !p.limit.mayDeny(k) {
			err = fmt.Errorf("key %d denied under a limit that should allow it", k)
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
		if calm && o.calmPause > 0 {
			sleep(ctx, o.calmPause)
		}
	}
}

// summarize fills r from the workers' tallies and the counters read
// before (c0) and after (c1) the measured time.
func summarize(r *result, p plan, tallies []tally, c0, c1 counters) {
	var all, calm []time.Duration
	var errs []error
	for i := range tallies {
		t := &tallies[i]
		if t.err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", i, t.err))
		}
		if i >= p.conc {
			calm = append(calm, t.lat...)
			r.CalmDecisions += t.allowed + t.denied
			continue
		}
		all = append(all, t.lat...)
		r.Allowed += t.allowed
		r.Denied += t.denied
	}
	if len(errs) > 0 {
		r.Error = errors.Join(errs...).Error()
	}
	r.Decisions = r.Allowed + r.Denied
	if r.Decisions == 0 && p.conc > 0 || r.CalmDecisions == 0 && p.calm > 0 {
		if r.Error == "" {
			r.Error = "no decision was measured"
		}
		return
	}
	if r.Decisions > 0 {
		r.PerSec = float64(r.Decisions) / r.Seconds
		r.P50us, r.P90us, r.P99us, r.P999us, r.MaxUs = percentiles(all)
	}
	if r.CalmDecisions > 0 {
		r.CalmPerSec = float64(r.CalmDecisions) / r.Seconds
		r.CalmP50us, _, r.CalmP99us, _, _ = percentiles(calm)
	}
	decisions := r.Decisions + r.CalmDecisions
	per := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(decisions) }
	if p.c.server != nil {
		r.ServerCPUus = per(c1.server - c0.server)
		r.ClientCPUus = per(c1.self - c0.self)
	} else {
		r.ServerCPUus = per(c1.self - c0.self)
	}
	r.RedisCPUus = per(c1.redis - c0.redis)
	var sum int64
	r.RedisCommands, sum = commandsBetween(c0.commands, c1.commands)
	if r.RedisCommands != nil {
		r.RedisPer1k = 1000 * float64(sum) / float64(decisions)
	}
	ours := (c1.server - c0.server) + (c1.self - c0.self) + (c1.redis - c0.redis)
	r.OthersCores = max(0, (c1.machine-c0.machine-ours).Seconds()/r.Seconds)
}

// percentiles returns the 50th, 90th, 99th and 99.9th percentiles and the
// maximum of lat, in µs; it sorts lat, which must not be empty.
func percentiles(lat []time.Duration) (p50, p90, p99, p999, maxUs float64) {
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / 1e3
	}
	return pct(0.50), pct(0.90), pct(0.99), pct(0.999), float64(lat[len(lat)-1]) / 1e3
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
