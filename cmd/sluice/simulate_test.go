package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const boundaryTrace = "../../examples/traces/boundary.csv"

// TestSimulateBoundaryGolden runs the README's first command and checks
// the numbers the README promises, then the whole output against a golden
// file (go test ./cmd/sluice -run Golden -update rewrites it).
func TestSimulateBoundaryGolden(t *testing.T) {
	r := runQuiet(t, nil, "simulate", "--algorithm", "all", "--limit", "100", "--period", "1m", "--trace", boundaryTrace)
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
var jsonKeys = testkit.JSONKeys

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
			r := runQuiet(t, in, args...)
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
	r := runOK(t, strings.NewReader(trace), "simulate", "--algorithm", "fixed_window", "--limit", "2", "--period", "1s", "--trace", "-")
	testkit.WantAll(t, "stdout", r.stdout,
		"Trace: 4 requests, 1970-01-01T00:00:00Z to 1970-01-01T00:00:00.5Z (500ms), 2 keys\nPolicy: fixed_window, limit 2 per 1s\n",
		"\na      3         2         1       3     2              0s\n",
		"\nb      1         0         1       3     0              0s\n",
		"1 of the denied requests cost more than the capacity, 2: they can never be admitted.",
	)
}

func TestSimulateFlagErrors(t *testing.T) {
	base := []string{"simulate", "--algorithm", "token_bucket", "--limit", "10", "--period", "1s"}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	checkUsageErrors(t, []usageErrorCase{
		{"no algorithm", []string{"simulate", "--limit", "10", "--period", "1s"},
			"sluice: simulate: --algorithm is required (one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, concurrency, all)\n"},
		{"unknown algorithm", []string{"simulate", "--algorithm", "token-bucket", "--limit", "10", "--period", "1s"},
			`sluice: simulate: --algorithm: unknown algorithm "token-bucket" (want one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window, concurrency)` + "\n"},
		{"no limit", []string{"simulate", "--algorithm", "gcra", "--period", "1s"}, "sluice: simulate: --limit is required\n"},
		{"no period", []string{"simulate", "--algorithm", "gcra", "--limit", "5"},
			"sluice: simulate: --period is required (Go duration syntax: 250ms, 1s, 1m, 24h; or calendar_day, calendar_week, calendar_month, calendar_year)\n"},
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
	})
}

// usageErrorCase is a command line that `sluice` must refuse with a usage
// error, and the message it must print.
type usageErrorCase struct {
	name   string
	args   []string
	stderr string
}

// checkUsageErrors runs checkUsageError on each case in a subtest, in an
// empty working directory, and checks that no file is left behind.
func checkUsageErrors(t *testing.T, cases []usageErrorCase) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			checkUsageError(t, tt.args, tt.stderr)
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files left behind: %v", left)
			}
		})
	}
}

