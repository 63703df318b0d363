package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/internal/testkit"
)

// replayLimits are the limits of the decision log tests. The token
// bucket refills a token every 20 ms, the fixed windows (one a dry run)
// turn every 50 ms and the sliding window's weights change with every
// µs of its 200 ms: with the decisions a few hundred µs apart, many
// outcomes hang on the exact time of their decision, and window edges
// fall between a decision's call and its dry run's. An hourly sliding
// window and an hourly dry run refuse some whatever the timing. A rule
// for forward-auth takes two of them. Envoy's descriptors have limits of
// a second and an hour, and one is in shadow mode.
const replayLimits = `limits:
  fast: {algorithm: token_bucket, limit: 5, period: 100ms}
  window: {algorithm: fixed_window, limit: 3, period: 50ms}
  slide: {algorithm: sliding_window, limit: 4, period: 200ms}
  hourly: {algorithm: sliding_window, limit: 8, period: 1h}
  dry: {algorithm: sliding_log, limit: 3, period: 1h, shadow: true}
  dryfast: {algorithm: fixed_window, limit: 2, period: 50ms, shadow: true}
proxy:
  rules:
    - name: login
      match: {path_prefix: /login}
      limits: [{limit: fast, key: ip}, {limit: hourly, key: "header:X-User"}]
envoy:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 4}
      - key: path
        algorithm: sliding_window
        rate_limits:
          - {unit: second, requests_per_unit: 6}
          - {unit: hour, requests_per_unit: 40}
      - key: dry
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1}
`

// replayDecisions is how many decisions driveDecisions sends.
const replayDecisions = 600

// driveDecisions sends a mix of decisions: single and multiple checks,
// dry runs, forward-auth and Envoy's, over a few keys, some refused.
func driveDecisions(t *testing.T, in *instance) {
	t.Helper()
	client := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc))
	for i := range replayDecisions {
		user := fmt.Sprintf("u%d", i%3)
		switch i % 7 {
		case 0:
			in.check(t, "fast", user)
		case 1:
			in.do(t, "POST", "/v1/check", fmt.Sprintf(`{"checks":[{"limit":"fast","key":%q},{"limit":"hourly","key":%q},{"limit":"dry","key":%q}]}`, user, user, user))
		case 2:
			req := fmt.Sprintf("/v1/forward-auth?rule=login&u=%d", i)
			code, _, _ := in.doHeader(t, "GET", req, "X-User", user)
			if code != 200 && code != 429 {
				t.Fatalf("forward-auth = %d", code)
			}
		case 3:
			in.check(t, "hourly", user)
		case 4:
			in.do(t, "POST", "/v1/check", fmt.Sprintf(`{"checks":[{"limit":"window","key":%q},{"limit":"slide","key":%q},{"limit":"dryfast","key":%q}]}`, user, user, user))
		case 5:
			in.do(t, "POST", "/v1/check", fmt.Sprintf(`{"checks":[{"limit":"slide","key":%q},{"limit":"dryfast","key":%q}]}`, user, user))
		case 6:
			if _, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
				descriptor("user", user), descriptor("path", "/a"), descriptor("dry", user),
			}}); err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
		}
	}
}

// replayOut runs sluice simulate --replay and returns its report.
func replayOut(t *testing.T, log, cfg string, more ...string) string {
	t.Helper()
	r := runOK(t, nil, append([]string{"simulate", "--replay", log, "--config", cfg}, more...)...)
	return r.stdout
}

