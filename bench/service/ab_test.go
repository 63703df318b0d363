package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSluiceRedisAB compares builds of sluice on Redis, each in its own
// `sluice serve` on one private redis-server, in alternating runs of the
// allowed-window workload over Envoy's gRPC API (the workload on which
// docs/BENCHMARKS.md compares Sluice with envoyproxy/ratelimit), without
// the other servers of a full run. It
// runs only when SLUICE_AB lists the sluice binaries (the same binary twice
// with different SLUICE_AB_ENV<i> compares settings):
//
//	SLUICE_AB="/tmp/a /tmp/b" SLUICE_AB_ROUNDS=3 SLUICE_AB_DURATION=4s SLUICE_AB_CONC=16,64 \
//	  go test ./service -run SluiceRedisAB -v
//
// SLUICE_AB_ENV<i> is "NAME=value ..." set for binary i (counted from 0).
// Each line gives decisions/s, p50 and p99 (µs), CPU per decision (µs) of
// the server, the load generator and Redis, Redis's commands per 1,000
// decisions, the decisions per script call, and the cores the rest of the
// machine used.
func TestSluiceRedisAB(t *testing.T) {
	bins := strings.Fields(os.Getenv("SLUICE_AB"))
	if len(bins) == 0 {
		t.Skip("set SLUICE_AB to the sluice binaries to compare")
	}
	rounds, err := strconv.Atoi(cmp.Or(os.Getenv("SLUICE_AB_ROUNDS"), "3"))
	if err != nil {
		t.Fatalf("SLUICE_AB_ROUNDS: %v", err)
	}
	dur, err := time.ParseDuration(cmp.Or(os.Getenv("SLUICE_AB_DURATION"), "4s"))
	if err != nil {
		t.Fatalf("SLUICE_AB_DURATION: %v", err)
	}
	concs, err := parseInts(cmp.Or(os.Getenv("SLUICE_AB_CONC"), "16,64"))
	if err != nil {
		t.Fatalf("SLUICE_AB_CONC: %v", err)
	}
	dir := t.TempDir()
	o := &options{duration: dur, warmup: time.Second, keys: 10_000, grpcConns: 4}
	rs, err := startRedis("redis-server", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.stop() })
	servers := make([]*server, len(bins))
	for i, bin := range bins {
		store := fmt.Sprintf("store:\n  backend: redis\n  redis:\n    addrs: [%s]\n    prefix: \"sluice%d:\"\n  timeout: %v\n  on_error: deny\n", rs.addr, i, redisTimeout)
		cfg := filepath.Join(dir, fmt.Sprintf("sluice%d.yaml", i))
		if err := os.WriteFile(cfg, []byte(sluiceConfig(store)), 0o644); err != nil {
			t.Fatal(err)
		}
		var env []string
		if extra := strings.Fields(os.Getenv(fmt.Sprintf("SLUICE_AB_ENV%d", i))); len(extra) > 0 {
			env = append(os.Environ(), extra...)
		}
		s, err := startServerWith(fmt.Sprintf("sluice%d", i), dir, env, bin, "serve", "--config", cfg)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = s
		t.Cleanup(func() { s.stop() })
	}
	e := &env{redis: rs}
	for round := 1; round <= rounds; round++ {
		for _, conc := range concs {
			for i, s := range servers {
				c := contender{"sluice-redis", "grpc", s, true, func(l limitSpec, keys int) (client, error) {
					return newEnvoyClient(s.ready.GRPC, o.grpcConns, keys, l)
				}}
				r, err := measure(context.Background(), o, e, round, plan{workload: "allowed-window", limit: windowLimit, conc: conc, keys: o.keys, c: c})
				if err != nil {
					t.Fatal(err)
				}
				if r.Error != "" {
					t.Errorf("round %d, binary %d, %d connections: %s", round, i, conc, r.Error)
				}
				t.Logf("round %d binary %d c%-3d %7.0f/s p50 %6.0f p99 %6.0f cpu/decision server %5.1f load generator %5.1f redis %5.1f; redis commands per 1k %6.1f, decisions per script call %5.2f; others %.2f cores",
					round, i, conc, r.PerSec, r.P50us, r.P99us, r.ServerCPUus, r.ClientCPUus, r.RedisCPUus, r.RedisPer1k,
					float64(r.Decisions)/float64(max(1, r.RedisCommands["evalsha"])), r.OthersCores)
			}
		}
	}
}
