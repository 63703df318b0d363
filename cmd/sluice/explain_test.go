package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestCheckExplain runs sluice check --explain against a service whose
// admin endpoints are on their own listener behind a token.
func TestCheckExplain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "explain-test-token-0123456789"
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, filepath.Join(dir, "sluice.yaml"), `listen: {http: "127.0.0.1:0", admin: "127.0.0.1:0"}
admin: {token_file: token}
limits:
  tb: {algorithm: token_bucket, limit: 10, period: 1h}
  log: {algorithm: sliding_log, limit: 3, period: 1h}
`)
	in := startServe(t, "--config", path)
	public, admin := "http://"+in.http, "http://"+in.admin
	tokenFile := filepath.Join(dir, "token")
	for range 3 {
		runSluice(t, nil, "check", "--server", public, "--limit", "tb", "--key", "alice")
		runSluice(t, nil, "check", "--server", public, "--limit", "log", "--key", "bob")
	}

	explain := func(args ...string) result {
		return runSluice(t, nil, append([]string{"check", "--explain"}, args...)...)
	}
	r := explain("--server", admin, "--token-file", tokenFile, "--limit", "tb", "--key", "alice")
	if r.code != 0 {
		t.Fatalf("explain tb: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	testkit.WantAll(t, "explain tb: stdout", r.stdout,
		"limit      tb (token_bucket, 10 per 1h, burst 10)\n",
		"key        \"alice\"\n",
		"state      tracked\n",
		"tokens     7", // and a fraction of a token, as time passes
		" of 10",
		"a request  cost 1: allowed, 6 remaining; back to initial in ",
		"\nThe bucket holds 7",
	)

	// The text and the service's summary show the same digits.
	if _, rest, _ := strings.Cut(r.stdout, "tokens     "); !strings.Contains(r.stdout, "The bucket holds "+strings.Fields(rest)[0]+" of 10 tokens") {
		t.Errorf("explain tb: the tokens row and the summary disagree:\n%s", r.stdout)
	}

	r = explain("--server", admin, "--token-file", tokenFile, "--limit", "log", "--key", "bob")
	if r.code != 1 {
		t.Errorf("explain log: exit %d, want 1 (a request would be denied)\n%s%s", r.code, r.stdout, r.stderr)
	}
	testkit.WantAll(t, "explain log: stdout", r.stdout, "counted    3 of 3 in 3 entries\n", "oldest     ", "a request  cost 1: denied, retry in ")
	// The oldest entry leaves the log an hour after it was counted: at most
	// an hour from now (exactly an hour when the explain came within the
	// same millisecond as the requests), and surely more than 59 minutes.
	if _, rest, ok := strings.Cut(r.stdout, "retry in "); !ok {
		t.Errorf("explain log: no retry:\n%s", r.stdout)
	} else if f := strings.TrimRight(strings.Fields(rest)[0], ";,"); !within(f, 59*time.Minute, time.Hour) {
		t.Errorf("explain log: retry in %q, want more than 59m and at most 1h:\n%s", f, r.stdout)
	}

	r = explain("--server", admin, "--token-file", tokenFile, "--limit", "tb", "--key", "nobody", "--json")
	var a server.Explanation
	if err := json.Unmarshal([]byte(r.stdout), &a); r.code != 0 || err != nil || a.Tracked || a.State.Tokens != "10" || a.Remaining != 9 {
		t.Errorf("explain --json of an untracked key: exit %d, %v, %+v", r.code, err, a)
	}

	// Explaining charges nothing: the fourth request leaves 6.
	r = runSluice(t, nil, "check", "--server", public, "--limit", "tb", "--key", "alice")
	if !strings.HasPrefix(r.stdout, `allowed: limit "tb", key "alice", cost 1: 6 of 10 remaining`) {
		t.Errorf("check after explaining: %q, want 6 of 10 remaining", r.stdout)
	}

	for _, tt := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no token", []string{"--server", admin, "--limit", "tb", "--key", "alice"},
			"/v1/explain answered 401 Unauthorized: this admin endpoint needs the admin token: send Authorization: Bearer TOKEN (pass the admin token with --token-file or SLUICE_ADMIN_TOKEN)"},
		{"public listener", []string{"--server", public, "--token-file", tokenFile, "--limit", "tb", "--key", "alice"},
			"answered 404 Not Found: /v1/explain is an admin endpoint, served on listen.admin, not on listen.http. listen.http keeps /v1/ and /metrics for Sluice and never forwards them to the upstream. (with listen.admin set, --server must name the admin listener)"},
		{"unknown limit", []string{"--server", admin, "--token-file", tokenFile, "--limit", "nope", "--key", "k"},
			`answered 404 Not Found: no limit named "nope"`},
		{"missing token file", []string{"--server", admin, "--token-file", filepath.Join(dir, "none"), "--limit", "tb", "--key", "k"},
			"check --explain: --token-file: open "},
	} {
		r := explain(tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tt.name, r.code, r.stderr, tt.stderr)
		}
	}
}

