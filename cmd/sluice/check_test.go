package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkConfig has a token bucket "tb" of 2 per minute, one whose burst is
// above its limit, a leaky bucket that delays, and a dry-run limit.
const checkConfig = `listen: {http: "127.0.0.1:0"}
limits:
  tb: {algorithm: token_bucket, limit: 2, period: 1m}
  bursty: {algorithm: token_bucket, limit: 20, period: 1m, burst: 50}
  queue: {algorithm: leaky_bucket, limit: 10, period: 1s, burst: 5}
  dry: {algorithm: fixed_window, limit: 1, period: 1h, shadow: true}
`

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), checkConfig)
	in := startServe(t, "--config", path)
	server := "http://" + in.http
	// The longest key of limit tb at cost 1 fills the service's 64 KiB
	// body exactly.
	longest := 64<<10 - len(`{"limit":"tb","key":"","cost":1}`)

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // exact, or a prefix when it ends with "..."
		stderr string // a substring (of stdout when the code is 0)
	}{
		{"allowed", []string{"--limit", "tb", "--key", "alice"}, 0,
			`allowed: limit "tb", key "alice", cost 1: 1 of 2 remaining, full again in 30s` + "\n", ""},
		{"allowed json", []string{"--limit", "tb", "--key", "alice", "--json"}, 0,
			`{"allowed":true,"limit":2,"remaining":0,"retry_after_ms":0,"reset_after_ms":...`, ""},
		{"denied", []string{"--limit", "tb", "--key", "alice"}, 1,
			`denied: limit "tb", key "alice", cost 1: 0 of 2 remaining, retry in ...`, ""},
		{"denied json", []string{"--limit", "tb", "--key", "alice", "--json"}, 1,
			`{"allowed":false,"limit":2,"remaining":0,"retry_after_ms":...`, ""},
		{"cost", []string{"--limit", "tb", "--key", "bob", "--cost", "2"}, 0,
			`allowed: limit "tb", key "bob", cost 2: 0 of 2 remaining, full again in 1m0s` + "\n", ""},
		{"burst above the limit", []string{"--limit", "bursty", "--key", "b"}, 0,
			`allowed: limit "bursty", key "b", cost 1: 49 of burst 50 remaining (limit 20), full again in 3s` + "\n", ""},
		{"queue", []string{"--limit", "queue", "--key", "q", "--cost", "2"}, 0,
			`allowed: limit "queue", key "q", cost 2: 3 of burst 5 remaining (limit 10), full again in 200ms` + "\n", ""},
		// The times depend on the time between the two calls.
		{"delay", []string{"--limit", "queue", "--key", "q", "--cost", "2"}, 0,
			`allowed: limit "queue", key "q", cost 2: 1 of burst 5 remaining (limit 10), full again in ...`, "ms, wait "},
		{"dry run", []string{"--limit", "dry", "--key", "d"}, 0, `allowed: limit "dry", key "d", cost 1: 0 of 1 remaining, full again in ...`, ""},
		{"dry run denied", []string{"--limit", "dry", "--key", "d"}, 0, `allowed (dry run: the limit would have denied): limit "dry", key "d", cost 1: 0 of 1 remaining, retry in ...`, ""},
		{"key with quotes", []string{"--limit", "tb", "--key", `a "b"` + "\n"}, 0, `allowed: limit "tb", key "a \"b\"\n", cost 1: 1 of 2 remaining...`, ""},
		{"unknown limit", []string{"--limit", "nope", "--key", "k"}, 2, "",
			`sluice: check: ` + server + `/v1/check answered 404 Not Found: limit: no limit named "nope"`},
		{"cost above capacity", []string{"--limit", "tb", "--key", "k", "--cost", "3"}, 1,
			`denied: limit "tb", key "k", cost 3: 2 of 2 remaining, never: the cost exceeds the limit's capacity` + "\n", ""},
		{"no limit", []string{"--key", "k"}, 2, "", "check: --limit is required"},
		{"no key", []string{"--limit", "tb"}, 2, "", "check: --key is required and must not be empty"},
		{"zero cost", []string{"--limit", "tb", "--key", "zero", "--cost", "0"}, 0,
			`allowed: limit "tb", key "zero", cost 0: 2 of 2 remaining` + "\n", ""},
		{"negative cost", []string{"--limit", "tb", "--key", "k", "--cost", "-1"}, 2, "", "check: --cost must be 0 or more, got -1"},
		{"zero cost explained", []string{"--explain", "--limit", "tb", "--key", "k", "--cost", "0"}, 2, "", "check: --cost must be at least 1 with --explain, got 0"},
		{"argument", []string{"--limit", "tb", "--key", "k", "extra"}, 2, "", `check: unexpected argument "extra"`},
		{"bad scheme", []string{"--server", "ftp://x", "--limit", "tb", "--key", "k"}, 2, "", `the scheme must be http or https`},
		{"longest key", []string{"--limit", "tb", "--key", strings.Repeat("k", longest), "--json"}, 0, `{"allowed":true,"limit":2,"remaining":1,...`, ""},
		{"key one byte too long", []string{"--limit", "tb", "--key", strings.Repeat("k", longest+1)}, 2, "",
			fmt.Sprintf("sluice: check: --key is too long: %d bytes (the service takes keys of at most %d bytes here: its request body is limited to 65536 bytes)\n", longest+1, longest)},
		{"70 KB key", []string{"--limit", "tb", "--key", strings.Repeat("k", 70_000)}, 2, "", "sluice: check: --key is too long: 70000 bytes"},
	}
	for _, tt := range tests {
		// In order: the cases spend the same keys.
		args := append([]string{"check", "--server", server}, tt.args...)
		if strings.HasPrefix(tt.name, "bad scheme") {
			args = append([]string{"check"}, tt.args...)
		}
		r := runSluice(t, nil, args...)
		if r.code != tt.code {
			t.Errorf("%s: sluice %q: exit %d, want %d\nstdout %q\nstderr %q", tt.name, args, r.code, tt.code, r.stdout, r.stderr)
			continue
		}
		if p, ok := strings.CutSuffix(tt.stdout, "..."); ok {
			if !strings.HasPrefix(r.stdout, p) {
				t.Errorf("%s: stdout = %q, want it to start with %q", tt.name, r.stdout, p)
			}
		} else if r.stdout != tt.stdout {
			t.Errorf("%s: stdout = %q, want %q", tt.name, r.stdout, tt.stdout)
		}
		if tt.code == 0 {
			if !strings.Contains(r.stdout, tt.stderr) {
				t.Errorf("%s: stdout = %q, want it to hold %q", tt.name, r.stdout, tt.stderr)
			}
		} else if !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("%s: stderr = %q, want it to hold %q", tt.name, r.stderr, tt.stderr)
		}
	}
}

