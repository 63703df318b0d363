package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/memstore"
)

const ovTestToken = "cli-override-token-0123456789abcdef"

// TestOverridesCommand drives sluice overrides against a service in the
// same process.
func TestOverridesCommand(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	cfg, err := config.Parse("ov.yaml", []byte(`
admin: {token: `+ovTestToken+`}
limits:
  api-key: {algorithm: token_bucket, limit: 10, period: 1s}
  login: {algorithm: sliding_log, limit: 1, period: 1h, penalty: {block_for: 1h}}
`), formats)
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(cfg, memstore.New(memstore.Options{}), server.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(ovTestToken+"\n"), 0o600)
	ov := func(args ...string) result {
		t.Helper()
		return runSluice(t, nil, append([]string{"overrides", "--server", srv.URL, "--token-file", tokenFile}, args...)...)
	}
	steps := []struct {
		name   string
		args   []string
		code   int
		stdout string // a substring
		stderr string // a substring
	}{
		{"empty list", []string{"list"}, 0, "no overrides; this instance only (memory store)", ""},
		{"set", []string{"set", "--limit", "100", "--period", "1m", "--burst", "200", "--ttl", "1h", "api-key", "user/1"}, 0,
			`set: limit "api-key", key "user/1": token_bucket 100/1m burst 200 until `, ""},
		{"set again, flags after the arguments", []string{"set", "api-key", "user/1", "--limit", "50", "--period", "1s"}, 0,
			`set: limit "api-key", key "user/1": token_bucket 50/1s burst 50 (was token_bucket 100/1m burst 200 until `, ""},
		{"get", []string{"get", "api-key", "user/1"}, 0, `limit "api-key", key "user/1": token_bucket 50/1s burst 50, set by token:`, ""},
		{"list", []string{"list", "api-key"}, 0, "api-key  \"user/1\"  token_bucket 50/1s burst 50  never", ""},
		{"invalid", []string{"set", "api-key", "k", "--limit", "5", "--period", "1 m"}, 2, "", `overrides: 400: period: invalid duration "1 m"`},
		{"missing flag", []string{"set", "api-key", "k", "--period", "1s"}, 2, "", "overrides: 400: limit is missing"},
		{"unknown limit", []string{"get", "nope", "k"}, 2, "", `overrides: 404: no limit named "nope"`},
		{"rm", []string{"rm", "api-key", "user/1"}, 0, `removed: limit "api-key", key "user/1": was token_bucket 50/1s burst 50`, ""},
		{"rm again", []string{"rm", "api-key", "user/1"}, 1, "", `overrides: 404: no override of limit "api-key" for key "user/1"`},
		{"reset", []string{"reset", "api-key", "user/1"}, 0, `reset: limit "api-key", key "user/1": it starts afresh`, ""},
		{"reset an unknown limit", []string{"reset", "nope", "k"}, 2, "", `overrides: 404: no limit named "nope" in the limits section`},
		{"reset with one argument", []string{"reset", "api-key"}, 2, "", "overrides reset: want LIMIT KEY"},
		{"reset json", []string{"--json", "reset", "api-key", "k"}, 0, `{"reset":{"key":"k","limit":"api-key"}}`, ""},
		{"unblock a key never blocked", []string{"unblock", "login", "alice"}, 0, `unblock: limit "login", key "alice": it was not blocked; it starts afresh`, ""},
		{"unblock a limit without a penalty", []string{"unblock", "api-key", "k"}, 2, "", `overrides: 409: limit "api-key" has no penalty`},
		{"unblock with one argument", []string{"unblock", "login"}, 2, "", "overrides unblock: want LIMIT KEY"},
		{"get absent", []string{"get", "api-key", "user/1"}, 1, "", "no override"},
		{"json", []string{"--json", "list"}, 0, `{"overrides":[],"shared":false}`, ""},
		{"no command", nil, 2, "", "name a command"},
		{"unknown command", []string{"frob"}, 2, "", `unknown command "frob"`},
		{"get with one argument", []string{"get", "api-key"}, 2, "", "want LIMIT KEY"},
	}
	// The same commands through `sluice check overrides`.
	r := runSluice(t, nil, "check", "overrides", "--server", srv.URL, "--token-file", tokenFile, "--json", "list")
	if r.code != 0 || !strings.Contains(r.stdout, `{"overrides":[],"shared":false}`) {
		t.Errorf("sluice check overrides --json list: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, s := range steps {
		r := ov(s.args...)
		if r.code != s.code || !strings.Contains(r.stdout, s.stdout) || !strings.Contains(r.stderr, s.stderr) {
			t.Errorf("%s: sluice overrides %s: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, stdout with %q, stderr with %q",
				s.name, strings.Join(s.args, " "), r.code, r.stdout, r.stderr, s.code, s.stdout, s.stderr)
		}
	}
	// The flags of overrides after the command, as after the command's
	// own flags.
	r = runSluice(t, nil, "overrides", "set", "--server", srv.URL, "api-key", "late", "--limit", "7", "--period", "1s", "--token-file", tokenFile)
	if r.code != 0 || !strings.Contains(r.stdout, `set: limit "api-key", key "late": token_bucket 7/1s`) {
		t.Errorf("sluice overrides set --server URL ... --token-file FILE: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runSluice(t, nil, "check", "overrides", "rm", "api-key", "late", "--server", srv.URL, "--token-file", tokenFile, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"deleted"`) {
		t.Errorf("sluice check overrides rm LIMIT KEY --server URL --token-file FILE --json: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runSluice(t, nil, "check", "--server", srv.URL, "--token-file", tokenFile, "overrides", "--json", "list")
	if r.code != 0 || !strings.Contains(r.stdout, `{"overrides":[],"shared":false}`) {
		t.Errorf("sluice check --server URL --token-file FILE overrides --json list: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// The override applies to decisions while it is set.
	ov("set", "api-key", "vip", "--limit", "1000", "--period", "1s")
	resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(`{"limit":"api-key","key":"vip"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api-key";q=1000;w=1` {
		t.Errorf("RateLimit-Policy after set = %q, want q=1000", got)
	}
	// Without the token the service refuses, and the message says how to
	// give it.
	r = runSluice(t, nil, "overrides", "--server", srv.URL, "list")
	if r.code != 2 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token-file") {
		t.Errorf("list without a token: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestOverridesSetBody checks the PUT body of `sluice overrides set`: the
// flags of set given, each as the field of its name with '-' written '_',
// and no other field (not the flags of overrides, which may come among
// them).
func TestOverridesSetBody(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"api", "user:1", "--limit", "3"}, `{"limit":3}`},
		{[]string{"--limit", "5", "--period", "calendar_week", "--time-zone", "Europe/Berlin", "--week-starts", "sunday",
			"--burst", "7", "--algorithm", "token_bucket", "--ttl", "1h", "--expires-at", "2027-01-01T00:00:00Z", "api", "user:1"},
			`{"algorithm":"token_bucket","burst":7,"expires_at":"2027-01-01T00:00:00Z","limit":5,"period":"calendar_week","time_zone":"Europe/Berlin","ttl":"1h","week_starts":"sunday"}`},
		{[]string{"--server", "sluice.internal:9090", "api", "--json", "--limit", "3", "user:1", "--token-file", "t", "--timeout", "1s"}, `{"limit":3}`},
		{[]string{"--limit", "3", "--", "api", "user:1"}, `{"limit":3}`},
	} {
		_, cmd, pos, sub, err := parseOverrides(append([]string{"set"}, tt.args...))
		if err != nil || cmd != "set" {
			t.Errorf("parseOverrides(set %q) = %q, %v", tt.args, cmd, err)
			continue
		}
		body, err := ovSetBody(sub, pos)
		if err != nil || string(body) != tt.want || pos[0] != "api" || pos[1] != "user:1" {
			t.Errorf("set %q: body %s, arguments %q, %v; want %s, [api user:1]", tt.args, body, pos, err, tt.want)
		}
	}
}

// TestOverridesFlagsAnywhere checks that the flags of sluice overrides
// may come before the command, after it, or among its arguments, and
// that after -- a key may start with '-'.
func TestOverridesFlagsAnywhere(t *testing.T) {
	for _, tt := range []struct {
		args         []string
		cmd          string
		pos          []string
		server, file string
		json         bool
	}{
		{[]string{"--server", "a:1", "list"}, "list", nil, "a:1", "", false},
		{[]string{"list", "--server", "a:1", "--json"}, "list", nil, "a:1", "", true},
		{[]string{"ls", "api", "--token-file", "t"}, "list", []string{"api"}, "http://127.0.0.1:8080", "t", false},
		{[]string{"get", "api", "--server=b:2", "k"}, "get", []string{"api", "k"}, "b:2", "", false},
		{[]string{"--server", "a:1", "rm", "--server", "b:2", "api", "k"}, "rm", []string{"api", "k"}, "b:2", "", false},
		{[]string{"delete", "--json", "--", "api", "-k", "--server"}, "rm", []string{"api", "-k", "--server"}, "http://127.0.0.1:8080", "", true},
		{[]string{"set", "--server", "a:1", "api", "k", "--limit", "5", "--period", "1s", "--token-file", "t"}, "set", []string{"api", "k"}, "a:1", "t", false},
	} {
		f, cmd, pos, _, err := parseOverrides(tt.args)
		if err != nil {
			t.Errorf("parseOverrides(%q): %v", tt.args, err)
			continue
		}
		if cmd != tt.cmd || !slices.Equal(pos, tt.pos) || f.server != tt.server || f.client.tokenFile != tt.file || f.json != tt.json {
			t.Errorf("parseOverrides(%q) = %q %q, server %q, token file %q, json %v, %v; want %q %q, %q, %q, %v",
				tt.args, cmd, pos, f.server, f.client.tokenFile, f.json, err, tt.cmd, tt.pos, tt.server, tt.file, tt.json)
		}
	}
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"list", "--limit", "5"}, "overrides list: unknown flag --limit"},
		{[]string{"get", "api", "-k"}, "overrides get: unknown flag -k"},
		{[]string{"set", "api", "k", "--server"}, "overrides set: --server needs a value"},
	} {
		if _, _, _, _, err := parseOverrides(tt.args); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("parseOverrides(%q) = %v, want an error with %q", tt.args, err, tt.err)
		}
	}
}
