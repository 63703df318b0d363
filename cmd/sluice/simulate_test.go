package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const boundaryTrace = "../../examples/traces/boundary.csv"

// TestSimulateBoundaryGolden runs the README's first command and checks
// the numbers issue 2 promises, then the whole output against a golden
// file (go test ./cmd/sluice -run Golden -update rewrites it).
func TestSimulateBoundaryGolden(t *testing.T) {
	r := runSluice(t, nil, "simulate", "--algorithm", "all", "--limit", "100", "--period", "1m", "--trace", boundaryTrace)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, error %v, stderr %q", r.code, r.err, r.stderr)
	}
	rows := make(map[string][]string)
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 6 {
			rows[f[0]] = f[1:]
		}
	}
	// admitted, denied, cost admitted, most cost in any minute, p99 delay
	want := map[string][]string{
		"token_bucket":   {"101", "99", "101", "101", "0s"},
		"gcra":           {"101", "99", "101", "101", "0s"},
		"leaky_bucket":   {"101", "99", "101", "101", "59s"},
		"fixed_window":   {"200", "0", "200", "200", "0s"},
		"sliding_log":    {"100", "100", "100", "100", "0s"},
		"sliding_window": {"100", "100", "100", "100", "0s"},
	}
	for alg, w := range want {
		if got := rows[alg]; !slices.Equal(got, w) {
			t.Errorf("%s: row %q, want %q\n%s", alg, got, w, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "Trace: 200 requests, 2026-01-01T12:00:59Z to 2026-01-01T12:01:00Z (1s), 1 key\n") {
		t.Errorf("heading does not show 200 requests within one second:\n%s", r.stdout)
	}
	golden := filepath.Join("testdata", "simulate_boundary_all.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantOut, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(wantOut) {
		t.Errorf("output differs from %s:\n got:\n%s\nwant:\n%s", golden, r.stdout, wantOut)
	}
}

// jsonKeys returns the field names of a JSON object in order.
func jsonKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: want an object, got %v, %v", line, tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
	}
	return keys
}

