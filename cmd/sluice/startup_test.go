package main

import (
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/plans"
	"github.com/sluicehq/sluice/redisstore"
)

// startupCase is one error that a store or a server of sluice serve returns
// at start-up for a setting of the configuration.
type startupCase struct {
	name string
	// component makes the store or server with the setting directly, as
	// serve would if nothing checked the file first; it must fail. Nil for
	// the server's own checks, which no parsed configuration can reach.
	component func(t *testing.T) error
	// yaml is a configuration with the setting; want is the problem that
	// validate must report for it, "LINE: PATH: MESSAGE" (the start of it).
	yaml, want string
}

// redisYAML is a configuration of the Redis store whose redis section
// holds extra, and whose store section holds store.
func redisYAML(store, extra string) string {
	return "store:\n  backend: redis\n" + store + "  redis:\n    addrs: [\"127.0.0.1:1\"]\n" + extra +
		"limits:\n  api: {algorithm: token_bucket, limit: 10, period: 1s}\n"
}

// ruleYAML is a configuration whose one proxy rule lists limits.
func ruleYAML(limits, extra string) string {
	return "limits:\n  api: {algorithm: token_bucket, limit: 10, period: 1s}\n  dry: {algorithm: token_bucket, limit: 10, period: 1s, shadow: true}\n" +
		extra + "proxy:\n  rules:\n    - limits: " + limits + "\n"
}

var (
	tb10 = sluice.TokenBucket(10, time.Second, 0)
	ip   = httplimit.KeyFunc(func(*http.Request) (string, bool) { return "k", true })
)

func middleware(limits []httplimit.Limit, opts *httplimit.Options) error {
	_, err := httplimit.New(memstore.New(memstore.Options{}), limits, opts)
	return err
}

