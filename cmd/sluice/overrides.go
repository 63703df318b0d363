package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

const overridesUsage = `Usage: sluice overrides [flags] COMMAND [flags] ...

Lists, sets and removes the runtime overrides of a running sluice serve:
another policy for one key of one limit, until removed or until it
expires (docs/plans.md); resets a key, and lifts a key's block. LIMIT is
a limit of the limits section, or an Envoy descriptor's
(envoy:DOMAIN.PATH, with KEY its values joined by |; docs/envoy.md),
which reset and unblock do not take. The admin
API lives where the admin endpoints do: on listen.admin when it is set,
and behind the admin token when one is configured.

Commands:
  list [LIMIT]                 the overrides in force, of one limit or all
  get LIMIT KEY                one override
  set [flags] LIMIT KEY        set one; flags:
        --limit N              cost units per period (required)
        --period DUR           like 1s, 1m, 1h, 1d, or calendar_day,
                               calendar_week, calendar_month or
                               calendar_year (required)
        --time-zone ZONE       a calendar period's IANA zone (default UTC)
        --week-starts DAY      calendar_week's first day: monday or sunday
        --burst N              the token-bucket family's capacity
        --algorithm NAME       default: the limit's own
        --ttl DUR              remove it after DUR, or
        --expires-at TIME      at an RFC 3339 time
  rm LIMIT KEY                 remove one
  reset LIMIT KEY              forget what KEY has spent and owes under
                               LIMIT (and under its override): it starts
                               afresh
  unblock LIMIT KEY            let KEY in again under LIMIT, which has a
                               penalty: its block lifted, its offences
                               and what it spent forgotten

Flags, which like all the flags here may come before COMMAND or among its
arguments (after --, every argument is LIMIT or KEY, even one that starts
with -):
  --server URL       the service's admin address (default
                     http://127.0.0.1:8080; http:// is assumed, https://
                     when a TLS flag is set)
  --json             print the service's JSON answer as it came
  --timeout DUR      give up after DUR (default 5s)

Flags for a service with TLS (listen.tls) and an admin token:
` + clientUsage + `                   The token is the admin token; without --token and
                   --token-file it comes from SLUICE_TOKEN or
                   SLUICE_ADMIN_TOKEN.

Exit status: 0 done, 1 no such override (get, rm), 2 for anything else:
a wrong command line, a service that cannot be reached or refuses (a
missing token, an invalid override); its message is on standard error.
`

// adminTokenEnv names the environment variable that may hold the admin
// token.
const adminTokenEnv = "SLUICE_ADMIN_TOKEN"

type ovFlags struct {
	server  string
	json    bool
	timeout time.Duration
	client  clientFlags // --ca, --cert, --key, --token, --token-file
}

// ovAnswer is an override as the admin API reports it.
type ovAnswer struct {
	LimitName  string `json:"limit_name"`
	Key        string `json:"key"`
	Algorithm  string `json:"algorithm"`
	Limit      int64  `json:"limit"`
	Period     string `json:"period"`
	TimeZone   string `json:"time_zone"`
	WeekStarts string `json:"week_starts"`
	Burst      int64  `json:"burst"`
	ExpiresAt  string `json:"expires_at"`
	SetBy      string `json:"set_by"`
	SetAt      string `json:"set_at"`
}

func (a *ovAnswer) policy() string {
	s := fmt.Sprintf("%s %d/%s", a.Algorithm, a.Limit, a.Period)
	if a.TimeZone != "" {
		s += " " + a.TimeZone
	}
	if a.WeekStarts == "sunday" {
		s += " (weeks from sunday)"
	}
	if a.Burst > 0 {
		s += fmt.Sprintf(" burst %d", a.Burst)
	}
	return s
}

// register adds the flags of sluice overrides to fs.
func (f *ovFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the service's admin URL")
	f.client.register(fs, true)
	fs.BoolVar(&f.json, "json", false, "print the JSON answer")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait")
}

func runOverrides(ctx context.Context, s streams, args []string) error {
	f, cmd, pos, sub, err := parseOverrides(args)
	if err != nil {
		return err
	}
	if f.timeout <= 0 {
		return usageErrorf("overrides", "overrides: --timeout must be positive, got %v", f.timeout)
	}
	f.client.fromEnv()
	u, err := f.client.serverURL(f.server)
	if err != nil {
		return usageErrorf("overrides", "overrides: --server: %v", err)
	}
	hc, err := f.client.httpClient()
	if err != nil {
		return usageErrorf("overrides", "overrides: %v", err)
	}
	token, err := f.client.bearer(adminTokenEnv)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("overrides: %w", err)}
	}
	c := &ovClient{base: u, token: token, timeout: f.timeout, json: f.json, out: s.stdout, http: hc}
	switch cmd {
	case "list":
		if len(pos) > 1 {
			return usageErrorf("overrides", "overrides list: unexpected argument %q (list [LIMIT])", pos[1])
		}
		path := "/v1/overrides"
		if len(pos) == 1 {
			path += "/" + url.PathEscape(pos[0])
		}
		return c.list(ctx, path)
	case "get":
		if len(pos) != 2 {
			return usageErrorf("overrides", "overrides get: want LIMIT KEY")
		}
		return c.one(ctx, http.MethodGet, pos[0], pos[1], nil)
	case "rm":
		if len(pos) != 2 {
			return usageErrorf("overrides", "overrides rm: want LIMIT KEY")
		}
		return c.one(ctx, http.MethodDelete, pos[0], pos[1], nil)
	case "reset":
		if len(pos) != 2 {
			return usageErrorf("overrides", "overrides reset: want LIMIT KEY")
		}
		return c.reset(ctx, pos[0], pos[1])
	case "unblock":
		if len(pos) != 2 {
			return usageErrorf("overrides", "overrides unblock: want LIMIT KEY")
		}
		return c.unblock(ctx, pos[0], pos[1])
	default: // set
		body, err := ovSetBody(sub, pos)
		if err != nil {
			return err
		}
		return c.one(ctx, http.MethodPut, pos[0], pos[1], body)
	}
}