func TestFormatExplain(t *testing.T) {
	var a server.Explanation
	err := json.Unmarshal([]byte(`{"limit":"per-ip","key":"k","algorithm":"sliding_window",
		"policy":{"limit":100,"period":"1m","period_ms":60000},"at":"2026-03-14T12:01:20.000000Z","tracked":true,
		"state":{"window_start":"2026-03-14T12:01:00.000000Z","window_end":"2026-03-14T12:02:00.000000Z","current":0,"previous":50,"estimate":"33 1/3"},
		"cost":1,"allowed":true,"remaining":66,"retry_after_ms":0,"reset_after_ms":100000,
		"summary":"The estimate is 33 1/3 of 100."}`), &a)
	if err != nil {
		t.Fatal(err)
	}
	want := `limit      per-ip (sliding_window, 100 per 1m)
key        "k"
at         2026-03-14T12:01:20.000000Z
state      tracked
window     2026-03-14T12:01:00.000000Z to 2026-03-14T12:02:00.000000Z
previous   50
current    0
estimate   33.33 of 100 (exactly 33 + 1/3)
a request  cost 1: allowed, 66 remaining; back to initial in 1m40s

The estimate is 33 1/3 of 100.
`
	if got := formatExplain(&a); got != want {
		t.Errorf("formatExplain =\n%s\nwant\n%s", got, want)
	}
}

// TestFormatExplainCalendar prints a calendar limit's explanation: the
// zone beside the period, and the window's start and end in that zone.
func TestFormatExplainCalendar(t *testing.T) {
	var a server.Explanation
	err := json.Unmarshal([]byte(`{"limit":"monthly","key":"k","algorithm":"fixed_window",
		"policy":{"limit":1000,"period":"calendar_month","period_ms":0,"time_zone":"Europe/Berlin"},"at":"2026-03-31T21:59:00.000000Z","tracked":true,
		"state":{"window_start":"2026-03-01T00:00:00.000000+01:00","window_end":"2026-04-01T00:00:00.000000+02:00","current":998,"estimate":"998"},
		"cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"reset_after_ms":60000,
		"summary":"The window that ends in 1m0s has counted 998 of 1000."}`), &a)
	if err != nil {
		t.Fatal(err)
	}
	want := `limit      monthly (fixed_window, 1000 per calendar_month in Europe/Berlin)
key        "k"
at         2026-03-31T21:59:00.000000Z
state      tracked
window     2026-03-01T00:00:00.000000+01:00 to 2026-04-01T00:00:00.000000+02:00
current    998
estimate   998 of 1000
a request  cost 1: allowed, 1 remaining; back to initial in 1m0s

The window that ends in 1m0s has counted 998 of 1000.
`
	if got := formatExplain(&a); got != want {
		t.Errorf("formatExplain =\n%s\nwant\n%s", got, want)
	}
}

// within reports whether the duration written s is in (lo, hi].
func within(s string, lo, hi time.Duration) bool {
	d, err := time.ParseDuration(s)
	return err == nil && d > lo && d <= hi
}