// startupCases walks every error that the stores and servers of sluice
// serve can return at start-up because of the configuration:
// redisstore.New and redisstore.ParseFailurePolicy (openStore), and
// server.New with what it builds: httplimit.New for each rule and plan,
// plans.NewSet, plans.OpenFile and the plan tables. memstore.New and
// rls.New return no error; the listeners' errors (a port in use, an
// address not on this machine) depend on the machine at the time of the
// start, not on the file, and are not in the list. Errors for settings
// that sluice serve never makes (a nil store, FailLocal without
// Options.Local, a negative ErrorRetryAfter) are not either.
func startupCases(dir string) []startupCase {
	addrs := []string{"127.0.0.1:1"}
	return []startupCase{
		{"prefix with a brace", func(*testing.T) error {
			_, err := redisstore.New(redisstore.Options{Addrs: addrs, Prefix: "app{1}:"})
			return err
		}, redisYAML("", "    prefix: \"app{1}:\"\n"), `5: store.redis.prefix: "app{1}:" must not contain '{' or '}'`},
		{"prefix with a closing brace", func(*testing.T) error {
			_, err := redisstore.New(redisstore.Options{Addrs: addrs, Prefix: "app}"})
			return err
		}, redisYAML("", "    prefix: \"app}\"\n"), `5: store.redis.prefix: "app}" must not contain`},
		{"negative timeout", func(*testing.T) error {
			_, err := redisstore.New(redisstore.Options{Addrs: addrs, Timeout: -time.Second})
			return err
		}, redisYAML("  timeout: -1s\n", ""), "3: store.timeout: must be positive"},
		{"negative max_batch", func(*testing.T) error {
			_, err := redisstore.New(redisstore.Options{Addrs: addrs, MaxBatch: -1})
			return err
		}, redisYAML("", "    max_batch: -1\n"), "5: store.redis.max_batch: must be from 1 to 1024"},
		{"no Redis address", func(*testing.T) error {
			_, err := redisstore.New(redisstore.Options{})
			return err
		}, "store:\n  backend: redis\n  redis:\n    addrs: []\n", "4: store.redis.addrs: must list at least one address"},
		{"unknown failure policy", func(*testing.T) error {
			_, err := redisstore.ParseFailurePolicy("fail")
			return err
		}, redisYAML("  on_error: fail\n", ""), `3: store.on_error: unknown failure policy "fail"`},
		{"limit name not ASCII", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10.Named("é"), Key: ip}}, nil)
		}, "limits:\n  é: {algorithm: token_bucket, limit: 10, period: 1s}\n", `2: limits["é"]: a limit name must be`},
		{"a limit twice in a rule", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10.Named("api"), Key: ip}, {Policy: tb10.Named("api"), Key: ip}}, nil)
		}, ruleYAML("[{limit: api, key: ip}, {limit: api, key: \"header:X-User\"}]", ""), `6: proxy.rules[0].limits[1].limit: limit "api" is already charged`},
		{"a limit of the rule and of its plan", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10.Named("api"), Key: ip}, {Policy: tb10.Named("api"), Key: ip}}, nil)
		}, ruleYAML("[{limit: api, key: ip}]\n      plan: {key: ip, from: \"header:X-Plan\", default: free}", "plans:\n  free: [{limit: api}]\n"),
			`8: proxy.rules[0].limits[0].limit: limit "api" is also a limit of plan "free"`},
		{"negative cost", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10, Key: ip, Cost: -1}}, nil)
		}, ruleYAML("[{limit: api, key: ip, cost: -1}]", ""), "6: proxy.rules[0].limits[0].cost: must be"},
		{"cost over the capacity", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10, Key: ip, Cost: 11}}, nil)
		}, ruleYAML("[{limit: api, key: ip, cost: 11}]", ""), `6: proxy.rules[0].limits[0].cost: 11 exceeds the capacity of limit "api"`},
		{"charge_on on a dry run", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10, Key: ip, Shadow: true, ChargeOn: func(int) bool { return true }}}, nil)
		}, ruleYAML("[{limit: dry, key: ip, charge_on: [200]}]", ""), `6: proxy.rules[0].limits[0].charge_on: limit "dry" is a dry run`},
		{"trusted proxy not a prefix", func(*testing.T) error {
			return middleware([]httplimit.Limit{{Policy: tb10, Key: ip}}, &httplimit.Options{ClientIP: &httplimit.ClientIP{TrustedProxies: []netip.Prefix{{}}}})
		}, "limits:\n  api: {algorithm: token_bucket, limit: 10, period: 1s}\nproxy:\n  trusted_proxies: [\"10.0.0.0/33\"]\n  rules:\n    - limits: [{limit: api, key: ip}]\n",
			`4: proxy.trusted_proxies[0]: "10.0.0.0/33" is not an IP address`},
		{"unknown default plan", func(*testing.T) error {
			_, err := plans.NewSet("gold", plans.Plan{Name: "free", Policies: []sluice.Policy{tb10.Named("api")}})
			return err
		}, ruleYAML("[{limit: api, key: ip}]\n      plan: {key: ip, from: \"header:X-Plan\", default: gold}", "plans:\n  free: [{limit: dry}]\n"),
			`9: proxy.rules[0].plan.default: no plan named "gold"`},
		{"plan table file missing", func(*testing.T) error {
			_, err := plans.OpenFile(filepath.Join(dir, "missing.csv"), plans.FileOptions{Plans: []string{"free"}})
			return err
		}, "limits:\n  api: {algorithm: token_bucket, limit: 10, period: 1s}\nplans:\n  free: [{limit: api}]\nplan_tables:\n  t: {file: missing.csv}\n",
			"6: plan_tables.t.file: cannot read "},
		{"plan table in Redis without Redis", func(t *testing.T) error {
			d := openDynamic(config.Store{Backend: config.MemoryBackend}, slog.New(slog.DiscardHandler))
			defer d.close()
			_, err := d.openTable(config.PlanTable{Name: "t", RedisHash: "plans"}, []string{"free"})
			return err
		}, "limits:\n  api: {algorithm: token_bucket, limit: 10, period: 1s}\nplans:\n  free: [{limit: api}]\nplan_tables:\n  t: {redis_hash: plans}\n",
			"6: plan_tables.t.redis_hash: needs store.backend: redis"},
		{"rule names no limit", nil, ruleYAML("[{limit: nope, key: ip}]", ""), `6: proxy.rules[0].limits[0].limit: `},
		{"plan names no limit", nil, ruleYAML("[{limit: api, key: ip}]\n      plan: {key: ip, from: \"header:X-Plan\", default: free}", "plans:\n  free: [{limit: nope}]\n"),
			`5: plans.free[0].limit: `},
		{"plan of a rule names no table", nil, ruleYAML("[{limit: api, key: ip}]\n      plan: {key: ip, table: nope, default: free}", "plans:\n  free: [{limit: dry}]\n"),
			`9: proxy.rules[0].plan.table: no table named "nope"`},
	}
}