// parseOverrides parses the command line of sluice overrides: its flags
// (in f), the command, and the command's arguments pos; sub holds the
// flags given, those of "set" among them.
func parseOverrides(args []string) (f *ovFlags, cmd string, pos []string, sub *flag.FlagSet, err error) {
	fs := flag.NewFlagSet("overrides", flag.ContinueOnError)
	f = &ovFlags{}
	f.register(fs)
	if err := parseFlags(fs, "overrides", "overrides", overridesUsage, args); err != nil {
		return nil, "", nil, nil, err
	}
	if fs.NArg() == 0 {
		return nil, "", nil, nil, usageErrorf("overrides", "overrides: name a command: list, get, set, rm, reset or unblock")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "ls":
		cmd = "list"
	case "delete":
		cmd = "rm"
	case "list", "get", "set", "rm", "reset", "unblock":
	default:
		return nil, "", nil, nil, usageErrorf("overrides", "overrides: unknown command %q (want list, get, set, rm, reset or unblock)", cmd)
	}
	// The flags of overrides may also come after the command, among its
	// own: sluice overrides set --server URL api-key k --limit 5 ...
	sub = flag.NewFlagSet("overrides "+cmd, flag.ContinueOnError)
	fs.VisitAll(func(fl *flag.Flag) { sub.Var(fl.Value, fl.Name, fl.Usage) })
	if cmd == "set" {
		registerSetFlags(sub)
	}
	if pos, err = parseInterleaved(sub, "overrides "+cmd, "overrides", overridesUsage, rest); err != nil {
		return nil, "", nil, nil, err
	}
	return f, cmd, pos, sub, nil
}

// setFlags are the flags of "set": each is the PUT body's field of its
// name, '-' written '_'.
var setFlags = map[string]bool{
	"limit": true, "period": true, "time-zone": true, "week-starts": true,
	"burst": true, "algorithm": true, "ttl": true, "expires-at": true,
}

// registerSetFlags adds the flags of "set" to fs.
func registerSetFlags(fs *flag.FlagSet) {
	fs.Int64("limit", 0, "cost units per period")
	fs.String("period", "", "the period")
	fs.String("time-zone", "", "a calendar period's zone")
	fs.String("week-starts", "", "a calendar week's first day")
	fs.Int64("burst", 0, "the capacity")
	fs.String("algorithm", "", "the algorithm")
	fs.String("ttl", "", "remove after")
	fs.String("expires-at", "", "remove at")
}

// ovSetBody makes the PUT body of "set" from the flags of "set" given in
// fs and checks its arguments pos: LIMIT KEY.
func ovSetBody(fs *flag.FlagSet, pos []string) ([]byte, error) {
	if len(pos) != 2 {
		return nil, usageErrorf("overrides", "overrides set: want LIMIT KEY and --limit N --period DUR")
	}
	body := map[string]any{} // the flags given
	fs.Visit(func(fl *flag.Flag) {
		if setFlags[fl.Name] {
			body[strings.ReplaceAll(fl.Name, "-", "_")] = fl.Value.(flag.Getter).Get()
		}
	})
	return json.Marshal(body)
}

// ovClient calls the admin API.
type ovClient struct {
	base    *url.URL
	token   string
	timeout time.Duration
	json    bool
	out     io.Writer
	http    *http.Client
}