// checkUsageError checks that `sluice ARGS` exits 2 with message and the
// usage hint on standard error, and prints nothing.
func checkUsageError(t *testing.T, args []string, message string) {
	t.Helper()
	r := runSluice(t, strings.NewReader("1,a\n"), args...)
	if r.code != 2 {
		t.Fatalf("sluice %q: exit %d (error %v), want 2", args, r.code, r.err)
	}
	if want := message + "Run 'sluice simulate -h' for usage.\n"; r.stderr != want {
		t.Errorf("sluice %q: stderr\n%q\nwant\n%q", args, r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}

// TestSimulateBadFlagSyntax checks the errors the flag package finds: one
// line naming the flag as written (no usage), with exit status 2.
func TestSimulateBadFlagSyntax(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--rps", "5"}, "unknown flag --rps"},
		{[]string{"simulate", "-algoritm", "gcra"}, "unknown flag -algoritm; did you mean --algorithm?"},
		{[]string{"simulate", "--dur=1m"}, "unknown flag --dur; did you mean --duration?"},
		{[]string{"simulate", "--limit", "ten"}, `--limit "ten": not an integer`},
		{[]string{"simulate", "--burst", "1e3"}, `--burst "1e3": not an integer`},
		{[]string{"simulate", "--limit", "99999999999999999999"}, `--limit "99999999999999999999": out of range`},
		{[]string{"simulate", "--period", "5"}, `--period "5": a duration needs a unit, such as 5s, 5m or 5ms, or a calendar period (calendar_day, calendar_week, calendar_month, calendar_year)`},
		{[]string{"simulate", "-period=1 minute"}, `-period "1 minute": not a duration (Go syntax: 250ms, 1s, 1m, 24h), or a calendar period (calendar_day, calendar_week, calendar_month, calendar_year)`},
		{[]string{"simulate", "--limit"}, "--limit needs a value"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runSluice(t, nil, tt.args...)
			if r.code != 2 {
				t.Fatalf("exit %d (error %v), want 2", r.code, r.err)
			}
			if want := "sluice: simulate: " + tt.want + "\n"; r.stderr != want || r.stdout != "" {
				t.Errorf("stderr = %q, stdout %q; want stderr %q", r.stderr, r.stdout, want)
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
		{"missing key", "# x\n1\n", "line 2: missing key: want t_ms,key[,cost[,duration_ms]]"},
		{"zero cost", "1,a,0\n", "line 1: cost 0 is less than 1"},
		{"bad cost", "1,a,1\n2,a,two\n", `line 2: cost "two" is not an integer`},
		{"extra fields", "1,a,1,5,extra\n", "line 1: extra fields: 5 fields, want t_ms,key[,cost[,duration_ms]]"},
		{"bad duration", "1,a,1,extra\n", `line 1: duration_ms "extra" is not an integer`},
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

// TestSimulateEmptyTrace checks that a trace without requests is an error
// (exit 1, naming a line taken as a header) unless --allow-empty.
func TestSimulateEmptyTrace(t *testing.T) {
	const noRequests = "; --allow-empty accepts a trace without requests\n"
	tests := []struct {
		name, trace, want string
	}{
		{"header only", "1e3,a\n", `sluice: simulate: trace <stdin> has no requests (line 1, "1e3,a", was read as a header: its first field is not an integer)` + noRequests},
		{"header after comments", "# x\n\n  t_ms,key \n", `sluice: simulate: trace <stdin> has no requests (line 3, "t_ms,key", was read as a header: its first field is not an integer)` + noRequests},
		{"empty", "", "sluice: simulate: trace <stdin> has no requests" + noRequests},
		{"comments only", "# nothing\n", "sluice: simulate: trace <stdin> has no requests" + noRequests},
	}
	for _, tt := range tests {
		for _, format := range []string{"table", "jsonl"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				args := []string{"simulate", "--algorithm", "gcra", "--limit", "2", "--period", "1s", "--format", format}
				r := runSluice(t, strings.NewReader(tt.trace), args...)
				if r.code != 1 || r.stderr != tt.want || r.stdout != "" {
					t.Errorf("exit %d, stderr %q, stdout %q; want 1, %q and no output", r.code, r.stderr, r.stdout, tt.want)
				}
				r = runSluice(t, strings.NewReader(tt.trace), append(args, "--allow-empty")...)
				if r.code != 0 || r.stderr != "" {
					t.Errorf("--allow-empty: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
				}
				if format == "table" && !strings.HasPrefix(r.stdout, "Trace: no requests, 0 keys\n") {
					t.Errorf("--allow-empty: stdout %q, want the empty table", r.stdout)
				}
			})
		}
	}
}

// TestInteractive checks which standard inputs get the "reading trace
// from standard input" note: character devices other than /dev/null.
func TestInteractive(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Open("simulate.go")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, c := range []struct {
		name string
		r    io.Reader
	}{{"pipe", pr}, {"null", null}, {"file", file}, {"reader", strings.NewReader("")}} {
		if interactive(c.r) {
			t.Errorf("interactive(%s) = true, want false", c.name)
		}
	}
	// /dev/zero is a character device, as a terminal is: sluice simulate
	// tells the user it reads it (and then finds a line too long).
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Skip("no /dev/zero:", err)
	}
	defer zero.Close()
	if !interactive(zero) {
		t.Errorf("interactive(/dev/zero) = false, want true")
	}
	r := runSluice(t, zero, "simulate", "--algorithm", "gcra", "--limit", "2", "--period", "1s")
	if !strings.HasPrefix(r.stderr, "reading trace from standard input (Ctrl-D to end)\n") || r.code != 1 {
		t.Errorf("simulate from a character device: exit %d, stderr %q; want the note first", r.code, r.stderr)
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

func TestSimulatePattern(t *testing.T) {
	r := runQuiet(t, nil, "simulate", "--algorithm", "all", "--limit", "100", "--period", "1m",
		"--pattern", "boundary", "--rate", "100/1m", "--duration", "4m")
	if want := "Pattern: boundary, 100/1m per key, 4m, 1 key\n" +
		"Trace: 400 requests, 2026-01-01T00:00:59.999Z to 2026-01-01T00:03:00Z (2m0.001s), 1 key\n"; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("stdout starts\n%s\nwant\n%s", r.stdout, want)
	}
	rows := make(map[string][]string)
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 6 {
			rows[f[0]] = f[1:3]
		}
	}
	// Twice 200 requests within 1 ms across a window boundary: the fixed
	// window admits them all, the others half.
	for alg, want := range map[string][]string{
		"token_bucket": {"200", "200"}, "gcra": {"200", "200"}, "leaky_bucket": {"200", "200"},
		"fixed_window": {"400", "0"}, "sliding_log": {"200", "200"}, "sliding_window": {"200", "200"},
	} {
		if got := rows[alg]; !slices.Equal(got, want) {
			t.Errorf("%s: admitted, denied = %q, want %q", alg, got, want)
		}
	}
}

func TestSimulatePatternReproducible(t *testing.T) {
	jsonl := func(pattern, seed string) string {
		t.Helper()
		r := runQuiet(t, nil, "simulate", "--algorithm", "sliding_window", "--limit", "10", "--period", "1s", "--format", "jsonl",
			"--pattern", pattern, "--rate", "12.5", "--duration", "3s", "--keys", "3", "--seed", seed)
		return r.stdout
	}
	for _, pattern := range []string{"steady", "burst", "boundary", "poisson", "ramp", "onoff"} {
		t.Run(pattern, func(t *testing.T) {
			one := jsonl(pattern, "1")
			if again := jsonl(pattern, "1"); again != one {
				t.Error("the same flags gave different output")
			}
			lines := strings.Split(strings.TrimSuffix(one, "\n"), "\n")
			if pattern != "poisson" && len(lines) != 3*38 { // ⌈12.5 × 3⌉ per key
				t.Errorf("%d lines, want %d", len(lines), 3*38)
			}
			var first jsonlLine
			if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
				t.Fatal(err)
			}
			wantKey := "client-1"
			if pattern == "poisson" { // each key has its own stream
				wantKey = first.Key
			}
			if first.Key != wantKey || !strings.HasPrefix(first.Key, "client-") || first.T < 1767225600000 || first.T >= 1767225603000 {
				t.Errorf("first line %+v, want %s within 3s of 2026-01-01T00:00:00Z", first, wantKey)
			}
			other := jsonl(pattern, "2")
			if pattern == "poisson" && other == one {
				t.Error("seeds 1 and 2 gave the same poisson traffic")
			}
			if pattern != "poisson" && other != one {
				t.Errorf("the seed changed the %s pattern, which does not use it", pattern)
			}
		})
	}
}

func TestSimulatePatternFlagErrors(t *testing.T) {
	base := []string{"simulate", "--algorithm", "fixed_window", "--limit", "10", "--period", "1s"}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	checkUsageErrors(t, []usageErrorCase{
		{"pattern and trace", with("--pattern", "steady", "--rate", "5", "--duration", "1s", "--trace", "x.csv"),
			"sluice: simulate: --pattern and --trace cannot be used together: generate traffic or read a trace\n"},
		{"pattern and trace from stdin", with("--trace", "-", "--pattern", "steady", "--rate", "5", "--duration", "1s"),
			"sluice: simulate: --pattern and --trace cannot be used together: generate traffic or read a trace\n"},
		{"unknown pattern", with("--pattern", "sawtooth", "--rate", "5", "--duration", "1s"),
			`sluice: simulate: --pattern: unknown pattern "sawtooth" (want one of steady, burst, boundary, poisson, ramp, onoff)` + "\n"},
		{"no rate", with("--pattern", "steady", "--duration", "1s"),
			"sluice: simulate: --pattern needs --rate (requests per second per key, such as 10 or 2.5, or N/DUR such as 100/1m)\n"},
		{"no duration", with("--pattern", "steady", "--rate", "5"),
			"sluice: simulate: --pattern needs --duration (Go duration syntax: 30s, 4m, 1h)\n"},
		{"bad rate", with("--pattern", "steady", "--rate", "fast", "--duration", "1s"),
			`sluice: simulate: --rate: rate "fast": want requests per second (10, 2.5) or N/DUR (100/1m)` + "\n"},
		{"zero rate", with("--pattern", "steady", "--rate", "0", "--duration", "1s"),
			`sluice: simulate: --rate: rate "0": the rate must be positive` + "\n"},
		{"rate without pattern", with("--rate", "5"), "sluice: simulate: --rate describes generated traffic and needs --pattern\n"},
		{"duration without pattern", with("--duration", "5s"), "sluice: simulate: --duration describes generated traffic and needs --pattern\n"},
		{"seed without pattern", with("--seed", "5"), "sluice: simulate: --seed describes generated traffic and needs --pattern\n"},
		{"zero keys", with("--pattern", "steady", "--rate", "5", "--duration", "1s", "--keys", "0"),
			"sluice: simulate: --keys must be from 1 to 1000000, got 0\n"},
		{"partial period", with("--pattern", "burst", "--rate", "5", "--duration", "1500ms"),
			"sluice: simulate: --pattern burst: the burst pattern needs a duration that is a whole number of periods (1s), got 1.5s\n"},
		{"zero duration", with("--pattern", "steady", "--rate", "5", "--duration", "0s"),
			"sluice: simulate: --pattern steady: duration must be a positive whole number of milliseconds, got 0s\n"},
		{"bad chart extension", with("--chart", "chart.pdf"),
			`sluice: simulate: --chart: chart file "chart.pdf": want a name ending in .svg or .png` + "\n"},
		{"chart without extension", with("--chart", "chart"),
			`sluice: simulate: --chart: chart file "chart": want a name ending in .svg or .png` + "\n"},
	})
	r := runSluice(t, nil, "simulate", "--seed", "-1")
	if r.code != 2 || !strings.Contains(r.stderr, `--seed "-1": not an unsigned integer`) {
		t.Errorf("--seed -1: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSimulateChart(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "boundary.svg")
	pngFile := filepath.Join(dir, "boundary.PNG")
	for name, alg := range map[string]string{svg: "all", pngFile: "fixed_window"} { // one row: pixels are slow under -race
		r := runQuiet(t, nil, "simulate", "--algorithm", alg, "--limit", "100", "--period", "1m",
			"--trace", boundaryTrace, "--chart", name)
		if !strings.Contains(r.stdout, "200") {
			t.Errorf("--chart %s: the table is missing from stdout:\n%s", name, r.stdout)
		}
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window"} {
		if !strings.Contains(string(b), alg+": admitted") {
			t.Errorf("the SVG has no row title for %s", alg)
		}
	}
	if !strings.Contains(string(b), "Trace: "+boundaryTrace+", 200 requests") {
		t.Error("the SVG's heading does not name the trace")
	}
	f, err := os.Open(pngFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the PNG does not decode: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the directory, want the 2 charts and no temporary file", len(entries))
	}

	// A chart with jsonl output: stdout holds the decisions as always.
	r := runSluice(t, nil, "simulate", "--algorithm", "leaky_bucket", "--limit", "100", "--period", "1m",
		"--pattern", "boundary", "--rate", "100/1m", "--duration", "2m", "--format", "jsonl", "--chart", svg)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 200 {
		t.Errorf("jsonl with a chart: exit %d (error %v), %d lines, want 200", r.code, r.err, strings.Count(r.stdout, "\n"))
	}
	b2, _ := os.ReadFile(svg)
	if !strings.Contains(string(b2), "leaky_bucket: admitted 100 of 200") || strings.Contains(string(b2), "fixed_window") {
		t.Error("the SVG was not replaced by the one-algorithm chart")
	}
}

// TestSimulateChartAndTableAgree checks that where the chart and the table
// count differently (all keys against one; leaky_bucket's starts against
// its admissions) each says which it counts.
func TestSimulateChartAndTableAgree(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "keys.svg")
	r := runOK(t, nil, "simulate", "--algorithm", "all", "--limit", "100", "--period", "1m",
		"--pattern", "boundary", "--rate", "100/1m", "--duration", "2m", "--keys", "2", "--chart", svg)
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fixed_window: admitted 400 of 400 requests, at most 400 in any 1m, all 2 keys together",
		"leaky_bucket: admitted 200 of 400 requests, at most 200 started in any 1m (counted at time + delay), all 2 keys together",
		"limit: 100 per 1m × 2 keys",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	testkit.WantAll(t, "the table", r.stdout,
		"fixed_window    400       0       400            200  ",
		"MAX COST IN ANY 1m0s: the most cost admitted for one key within any interval of that length,\n"+
			"counted when admitted (a --chart row adds up all keys, and counts leaky_bucket's requests when they start).\n",
	)
}

func TestSimulateChartErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "chart.svg")
	r := runSluice(t, nil, "simulate", "--algorithm", "gcra", "--limit", "5", "--period", "1s", "--pattern", "steady",
		"--rate", "5", "--duration", "1s", "--chart", missing)
	if r.code != 1 || !errors.Is(r.err, os.ErrNotExist) || r.stdout != "" {
		t.Errorf("chart in a missing directory: exit %d, error %v, stdout %q; want 1, not exist, no output", r.code, r.err, r.stdout)
	}

	// A bad trace leaves an existing chart as it was, and no temporary file.
	dir := t.TempDir()
	chart := filepath.Join(dir, "chart.svg")
	if err := os.WriteFile(chart, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runSluice(t, strings.NewReader("1,a\n0,a\n"), "simulate", "--algorithm", "gcra", "--limit", "5", "--period", "1s", "--chart", chart)
	if r.code != 1 || !strings.Contains(r.stderr, "line 2: t_ms 0 is before 1") {
		t.Errorf("bad trace: exit %d, stderr %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(chart); string(b) != "old" {
		t.Errorf("the chart file was changed to %d bytes", len(b))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want only the old chart", len(entries))
	}
}

// TestSimulateDocCommands runs every sluice simulate command that
// docs/simulate.md shows, with the repository's files, and wants each to
// succeed: a page cannot name a trace that is not there.
func TestSimulateDocCommands(t *testing.T) {
	md, err := os.ReadFile("../../docs/simulate.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, b := range testkit.Blocks(string(md)) {
		text := strings.ReplaceAll(b.Text, "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "go run ./cmd/sluice ")
			if !ok {
				cmd, ok = strings.CutPrefix(strings.TrimSpace(line), "sluice ")
			}
			if !ok || !strings.HasPrefix(cmd, "simulate ") || strings.Contains(cmd, "ALG|all") {
				continue
			}
			args := strings.Fields(cmd)
			for i := 1; i < len(args); i++ {
				switch args[i-1] {
				case "--trace":
					args[i] = filepath.Join("../..", args[i])
				case "--chart":
					args[i] = filepath.Join(t.TempDir(), filepath.Base(args[i]))
				}
			}
			if r := runSluice(t, nil, args...); r.code != 0 {
				t.Errorf("docs/simulate.md line %d: sluice %s: exit %d\n%s", b.Line, cmd, r.code, r.stderr)
			}
			ran++
		}
	}
	if ran < 5 {
		t.Errorf("ran %d commands of docs/simulate.md, want at least 5", ran)
	}
}

// TestSimulatePenalty: a trace through a limit with a penalty shows the
// blocks and their escalation: in the table (blocks, the requests they
// refused, the longest), in the JSON lines (blocked, offence) and in the
// chart's row title.
func TestSimulatePenalty(t *testing.T) {
	trace := "t_ms,key\n0,alice\n0,alice\n0,alice\n1000,alice\n60000,alice\n60000,alice\n60000,alice\n200000,alice\n200000,alice\n200000,alice\n"
	args := []string{"simulate", "--algorithm", "fixed_window", "--limit", "2", "--period", "1m",
		"--block-for", "1m", "--factor", "2", "--forget-after", "1h", "--trace", "-"}
	r := runOK(t, strings.NewReader(trace), args...)
	testkit.WantAll(t, "stdout", r.stdout,
		"Policy: fixed_window, limit 2 per 1m0s, block 1m0s ×2, forgotten after 1h0m0s\n",
		"KEY    REQUESTS  ADMITTED  DENIED  COST  COST ADMITTED  MAX DELAY  BLOCKS  BLOCKED  LONGEST BLOCK\n",
		"alice  10        6         4       10    6              0s         3       1        4m0s\n",
	)
	r = runSluice(t, strings.NewReader(trace), append(args, "--format", "jsonl")...)
	testkit.WantAll(t, "stdout", r.stdout,
		`{"t":0,"key":"alice","cost":1,"allowed":false,"remaining":0,"retry_after_ms":60000,"delay_ms":0,"reset_after_ms":60000,"blocked":true,"offence":true}`,
		`{"t":1000,"key":"alice","cost":1,"allowed":false,"remaining":0,"retry_after_ms":59000,"delay_ms":0,"reset_after_ms":59000,"blocked":true}`,
		`{"t":60000,"key":"alice","cost":1,"allowed":false,"remaining":0,"retry_after_ms":120000,"delay_ms":0,"reset_after_ms":120000,"blocked":true,"offence":true}`,
		`{"t":200000,"key":"alice","cost":1,"allowed":false,"remaining":0,"retry_after_ms":240000,"delay_ms":0,"reset_after_ms":240000,"blocked":true,"offence":true}`,
	)
	chart := filepath.Join(t.TempDir(), "blocks.svg")
	r = runOK(t, strings.NewReader(trace), append(args, "--chart", chart)...)
	svg, err := os.ReadFile(chart)
	if err != nil || !strings.Contains(string(svg), "3 blocks (shaded), the longest 4m0s") {
		t.Errorf("the chart does not name the blocks (%v)", err)
	}
	r = runSluice(t, strings.NewReader(trace), "simulate", "--algorithm", "fixed_window", "--limit", "2", "--period", "1m", "--factor", "2", "--trace", "-")
	if r.code != 2 || !strings.Contains(r.stderr, "give its --block-for too") {
		t.Errorf("--factor without --block-for: exit %d, stderr %q; want 2 and what to do", r.code, r.stderr)
	}
}