type jsonlLine struct {
	T            int64  `json:"t"`
	Key          string `json:"key"`
	Cost         int64  `json:"cost"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
}

func TestSimulateJSONL(t *testing.T) {
	trace, err := os.ReadFile(boundaryTrace)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]func() io.Reader{
		"file":                   nil,
		"stdin":                  func() io.Reader { return strings.NewReader(string(trace)) },
		"stdin that cannot seek": func() io.Reader { return struct{ io.Reader }{strings.NewReader(string(trace))} },
	}
	for name, stdin := range inputs {
		t.Run(name, func(t *testing.T) {
			args := []string{"simulate", "--algorithm", "leaky_bucket", "--limit", "100", "--period", "1m", "--format", "jsonl"}
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // where a copy of a stdin that cannot seek goes
			var in io.Reader
			if stdin == nil {
				args = append(args, "--trace", boundaryTrace)
			} else {
				in = stdin()
			}
			r := runSluice(t, in, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, error %v, stderr %q", r.code, r.err, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(lines) != 200 {
				t.Fatalf("%d lines, want 200", len(lines))
			}
			wantKeys := []string{"t", "key", "cost", "allowed", "remaining", "retry_after_ms", "delay_ms", "reset_after_ms"}
			admitted := 0
			for i, line := range lines {
				if keys := jsonKeys(t, line); !slices.Equal(keys, wantKeys) {
					t.Fatalf("line %d: fields %q, want exactly %q", i+1, keys, wantKeys)
				}
				var l jsonlLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatal(err)
				}
				if l.Allowed {
					admitted++
				}
				if i == 100 { // the first request at 12:01:00
					want := jsonlLine{T: 1767268860000, Key: "client-1", Cost: 1, Allowed: true, DelayMS: 59000, ResetAfterMS: 59600}
					if l != want {
						t.Errorf("line %d = %+v, want %+v", i+1, l, want)
					}
				}
			}
			if admitted != 101 {
				t.Errorf("admitted %d, want 101", admitted)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
		})
	}
}

func TestSimulateTable(t *testing.T) {
	trace := "t_ms,key,cost\n0,a\n0,a\n0,b,3\n500,a\n"
	r := runSluice(t, strings.NewReader(trace), "simulate", "--algorithm", "fixed_window", "--limit", "2", "--period", "1s", "--trace", "-")
	if r.code != 0 {
		t.Fatalf("exit %d, error %v, stderr %q", r.code, r.err, r.stderr)
	}
	for _, want := range []string{
		"Trace: 4 requests, 1970-01-01T00:00:00Z to 1970-01-01T00:00:00.5Z (500ms), 2 keys\nPolicy: fixed_window, limit 2 per 1s\n",
		"\na      3         2         1       3     2              0s\n",
		"\nb      1         0         1       3     0              0s\n",
		"1 of the denied requests cost more than the capacity, 2: they can never be admitted.",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestSimulateFlagErrors(t *testing.T) {
	base := []string{"simulate", "--algorithm", "token_bucket", "--limit", "10", "--period", "1s"}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no algorithm", []string{"simulate", "--limit", "10", "--period", "1s"},
			"sluice: simulate: --algorithm is required (one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, all)\n"},
		{"unknown algorithm", []string{"simulate", "--algorithm", "token-bucket", "--limit", "10", "--period", "1s"},
			`sluice: simulate: --algorithm: unknown algorithm "token-bucket" (want one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window)` + "\n"},
		{"no limit", []string{"simulate", "--algorithm", "gcra", "--period", "1s"}, "sluice: simulate: --limit is required\n"},
		{"no period", []string{"simulate", "--algorithm", "gcra", "--limit", "5"},
			"sluice: simulate: --period is required (Go duration syntax: 250ms, 1s, 1m, 24h)\n"},
		{"zero limit", []string{"simulate", "--algorithm", "gcra", "--limit", "0", "--period", "1s"},
			"sluice: simulate: invalid policy: policy: limit must be at least 1, got 0\n"},
		{"negative period", []string{"simulate", "--algorithm", "gcra", "--limit", "5", "--period", "-1s"},
			"sluice: simulate: invalid policy: policy: period must be positive, got -1s\n"},
		{"sub-microsecond period", []string{"simulate", "--algorithm", "gcra", "--limit", "5", "--period", "1500ns"},
			"sluice: simulate: invalid policy: policy: period must be a whole number of microseconds, got 1.5µs\n"},
		{"burst for a window", []string{"simulate", "--algorithm", "sliding_log", "--limit", "5", "--period", "1s", "--burst", "7"},
			"sluice: simulate: invalid policy: policy: sliding_log has no burst; remove burst (got 7) or use token_bucket\n"},
		{"zero burst", with("--burst", "0"), "sluice: simulate: --burst must be at least 1, got 0\n"},
		{"bad format", with("--format", "csv"), `sluice: simulate: --format must be table or jsonl, got "csv"` + "\n"},
		{"jsonl for all", []string{"simulate", "--algorithm", "all", "--limit", "5", "--period", "1s", "--format", "jsonl"},
			"sluice: simulate: --format jsonl needs one algorithm; --algorithm all prints a comparison table\n"},
		{"positional argument", with("trace.csv"), `sluice: simulate: unexpected argument "trace.csv" (flags only)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runSluice(t, strings.NewReader("1,a\n"), tt.args...)
			if r.code != 2 {
				t.Fatalf("sluice %q: exit %d (error %v), want 2", tt.args, r.code, r.err)
			}
			if want := tt.stderr + "Run 'sluice simulate -h' for usage.\n"; r.stderr != want {
				t.Errorf("sluice %q: stderr\n%q\nwant\n%q", tt.args, r.stderr, want)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
		})
	}
}

// TestSimulateBadFlagSyntax checks the errors the flag package reports
// itself: once, followed by the usage, with exit status 2.
func TestSimulateBadFlagSyntax(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--rps", "5"}, "flag provided but not defined: -rps\n"},
		{[]string{"simulate", "--limit", "ten"}, `invalid value "ten" for flag -limit: not an integer` + "\n"},
		{[]string{"simulate", "--burst", "1e3"}, `invalid value "1e3" for flag -burst: not an integer` + "\n"},
		{[]string{"simulate", "--limit", "99999999999999999999"}, `invalid value "99999999999999999999" for flag -limit: out of range` + "\n"},
		{[]string{"simulate", "--period", "5"}, `invalid value "5" for flag -period: not a duration (Go syntax: 250ms, 1s, 1m, 24h)` + "\n"},
		{[]string{"simulate", "--period", "1 minute"}, `invalid value "1 minute" for flag -period: not a duration (Go syntax: 250ms, 1s, 1m, 24h)` + "\n"},
		{[]string{"simulate", "--limit"}, "flag needs an argument: -limit\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runSluice(t, nil, tt.args...)
			if r.code != 2 {
				t.Fatalf("exit %d (error %v), want 2", r.code, r.err)
			}
			if !strings.HasPrefix(r.stderr, tt.want) || !strings.HasSuffix(r.stderr, simulateUsage) || strings.Count(r.stderr, tt.want) != 1 {
				t.Errorf("stderr = %q, want %q once, then the usage", r.stderr, tt.want)
			}
		})
	}
}