// do sends a request and returns the answer's status and body; a
// transport failure is an exit status 2.
func (c *ovClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	endpoint := c.base.String() + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint, rd)
	if err != nil {
		return 0, nil, &exitError{code: 2, err: fmt.Errorf("overrides: %w", err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, &exitError{code: 2, err: fmt.Errorf("overrides: %w", err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, &exitError{code: 2, err: fmt.Errorf("overrides: reading the answer of %s: %w", endpoint, err)}
	}
	return resp.StatusCode, raw, nil
}

// ovRefused turns an answer that is not a success into an error: exit
// status 1 for a missing override, 2 for the rest.
func ovRefused(status int, raw []byte, missingIsOne bool) error {
	var e struct {
		Error  string `json:"error"`
		Detail string `json:"detail"` // problem+json
	}
	msg := http.StatusText(status)
	if json.Unmarshal(raw, &e) == nil && e.Error+e.Detail != "" {
		msg = e.Error + e.Detail
	}
	code := 2
	if status == http.StatusNotFound && missingIsOne && strings.HasPrefix(msg, "no override") {
		code = 1
	}
	if status == http.StatusUnauthorized {
		msg += " (give the admin token with --token-file or $" + adminTokenEnv + ")"
	}
	return &exitError{code: code, err: fmt.Errorf("overrides: %d: %s", status, msg)}
}

// ask sends a request and returns the body of a successful answer (200
// or 201), or, when the answer is a refusal, ovRefused's error. With
// --json it writes the body out as it came and returns done: the caller
// has nothing left to print.
func (c *ovClient) ask(ctx context.Context, method, path string, body []byte, missingIsOne bool) (raw []byte, done bool, err error) {
	status, raw, err := c.do(ctx, method, path, body)
	if err != nil {
		return nil, true, err
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return nil, true, ovRefused(status, raw, missingIsOne)
	}
	if c.json {
		_, err := c.out.Write(raw)
		return nil, true, err
	}
	return raw, false, nil
}

func (c *ovClient) list(ctx context.Context, path string) error {
	raw, done, err := c.ask(ctx, http.MethodGet, path, nil, false)
	if done {
		return err
	}
	var a struct {
		Overrides []ovAnswer `json:"overrides"`
		Shared    bool       `json:"shared"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("overrides: the answer is not a list: %w", err)}
	}
	where := "this instance only (memory store)"
	if a.Shared {
		where = "shared by every instance (redis)"
	}
	if len(a.Overrides) == 0 {
		_, err := fmt.Fprintf(c.out, "no overrides; %s\n", where)
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tKEY\tPOLICY\tEXPIRES\tSET BY")
	for i := range a.Overrides {
		o := &a.Overrides[i]
		exp := o.ExpiresAt
		if exp == "" {
			exp = "never"
		}
		fmt.Fprintf(tw, "%s\t%q\t%s\t%s\t%s\n", o.LimitName, o.Key, o.policy(), exp, o.SetBy)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.out, "%d overrides; %s\n", len(a.Overrides), where)
	return err
}

func (c *ovClient) one(ctx context.Context, method, limit, key string, body []byte) error {
	path := "/v1/overrides/" + url.PathEscape(limit) + "/" + url.PathEscape(key)
	raw, done, err := c.ask(ctx, method, path, body, method != http.MethodPut)
	if done {
		return err
	}
	var a struct {
		Override, Before, Deleted *ovAnswer
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("overrides: the answer is not an override: %w", err)}
	}
	describe := func(o *ovAnswer) string {
		s := o.policy()
		if o.ExpiresAt != "" {
			s += " until " + o.ExpiresAt
		}
		return s
	}
	var line string
	switch {
	case method == http.MethodDelete && a.Deleted != nil:
		line = fmt.Sprintf("removed: limit %q, key %q: was %s", a.Deleted.LimitName, a.Deleted.Key, describe(a.Deleted))
	case method == http.MethodPut && a.Override != nil:
		line = fmt.Sprintf("set: limit %q, key %q: %s", a.Override.LimitName, a.Override.Key, describe(a.Override))
		if a.Before != nil {
			line += " (was " + describe(a.Before) + ")"
		}
	case a.Override != nil:
		line = fmt.Sprintf("limit %q, key %q: %s, set by %s at %s", a.Override.LimitName, a.Override.Key, describe(a.Override), a.Override.SetBy, a.Override.SetAt)
	default:
		return &exitError{code: 2, err: errors.New("overrides: the answer holds no override")}
	}
	_, err = fmt.Fprintln(c.out, line)
	return err
}

// reset asks the service to reset key under limit.
func (c *ovClient) reset(ctx context.Context, limit, key string) error {
	path := "/v1/reset/" + url.PathEscape(limit) + "/" + url.PathEscape(key)
	_, done, err := c.ask(ctx, http.MethodPost, path, nil, false)
	if done {
		return err
	}
	_, err = fmt.Fprintf(c.out, "reset: limit %q, key %q: it starts afresh\n", limit, key)
	return err
}

// unblock asks the service to lift key's block under limit.
func (c *ovClient) unblock(ctx context.Context, limit, key string) error {
	path := "/v1/unblock/" + url.PathEscape(limit) + "/" + url.PathEscape(key)
	raw, done, err := c.ask(ctx, http.MethodPost, path, nil, false)
	if done {
		return err
	}
	var a struct {
		Unblocked struct {
			WasBlocked bool `json:"was_blocked"`
		} `json:"unblocked"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("overrides: the answer is not an unblock: %w", err)}
	}
	was := "it was not blocked"
	if a.Unblocked.WasBlocked {
		was = "its block is lifted"
	}
	_, err = fmt.Fprintf(c.out, "unblock: limit %q, key %q: %s; it starts afresh\n", limit, key, was)
	return err
}