// TestCheckServerUnreachable checks that a service that cannot be reached
// gives exit status 2 and says why.
func TestCheckServerUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := runSluice(t, nil, "check", "--server", addr, "--limit", "a", "--key", "k", "--timeout", "2s")
	if r.code != 2 || !strings.Contains(r.stderr, "sluice: check: Post \"http://"+addr+"/v1/check\"") || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("check of a closed port: exit %d, stderr %q; want 2 and connection refused", r.code, r.stderr)
	}

	// A server that is not Sluice.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>hello</html>"))
	}))
	defer other.Close()
	r = runSluice(t, nil, "check", "--server", other.URL, "--limit", "a", "--key", "k")
	if r.code != 2 || !strings.Contains(r.stderr, "answered 200 with a body that is not a decision") {
		t.Errorf("check of another server: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
}

func TestServerURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want, err string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8080", ""},
		{"http://localhost:8080/", "http://localhost:8080", ""},
		{"https://sluice.internal/base/?x=1", "https://sluice.internal/base", ""},
		{"ftp://x", "", "scheme must be http or https"},
		{"http://", "", "has no host"},
	}
	for _, tt := range tests {
		u, err := serverURL(tt.in)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("serverURL(%q) = %v, %v; want an error with %q", tt.in, u, err, tt.err)
			}
		case err != nil || u.String() != tt.want:
			t.Errorf("serverURL(%q) = %v, %v; want %s", tt.in, u, err, tt.want)
		}
	}
}

// TestCheckSlidingWindowReset checks that sluice check -h says why a
// sliding window of a minute may be full again only in more than a
// minute, as the first check of a key on one shows.
func TestCheckSlidingWindowReset(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  sw: {algorithm: sliding_window, limit: 10, period: 1m}
`)
	in := startServe(t, "--config", path)
	r := runSluice(t, nil, "check", "--server", "http://"+in.http, "--limit", "sw", "--key", "k")
	_, after, ok := strings.Cut(r.stdout, "full again in ")
	d, err := time.ParseDuration(strings.TrimSpace(after))
	if r.code != 0 || !ok || err != nil || d <= time.Minute || d > 2*time.Minute {
		t.Fatalf("first check on a sliding window of 1m: exit %d, %q; want full again in (1m, 2m]", r.code, r.stdout)
	}
	h := runSluice(t, nil, "check", "-h")
	if !strings.Contains(h.stdout, "For a sliding_window it can\nbe up to twice the period") {
		t.Errorf("sluice check -h does not say that a sliding window may be full again only after more than its period:\n%s", h.stdout)
	}
}