// TestReplayReproducesDecisions writes a decision log on each store and
// replays it against the configuration that wrote it: every decision
// comes out the same. Against a tighter candidate, decisions change.
func TestReplayReproducesDecisions(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// On Redis the log has the TIME of each script call, the
			// time each limit was decided at.
			storeYAML, limits := "", replayLimits
			if store == "redis" {
				srv := testkit.StartRedis(t)
				storeYAML = fmt.Sprintf("store:\n  backend: redis\n  redis: {addrs: [%q]}\n  timeout: 2s\n", srv.Addr)
			}
			cfg := writeConfig(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
`+storeYAML+limits)
			log := filepath.Join(dir, "decisions.jsonl")
			in := startServe(t, "--config", cfg, "--decision-log", log)
			driveDecisions(t, in)
			if v := in.metric(t, `sluice_decision_log_lines_total{result="dropped"}`); v != "0" {
				t.Errorf("dropped lines = %q, want 0", v)
			}
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Count(string(b), "\n")
			if lines != replayDecisions || !strings.Contains(string(b), `"door":"forward_auth","rule":"login"`) || !strings.Contains(string(b), `"outcome":"denied"`) ||
				!strings.Contains(string(b), `"outcome":"shadow_denied"`) || !strings.Contains(string(b), `"door":"rls","rule":"edge"`) ||
				!strings.Contains(string(b), `{"limit":"envoy:edge.path#1","key":`) || !strings.Contains(string(b), `"mode":"shadow"`) {
				t.Fatalf("the log has %d lines, want %d with forward-auth, Envoy's, denials and dry-run denials:\n%s", lines, replayDecisions, b)
			}
			// A dry run decided by a call of its own has that call's
			// time and order (on the memory store, the decision's time
			// and a later order).
			if !strings.Contains(string(b), `"at":`) || store == "memory" && !strings.Contains(string(b), `"order":`) {
				t.Errorf("the log has no limits with times and orders of their own")
			}

			out := replayOut(t, log, cfg)
			if !strings.Contains(out, fmt.Sprintf("replayed %d of %[1]d decisions", replayDecisions)) || !strings.Contains(out, "changed: 0 (0 refused that were admitted, 0 admitted that were refused)") ||
				!strings.Contains(out, "limit envoy:edge.dry (shadow): 85 not replayed, taken as logged (Envoy shadow mode)") || !strings.Contains(out, "rls            edge           envoy:edge.path#1") {
				t.Errorf("replay against the same configuration:\n%s", out)
			}
			table, _, _ := strings.Cut(out, "keys most affected")
			for line := range strings.SplitSeq(table, "\n") {
				f := strings.Fields(line)
				if len(f) == 8 && f[0] != "door" && (f[4] != f[5] || f[6] != "0" || f[7] != "0") {
					t.Errorf("replay changed a limit's refusals: %s", line)
				}
			}

			tighter := writeConfig(t, filepath.Join(dir, "tighter.yaml"), `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
`+strings.NewReplacer("limit: 8, period: 1h", "limit: 4, period: 1h", "{unit: hour, requests_per_unit: 40}", "{unit: hour, requests_per_unit: 3}").Replace(limits))
			out = replayOut(t, log, tighter, "--chart", filepath.Join(dir, "replay.svg"))
			if strings.Contains(out, "changed: 0 ") || !strings.Contains(out, "keys most affected") {
				t.Errorf("replay against a tighter hourly limit changes nothing:\n%s", out)
			}
			envoyChanged := false
			for line := range strings.SplitSeq(out, "\n") {
				if f := strings.Fields(line); len(f) == 8 && f[2] == "envoy:edge.path#1" && f[6] != "0" {
					envoyChanged = true
				}
			}
			if !envoyChanged {
				t.Errorf("replay against a tighter hourly Envoy limit refuses nothing more:\n%s", out)
			}
			if svg, err := os.ReadFile(filepath.Join(dir, "replay.svg")); err != nil || !strings.Contains(string(svg), "candidate") {
				t.Errorf("the chart was not drawn with the candidate's row (%v)", err)
			}
		})
	}
}

// doHeader sends a request with one header field set and returns the
// status, the headers and the body.
func (in *instance) doHeader(t *testing.T, method, path, field, value string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, in.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(field, value)
	resp, b := testkit.DoHTTP(t, http.DefaultClient, req)
	return resp.StatusCode, resp.Header, b
}

// TestDocsReplayExample runs the worked example of docs/operations.md,
// "Decision log and replay": its configurations and commands, and
// requires the output the page prints.
func TestDocsReplayExample(t *testing.T) {
	t.Parallel()
	const doc = "../../docs/operations.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var console string
	for _, bl := range testkit.Blocks(string(b)) {
		name, ok := strings.CutPrefix(bl.Marker, "<!-- replay: ")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, " -->")
		if name == "console" {
			console = bl.Text
			continue
		}
		testkit.WriteFile(t, filepath.Join(dir, name), bl.Text)
	}
	if console == "" {
		t.Fatalf("%s has no replay example", doc)
	}
	cmds := strings.Split(console, "$ ")[1:]
	if len(cmds) != 3 {
		t.Fatalf("the example has %d commands, want 3", len(cmds))
	}
	for _, c := range cmds {
		line, want, _ := strings.Cut(c, "\n")
		line = strings.TrimSuffix(line, " > /dev/null")
		args := strings.Fields(line)
		if args[0] != "sluice" {
			t.Fatalf("command %q is not sluice's", line)
		}
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "examples/"):
				args[i] = "../../" + a
			case strings.HasSuffix(a, ".jsonl") || strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".svg"):
				args[i] = filepath.Join(dir, a)
			}
		}
		r := runOK(t, nil, args[1:]...)
		if strings.Contains(c, "--replay") && r.stdout != want {
			t.Errorf("%s printed\n%s\nthe page says\n%s", line, r.stdout, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "replay.svg")); err != nil {
		t.Errorf("the example's chart was not drawn: %v", err)
	}
}

// TestReplayErrors checks the command line of a replay and of the
// decision log flags.
func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, filepath.Join(dir, "c.yaml"), "limits:\n  api: {algorithm: fixed_window, limit: 1, period: 1m}\n")
	bad := testkit.WriteFile(t, filepath.Join(dir, "bad.jsonl"), `{"time":"2026-01-01T00:00:00Z","door":"check","limits":[]}`+"\nnot json\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"simulate", "--replay", bad}, 2, "--replay needs --config"},
		{[]string{"simulate", "--replay", bad, "--config", cfg}, 1, "bad.jsonl: line 2:"},
		{[]string{"simulate", "--replay", filepath.Join(dir, "none.jsonl"), "--config", cfg}, 1, "no such file"},
		{[]string{"simulate", "--algorithm", "all", "--limit", "1", "--period", "1m", "--trace", "../../examples/traces/steady.csv", "--decision-log", filepath.Join(dir, "d.jsonl")}, 2, "--decision-log needs one rate algorithm"},
		{[]string{"serve", "--decision-log-sample", "1.5"}, 2, "--decision-log-sample must be in (0, 1]"},
		{[]string{"serve", "--decision-log-key-file", cfg}, 2, "--decision-log-key-file needs --decision-log"},
	} {
		r := runSluice(t, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("sluice %q = %d %q, want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	short := testkit.WriteFile(t, filepath.Join(dir, "key"), "short\n")
	r := runSluice(t, nil, "serve", "--http", "127.0.0.1:0", "--decision-log", filepath.Join(dir, "d.jsonl"), "--decision-log-key-file", short)
	if r.code != 1 || !strings.Contains(r.stderr, "want at least 16") {
		t.Errorf("serve with a short secret = %d %q, want 1 saying the secret is too short", r.code, r.stderr)
	}
}

// TestDecisionLogSection configures the decision log in the file: its
// path is relative to the file's folder, its keys hashed under the secret
// of its key_file, and a --decision-log flag wins over the key it sets. A
// bad value stops the service with the file, line and key.
func TestDecisionLogSection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "log.key"), "0123456789abcdef0123456789\n")
	cfg := writeConfig(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  api: {algorithm: fixed_window, limit: 1, period: 1h}
decision_log:
  path: decisions.jsonl
  key_file: log.key
  sample: 1
  max_size_mib: 1
  files: 2
`)
	in := startServe(t, "--config", cfg)
	in.check(t, "api", "alice")
	in.check(t, "api", "alice")
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
	if err != nil {
		t.Fatalf("the section's log was not written: %v", err)
	}
	if n := strings.Count(string(b), "\n"); n != 2 || strings.Contains(string(b), "alice") || !strings.Contains(string(b), `"key":"h:`) ||
		!strings.Contains(string(b), `"outcome":"denied"`) {
		t.Errorf("the log has %d lines, want 2 with the key hashed, the second denied:\n%s", n, b)
	}

	// The flag wins over the section's path; the rest of the section
	// stays (the key is hashed alike).
	other := filepath.Join(dir, "other.jsonl")
	in = startServe(t, "--config", cfg, "--decision-log", other)
	in.check(t, "api", "alice")
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	b2, err := os.ReadFile(other)
	if err != nil || strings.Count(string(b2), "\n") != 1 || !strings.Contains(string(b2), `"key":"h:`) {
		t.Errorf("--decision-log %s: %q, %v; want one line with the key hashed", other, b2, err)
	}
	if b3, _ := os.ReadFile(filepath.Join(dir, "decisions.jsonl")); len(b3) != len(b) {
		t.Errorf("the section's file was written to with --decision-log given")
	}

	bad := writeConfig(t, filepath.Join(dir, "bad.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  api: {algorithm: fixed_window, limit: 1, period: 1h}
decision_log:
  path: decisions.jsonl
  sample: 2
`)
	r := runSluice(t, nil, "serve", "--config", bad)
	if want := bad + ":6: decision_log.sample: must be a number greater than 0 and at most 1"; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("serve with a bad decision_log = %d %q, want 1 with %q", r.code, r.stderr, want)
	}
}

// concurrentLimits are the limits of TestReplayConcurrent: short
// periods, so that refills and window edges fall every few milliseconds,
// between decisions that come from several callers at once on two keys;
// the dry run, decided after its request's other limits by a call of its
// own, has one key for every request. once admits one request an hour,
// so that the store refuses the rest of its key (the Redis store with
// local refusals, some locally), and its dry run dryonce would refuse them
// too, however slowly a loaded machine sends them: the short periods may
// then refill before a key is refused.
const concurrentLimits = `limits:
  once: {algorithm: fixed_window, limit: 1, period: 1h}
  dryonce: {algorithm: fixed_window, limit: 1, period: 1h, shadow: true}
  tb: {algorithm: token_bucket, limit: 3, period: 6ms}
  fw: {algorithm: fixed_window, limit: 2, period: 3ms}
  sw: {algorithm: sliding_window, limit: 3, period: 5ms}
  dry: {algorithm: fixed_window, limit: 2, period: 1ms, shadow: true}
envoy:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 40}
`

// TestReplayConcurrent writes a decision log of concurrent requests, 8
// callers at once on a few keys, on each store, and replays it against the
// configuration that wrote it: every decision comes out the same. Under
// concurrent requests a call may find its key's shard at a later time
// than the one it was given (the memory store's time never steps back),
// and decisions of one key come within a microsecond of each other (on
// Redis, the calls batched into one script share its TIME); the log has
// the time and order the store decided each at.
//
// With local refusals (redis-local), a request refused locally replays
// refused too; its other limits that would have admitted it were read
// from the states the store kept, which may be older than Redis's at the
// refusal's time, and the replay takes them as logged and says so.
func TestReplayConcurrent(t *testing.T) {
	for _, store := range []string{"memory", "redis", "redis-local"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			storeYAML := ""
			if store != "memory" {
				srv := testkit.StartRedis(t)
				local := "local_refusals: {enabled: false}, "
				if store == "redis-local" {
					local = ""
				}
				storeYAML = fmt.Sprintf("store:\n  backend: redis\n  redis: {%saddrs: [%q]}\n  timeout: 2s\n", local, srv.Addr)
			}
			cfg := writeConfig(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0", grpc: "127.0.0.1:0"}
`+storeYAML+concurrentLimits)
			log := filepath.Join(dir, "decisions.jsonl")
			in := startServe(t, "--config", cfg, "--decision-log", log)
			client := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc))
			const callers, each = 8, 150
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := range each {
						key := []string{"a", "b"}[(c+i)%2]
						var body string
						switch (c + i) % 6 {
						case 0:
							body = fmt.Sprintf(`{"limit":"tb","key":%q}`, key)
						case 1:
							body = fmt.Sprintf(`{"checks":[{"limit":"fw","key":%q},{"limit":"sw","key":%q},{"limit":"dry","key":"all"}]}`, key, key)
						case 2:
							body = fmt.Sprintf(`{"checks":[{"limit":"tb","key":%q},{"limit":"dry","key":"all"}]}`, key)
						case 3:
							body = fmt.Sprintf(`{"limit":"sw","key":%q}`, key)
						case 4:
							if _, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
								Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("user", key)}}); err != nil {
								t.Errorf("ShouldRateLimit: %v", err)
								return
							}
							continue
						case 5:
							body = `{"checks":[{"limit":"once","key":"all"},{"limit":"dryonce","key":"all"}]}`
						}
						resp, err := http.Post(in.url("/v1/check"), "application/json", strings.NewReader(body))
						if err != nil {
							t.Errorf("check: %v", err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 && resp.StatusCode != 429 {
							t.Errorf("check %s = %d", body, resp.StatusCode)
							return
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if v := in.metric(t, "sluice_store_local_refused_decisions_total"); store == "redis-local" && (v == "" || v == "0") {
				t.Errorf("no request was refused locally (%q)", v)
			}
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if lines := strings.Count(string(b), "\n"); lines != callers*each || !strings.Contains(string(b), `"outcome":"denied"`) || !strings.Contains(string(b), `"outcome":"shadow_denied"`) {
				t.Fatalf("the log has %d lines, want %d with denials and dry-run denials", lines, callers*each)
			}
			out := replayOut(t, log, cfg)
			if !strings.Contains(out, fmt.Sprintf("replayed %d of %[1]d decisions", callers*each)) || !strings.Contains(out, "changed: 0 (0 refused that were admitted, 0 admitted that were refused)") {
				t.Errorf("replay against the same configuration:\n%s", out)
			}
			// A local refusal whose other limits would have admitted
			// the request comes only now and then: the replay names
			// those limits when the log has one, and only then.
			if has := admittingLocal(t, b); has != strings.Contains(out, "(local refusal)") {
				t.Errorf("the log has a local refusal with an admitting limit: %t; the replay:\n%s", has, out)
			}
			table, _, _ := strings.Cut(out, "keys most affected")
			for line := range strings.SplitSeq(table, "\n") {
				f := strings.Fields(line)
				if len(f) == 8 && f[0] != "door" && (f[4] != f[5] || f[6] != "0" || f[7] != "0") {
					t.Errorf("replay changed a limit's refusals: %s", line)
				}
			}
		})
	}
}

// admittingLocal reports whether the decision log b has a limit that
// would have admitted a request Redis's store refused locally, which a
// replay takes as logged (decisionlog.LocalRefusal).
func admittingLocal(t *testing.T, b []byte) bool {
	t.Helper()
	dr := decisionlog.NewReader(bytes.NewReader(b))
	for {
		rec, err := dr.Next()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rec.Limits {
			local := e.Order == decisionlog.LocalRefusal || e.At.IsZero() && rec.Order == decisionlog.LocalRefusal
			if local && e.Outcome == "allowed" && e.Mode == "" {
				return true
			}
		}
	}
}
