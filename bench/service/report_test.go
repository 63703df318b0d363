package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestReportTargets checks the tables of the targets on results made up
// so that each target is met in one row and missed in another.
func TestReportTargets(t *testing.T) {
	var rs []result
	for round := 1; round <= 2; round++ {
		add := func(workload, api string, conc int, contender string, perSec, p99, server float64) {
			rs = append(rs, result{Round: round, Workload: workload, API: api, Conc: conc, Contender: contender,
				Decisions: 1000, Allowed: 1000, PerSec: perSec, P50us: p99 / 4, P99us: p99, ServerCPUus: server, RedisCPUus: 10})
		}
		add("allowed", "grpc", 64, "bare", 30000, 5000, 12)
		add("allowed", "grpc", 64, "sluice-memory", 25000, 6000, 19)
		add("allowed", "http", 64, "bare", 30000, 5000, 14)
		add("allowed", "http", 64, "sluice-memory", 25000, 6000, 26)
		add("allowed-window", "grpc", 16, "sluice-redis", 30000, 2000, 30)
		add("allowed-window", "grpc", 16, "ratelimit", 10000, 3000, 60)
		add("allowed-window", "grpc", 64, "sluice-redis", 30000, 2000, 30)
		add("allowed-window", "grpc", 64, "ratelimit", 15000, 3000, 60)
		flood := func(workload, api string, conc int, contender string, perSec, p99, per1k float64) {
			r := result{Round: round, Workload: workload, API: api, Conc: conc, Contender: contender,
				ServerCPUus: 5, RedisCPUus: 1, RedisPer1k: per1k}
			if conc > 0 {
				r.Decisions, r.Denied, r.Allowed, r.PerSec, r.P50us, r.P99us = 100000, 99990, 10, perSec, p99/4, p99
			}
			if workload != "flood-alone" {
				r.CalmDecisions, r.CalmPerSec, r.CalmP99us = 1000, 100, 900
			}
			r.RedisCommands = map[string]int64{"evalsha": int64(per1k * float64(r.Decisions+r.CalmDecisions) / 1000)}
			rs = append(rs, r)
		}
		for _, w := range []string{"flood", "flood-alone"} {
			flood(w, "http", 64, "sluice-redis", 50000, 4000, 0.5)
			flood(w, "grpc", 64, "sluice-redis", 40000, 6000, 0.5)
			flood(w, "grpc", 64, "ratelimit-cache", 20000, 5000, 2)
		}
		flood("flood", "grpc", 64, "bare", 30000, 4000, 0)
		flood("calm", "http", 0, "sluice-redis", 0, 0, 30)
	}
	got := report(rs)
	testkit.WantAll(t, "report", got,
		// Sluice above the floor: 19-12 and 26-14.
		"| 64 | grpc | 19.0 µs | 12.0 µs | 7.0 µs | 0.83× | ≤ 20.0 µs | met |",
		"| 64 | http | 26.0 µs | 14.0 µs | 12.0 µs | 0.83× | ≤ 25.0 µs | missed |",
		// envoyproxy/ratelimit, allowed: 3× met, 2× missed.
		"| 16 | 30.0k | 10.0k | 3.00× | 2.00 ms | 3.00 ms | 0.67× | 30.0 µs + 10.0 µs | 60.0 µs + 10.0 µs | met |",
		"| 64 | 30.0k | 15.0k | 2.00× | 2.00 ms | 3.00 ms | 0.67× | 30.0 µs + 10.0 µs | 60.0 µs + 10.0 µs | missed |",
		// The flood: HTTP 2.5× at a lower p99, gRPC 2× at a higher p99.
		"| 64 | http | sluice-redis | 50.0k | 1.00 ms | 4.00 ms | 100 | 900 µs | 900 µs | 0.50 | evalsha 0.5 | 5.0 µs | 1.0 µs |",
		"| 64 | grpc | ratelimit-cache | 20.0k | 1.25 ms | 5.00 ms | 100 | 900 µs | – | 2.00 | evalsha 2.0 | 5.0 µs | 1.0 µs |",
		"| 64 | http | 2.50× | 0.80× | 1.00× | met |",
		"| 64 | grpc | 2.00× | 1.20× | 1.00× | missed |",
		// The floor against ratelimit-cache: 30k/20k.
		"| 64 | grpc (bare, the floor) | 1.50× | 0.80× | – | – |",
	)
	if strings.Contains(got, "| flood | 64 |") || strings.Contains(got, "| flood-alone |") || strings.Contains(got, "| calm |") {
		t.Errorf("the flood runs are in the main table:\n%s", got)
	}
}

// TestRoundPlan checks which contenders run which workload, and the
// workers of the flood workloads.
func TestRoundPlan(t *testing.T) {
	o, err := parseFlags([]string{"--sluice", "s", "--gubernatord", "g", "--out", "o", "--conc", "64", "--mixed-conc", ""})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{rl: &server{}, rlCache: &server{}}
	var got []string
	for _, p := range roundPlan(o, contenders(o, e)) {
		got = append(got, fmt.Sprintf("%s calm=%d keys=%d", p.name(), p.calm, p.keys))
	}
	want := []string{
		"allowed/http/c64/sluice-memory calm=0 keys=10000",
		"allowed/http/c64/gubernator calm=0 keys=10000",
		"allowed/grpc/c64/sluice-memory calm=0 keys=10000",
		"allowed/grpc/c64/gubernator calm=0 keys=10000",
		"allowed/http/c64/sluice-redis calm=0 keys=10000",
		"allowed/grpc/c64/sluice-redis calm=0 keys=10000",
		"allowed/library/c64/redisstore calm=0 keys=10000",
		"allowed-window/grpc/c64/sluice-redis calm=0 keys=10000",
		"allowed-window/grpc/c64/ratelimit calm=0 keys=10000",
		"flood/http/c64/sluice-redis calm=8 keys=1001",
		"flood/grpc/c64/sluice-redis calm=8 keys=1001",
		"flood/grpc/c64/ratelimit-cache calm=8 keys=1001",
		"flood-alone/http/c64/sluice-redis calm=0 keys=1001",
		"flood-alone/grpc/c64/sluice-redis calm=0 keys=1001",
		"flood-alone/grpc/c64/ratelimit-cache calm=0 keys=1001",
		"calm/http/c0/sluice-redis calm=8 keys=1001",
		"calm/grpc/c0/sluice-redis calm=8 keys=1001",
		"calm/grpc/c0/ratelimit-cache calm=8 keys=1001",
	}
	if !slices.Equal(got, want) {
		t.Errorf("roundPlan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
