package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/service/server"
)

const checkUsage = `Usage: sluice check [--server URL] --limit NAME --key KEY [--cost N] [--json]
       sluice check --explain [--server ADMIN-URL] [--token-file FILE] --limit NAME --key KEY
       sluice check overrides list|get|set|rm ...   (the same as sluice overrides; see sluice help overrides)

Asks a running sluice serve for a decision (POST /v1/check) and prints it
on one line, such as

  allowed: limit "demo", key "alice", cost 1: 9 of 10 remaining, full again in 6s
  denied: limit "demo", key "alice", cost 1: 0 of 10 remaining, retry in 5.999s

Remaining counts up to the limit; for a limit of the token-bucket family
whose burst is not its limit, up to the burst, which the line names:

  allowed: limit "api-key", key "k1", cost 1: 49 of burst 50 remaining (limit 10), full again in 100ms

"Full again in" is when the key's whole quota is back if no other request
comes (the t of the RateLimit header field). For a sliding_window it can
be up to twice the period (a window of 1m may say 1m43s): what a window
admitted still counts, less and less, until the end of the next window.

An allowed request is charged, as any call of the decision API is.

Flags:
  --server URL     the service's HTTP address (default http://127.0.0.1:8080;
                   http:// is assumed when no scheme is given, https:// when
                   a TLS flag is set)
  --limit NAME     a limit of the service's configuration (required)
  --key KEY        the key to decide for (required, not empty)
  --cost N         what the request costs (default 1); 0 checks a budget
                   whose cost is known afterwards: allowed while a unit is
                   left, charging nothing
  --json           print the service's JSON answer as it came
  --timeout DUR    give up after DUR (default 5s)
  --explain        charge nothing: ask what the service knows of the key
                   (GET /v1/explain, an admin endpoint: with listen.admin set,
                   --server names that listener) and print the state (tokens,
                   window counts, queue) and what a request would get

Flags for a service with TLS or tokens (listen.tls, listen.tokens_file):
` + clientUsage + `                   The token is a token of listen.tokens_file for a
                   decision, and the admin token for --explain (which also
                   reads SLUICE_ADMIN_TOKEN).

Exit status: 0 allowed (a dry-run limit that would deny counts as
allowed), 1 denied, 2 for anything else: a wrong command line, a service
that cannot be reached, or an answer other than a decision (an unknown
limit, a store failure); its message is on standard error. A cost above
the limit's capacity is denied (1), "never".
`

// checkAnswer is the answer of POST /v1/check to one check.
type checkAnswer struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Burst        int64 `json:"burst"` // when it is not Limit
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	DelayMS      int64 `json:"delay_ms"`
	Degraded     bool  `json:"degraded"`
	Shadow       bool  `json:"shadow"`
	ShadowDenied bool  `json:"shadow_denied"`
}

// maxAnswer is the most sluice check reads of an answer.
const maxAnswer = 1 << 20

type checkFlags struct {
	server, limit, key string
	cost               int64
	json               bool
	timeout            time.Duration
	explain            bool
	// client holds --ca, --cert, --key, --token and --token-file
	// (client.go); http is the client they make.
	client clientFlags
	http   *http.Client
}

// checkFlagSet returns the flags of sluice check, parsed into f.
func checkFlagSet(f *checkFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the service's URL")
	fs.StringVar(&f.limit, "limit", "", "the limit's name")
	fs.StringVar(&f.key, "key", "", "the key")
	fs.Int64Var(&f.cost, "cost", 1, "the request's cost")
	fs.BoolVar(&f.json, "json", false, "print the JSON answer")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait")
	fs.BoolVar(&f.explain, "explain", false, "explain the key's state, charging nothing")
	f.client.register(fs, false)
	return fs
}

func parseCheckFlags(args []string, stderr io.Writer) (*checkFlags, *url.URL, error) {
	f := &checkFlags{}
	fs := checkFlagSet(f)
	if err := parseFlags(fs, "check", "check", checkUsage, args); err != nil {
		return nil, nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, nil, usageErrorf("check", "check: unexpected argument %q (flags only)", fs.Arg(0))
	case f.limit == "":
		return nil, nil, usageErrorf("check", "check: --limit is required")
	case f.key == "":
		return nil, nil, usageErrorf("check", "check: --key is required and must not be empty")
	case f.cost < 0:
		return nil, nil, usageErrorf("check", "check: --cost must be 0 or more, got %d", f.cost)
	case f.cost == 0 && f.explain:
		return nil, nil, usageErrorf("check", "check: --cost must be at least 1 with --explain, got 0")
	case f.timeout <= 0:
		return nil, nil, usageErrorf("check", "check: --timeout must be positive, got %v", f.timeout)
	}
	f.client.fromEnv()
	u, err := f.client.serverURL(f.server)
	if err != nil {
		return nil, nil, usageErrorf("check", "check: --server: %v", err)
	}
	if f.http, err = f.client.httpClient(); err != nil {
		return nil, nil, usageErrorf("check", "check: %v", err)
	}
	return f, u, nil
}

// overridesAt returns the index in args of the word overrides when it
// is the first argument after check's flags, and -1 otherwise.
func overridesAt(args []string) int {
	fs := checkFlagSet(&checkFlags{})
	fs.SetOutput(io.Discard)
	if fs.Parse(args) != nil || fs.Arg(0) != "overrides" {
		return -1
	}
	i := len(args) - fs.NArg()
	if i > 0 && args[i-1] == "--" {
		return -1
	}
	return i
}