// TestValidateReportsStartupErrors proves, for every error that a store
// or a server returns at start-up because of a setting (startupCases),
// that the component does refuse the setting, that `sluice validate`
// reports it as FILE:LINE: PATH: MESSAGE, and that `sluice serve` refuses
// the file with the same line before it makes any store or server.
func TestValidateReportsStartupErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range startupCases(dir) {
		t.Run(tc.name, func(t *testing.T) {
			if tc.component != nil {
				if err := tc.component(t); err == nil {
					t.Fatalf("the component accepts the setting; the case tests nothing")
				} else {
					t.Logf("the component's own error: %v", err)
				}
			}
			path := filepath.Join(dir, "sluice.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			want := path + ":" + tc.want
			r := runSluice(t, nil, "validate", path)
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != 1 || !strings.HasPrefix(first, want) {
				t.Fatalf("validate: exit %d, first line %q; want 1 and %q...\nfile:\n%s", r.code, first, want, tc.yaml)
			}
			r = runSluice(t, nil, "serve", "--config", path, "--http", "127.0.0.1:0")
			first, _, _ = strings.Cut(r.stderr, "\n")
			if r.code != 1 || !strings.HasPrefix(first, want) || !strings.Contains(r.err.Error(), "the service did not start") {
				t.Errorf("serve: exit %d, error %v, first line %q; want 1 and %q...", r.code, r.err, first, want)
			}
		})
	}
}

// TestSplitRules checks which proxy rules are reported as never decidable
// on Redis Cluster: enforced limits (a plan's included) keyed by more than
// one key source; dry runs, which are decided apart, do not count.
func TestSplitRules(t *testing.T) {
	cfg, err := config.Parse("sluice.yaml", []byte(`limits:
  api: {algorithm: token_bucket, limit: 10, period: 1s}
  daily: {algorithm: fixed_window, limit: 1000, period: 1d}
  dry: {algorithm: token_bucket, limit: 10, period: 1s, shadow: true}
plans:
  free: [{limit: daily}]
proxy:
  rules:
    - name: one-key
      limits: [{limit: api, key: "header:X-User"}, {limit: daily, key: "header:X-User"}]
    - name: dry-apart
      limits: [{limit: api, key: ip}, {limit: dry, key: "header:X-User"}]
    - name: split
      limits: [{limit: api, key: ip}, {limit: daily, key: "header:X-User"}]
    - name: plan-split
      limits: [{limit: api, key: ip}]
      plan: {key: "header:X-User", from: "header:X-Plan", default: free}
`), formats)
	if err != nil {
		t.Fatal(err)
	}
	got := splitRules(cfg)
	if len(got) != 2 || !strings.HasPrefix(got[0], "sluice.yaml:13: proxy.rules[2]: its limits are keyed by ip and header:X-User") ||
		!strings.HasPrefix(got[1], "sluice.yaml:15: proxy.rules[3]: its limits are keyed by ip and header:X-User") {
		t.Errorf("splitRules =\n%s\nwant rules 2 and 3", strings.Join(got, "\n"))
	}
}