func TestSimulateTraceErrors(t *testing.T) {
	tests := []struct {
		name, trace, want string
	}{
		{"bad time", "t_ms,key\n1,a\nnoon,a\n", `line 3: t_ms "noon" is not an integer`},
		{"empty key", "1,a\n2,,1\n", "line 2: key is empty"},
		{"missing key", "# x\n1\n", "line 2: missing key: want t_ms,key[,cost]"},
		{"zero cost", "1,a,0\n", "line 1: cost 0 is less than 1"},
		{"bad cost", "1,a,1\n2,a,two\n", `line 2: cost "two" is not an integer`},
		{"extra fields", "1,a,1,extra\n", "line 1: extra fields: 4 fields, want t_ms,key[,cost]"},
		{"negative time", "-5,a\n", "line 1: t_ms -5 is negative"},
		{"decreasing on the last line", "t,k\n1,a\n2,a\n3,a\n2,a\n", "line 5: t_ms 2 is before 3 on line 4 (timestamps must be non-decreasing)"},
	}
	formats := [][]string{
		{"--algorithm", "sliding_log", "--format", "jsonl"},
		{"--algorithm", "sliding_log", "--format", "table"},
		{"--algorithm", "all"},
	}
	for _, tt := range tests {
		for _, format := range formats {
			for _, seekable := range []bool{true, false} {
				t.Run(tt.name+" "+strings.Join(format, " "), func(t *testing.T) {
					var in io.Reader = strings.NewReader(tt.trace)
					if !seekable {
						in = struct{ io.Reader }{in}
					}
					args := append([]string{"simulate", "--limit", "2", "--period", "1s"}, format...)
					r := runSluice(t, in, args...)
					if r.code != 1 {
						t.Fatalf("exit %d (error %v), want 1", r.code, r.err)
					}
					if want := "sluice: simulate: trace <stdin>: " + tt.want + "\n"; r.stderr != want {
						t.Errorf("stderr %q, want %q", r.stderr, want)
					}
					if r.stdout != "" {
						t.Errorf("stdout = %q, want nothing before the error", r.stdout)
					}
				})
			}
		}
	}
}

func TestSimulateTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(path, []byte("1,a\n0,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runSluice(t, nil, "simulate", "--algorithm", "gcra", "--limit", "2", "--period", "1s", "--format", "jsonl", "--trace", path)
	if want := "sluice: simulate: trace " + path + ": line 2: t_ms 0 is before 1 on line 1 (timestamps must be non-decreasing)\n"; r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Errorf("exit %d, stderr %q, stdout %q; want 1, %q and no output", r.code, r.stderr, r.stdout, want)
	}
	missing := filepath.Join(t.TempDir(), "missing.csv")
	r = runSluice(t, nil, "simulate", "--algorithm", "gcra", "--limit", "2", "--period", "1s", "--trace", missing)
	if r.code != 1 || !errors.Is(r.err, os.ErrNotExist) || !strings.Contains(r.stderr, missing) {
		t.Errorf("missing trace: exit %d, error %v; want 1 and an error naming %s", r.code, r.err, missing)
	}
}

func TestSimulateCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr strings.Builder
	err := run(ctx, []string{"simulate", "--algorithm", "all", "--limit", "2", "--period", "1s"}, strings.NewReader("1,a\n"), &stdout, &stderr)
	if !errors.Is(err, context.Canceled) || stdout.Len() != 0 {
		t.Errorf("run with a canceled context = %v, stdout %q; want context.Canceled and no output", err, stdout.String())
	}
}

// TestSimulateUsageNamesEveryFlag keeps the hand-written usage text in
// step with the flags.
func TestSimulateUsageNamesEveryFlag(t *testing.T) {
	fs, _ := newSimulateFlags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(simulateUsage, "--"+f.Name+" ") {
			t.Errorf("usage does not mention --%s", f.Name)
		}
	})
}