// serverURL parses --server, with http:// assumed.
func serverURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

func runCheck(ctx context.Context, s streams, args []string) error {
	// `sluice check overrides ...` is `sluice overrides ...`: checking a
	// key and changing its limit are both things a script asks the
	// service. Flags before the word overrides are the flags of sluice
	// overrides too (sluice check --server URL overrides list).
	if i := overridesAt(args); i >= 0 {
		return runOverrides(ctx, s, slices.Concat(args[:i], args[i+1:]))
	}
	f, u, err := parseCheckFlags(args, s.stderr)
	if err != nil {
		return err
	}
	if f.explain {
		return runExplain(ctx, s, f, u)
	}
	failf := func(format string, args ...any) error {
		return &exitError{code: 2, err: fmt.Errorf("check: "+format, args...)}
	}
	body, err := json.Marshal(struct {
		Limit string `json:"limit"`
		Key   string `json:"key"`
		Cost  int64  `json:"cost"`
	}{f.limit, f.key, f.cost})
	if err != nil {
		return failf("%v", err)
	}
	if len(body) > server.MaxCheckBody {
		// The service would refuse the body as too large; the key is what
		// made it so.
		keyJSON, _ := json.Marshal(f.key)
		room := server.MaxCheckBody - (len(body) - len(keyJSON)) - 2
		return &exitError{code: 2, err: fmt.Errorf("check: --key is too long: %d bytes (the service takes keys of at most %d bytes here: its request body is limited to %d bytes)", len(f.key), room, server.MaxCheckBody)}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	endpoint := u.JoinPath("/v1/check").String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return failf("%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	token, err := f.client.bearer()
	if err != nil {
		return failf("%v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	var a checkAnswer
	raw, err := askService(f, req, endpoint, map[int]string{
		http.StatusUnauthorized: " (pass a token of listen.tokens_file with --token-file or SLUICE_TOKEN)",
	}, "a decision", &a)
	if err != nil {
		return failf("%v", err)
	}
	return printAnswer(s, f, raw, formatAnswer(f, &a)+"\n", a.Allowed, failf)
}

// askService sends req with the client of f and returns the body of a 200
// answer, decoded into answer (what says what it should be, for the error
// when it is not). Any other answer is an error that names the endpoint (name), the
// status, the service's message (its error, or a problem's detail) and the
// hint for that status.
func askService(f *checkFlags, req *http.Request, name string, hints map[int]string, what string, answer any) ([]byte, error) {
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %v", name, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, answer); err != nil {
			return nil, fmt.Errorf("%s answered 200 with a body that is not %s: %v", name, what, err)
		}
		return raw, nil
	}
	var e struct {
		Error  string `json:"error"`
		Detail string `json:"detail"` // problem+json
	}
	if json.Unmarshal(raw, &e) == nil && e.Error+e.Detail != "" {
		return nil, fmt.Errorf("%s answered %s: %s%s", name, resp.Status, e.Error+e.Detail, hints[resp.StatusCode])
	}
	return nil, fmt.Errorf("%s answered %s%s", name, resp.Status, hints[resp.StatusCode])
}

// printAnswer writes the service's answer, raw with --json and as text
// otherwise, and returns the exit status of a decision that is not
// allowed (1); failf says a failure to write.
func printAnswer(s streams, f *checkFlags, raw []byte, text string, allowed bool, failf func(string, ...any) error) error {
	var err error
	if f.json {
		_, err = s.stdout.Write(raw)
	} else {
		_, err = io.WriteString(s.stdout, text)
	}
	if err != nil {
		return failf("%v", err)
	}
	if !allowed {
		return &exitError{code: 1}
	}
	return nil
}

// formatAnswer describes a decision on one line.
func formatAnswer(f *checkFlags, a *checkAnswer) string {
	var b strings.Builder
	switch {
	case a.Shadow && a.ShadowDenied:
		b.WriteString("allowed (dry run: the limit would have denied)")
	case a.Allowed:
		b.WriteString("allowed")
	default:
		b.WriteString("denied")
	}
	fmt.Fprintf(&b, ": limit %s, key %s, cost %d: ", strconv.Quote(f.limit), strconv.Quote(f.key), f.cost)
	if a.Burst > 0 && a.Burst != a.Limit {
		// A bucket's remaining counts up to its burst, not its limit.
		fmt.Fprintf(&b, "%d of burst %d remaining (limit %d)", a.Remaining, a.Burst, a.Limit)
	} else {
		fmt.Fprintf(&b, "%d of %d remaining", a.Remaining, a.Limit)
	}
	if !a.Allowed || a.ShadowDenied {
		switch {
		case a.RetryAfterMS < 0:
			b.WriteString(", never: the cost exceeds the limit's capacity")
		case a.RetryAfterMS > 0:
			fmt.Fprintf(&b, ", retry in %v", millisDuration(a.RetryAfterMS))
		}
	} else if a.ResetAfterMS > 0 {
		fmt.Fprintf(&b, ", full again in %v", millisDuration(a.ResetAfterMS))
	}
	if a.DelayMS > 0 {
		fmt.Fprintf(&b, ", wait %v before proceeding", millisDuration(a.DelayMS))
	}
	if a.Degraded {
		b.WriteString(" (degraded: the store's backend did not answer; its on_error policy decided)")
	}
	return b.String()
}

func millisDuration(ms int64) time.Duration {
	return time.Duration(ms) * time.Millisecond
}
