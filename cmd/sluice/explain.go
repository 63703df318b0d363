package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/service/server"
)

// runExplain asks the service what it knows of the key (GET /v1/explain)
// and prints it, for sluice check --explain. The exit status says what a
// request would get: 0 allowed, 1 denied, 2 anything else.
func runExplain(ctx context.Context, s streams, f *checkFlags, u *url.URL) error {
	failf := func(format string, args ...any) error {
		return &exitError{code: 2, err: fmt.Errorf("check --explain: "+format, args...)}
	}
	token, err := f.client.bearer(adminTokenEnv)
	if err != nil {
		return failf("%v", err)
	}
	q := url.Values{"limit": {f.limit}, "key": {f.key}}
	if f.cost != 1 {
		q.Set("cost", strconv.FormatInt(f.cost, 10))
	}
	endpoint := u.JoinPath("/v1/explain")
	endpoint.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint.String(), nil)
	if err != nil {
		return failf("%v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	name := u.JoinPath("/v1/explain").String()
	var a server.Explanation
	raw, err := askService(f, req, name, map[int]string{
		http.StatusUnauthorized: " (pass the admin token with --token-file or SLUICE_ADMIN_TOKEN)",
		http.StatusNotFound:     " (with listen.admin set, --server must name the admin listener)",
	}, "an explanation", &a)
	if err != nil {
		return failf("%v", err)
	}
	return printAnswer(s, f, raw, formatExplain(&a), a.Allowed, failf)
}

// formatExplain lays an explanation out for people: one line per fact,
// then the service's summary.
func formatExplain(a *server.Explanation) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("limit", "%s (%s)", a.Limit, explainPolicy(a))
	row("key", "%s", strconv.Quote(a.Key))
	row("at", "%s", a.At)
	if a.Tracked {
		row("state", "tracked")
	} else {
		row("state", "not tracked: at its initial state")
	}
	explainState(a, row)
	row("a request", "%s", explainNext(a))
	tw.Flush()
	if a.Summary != "" {
		b.WriteString("\n" + a.Summary + "\n")
	}
	return b.String()
}

// explainPolicy describes the policy of an explanation on one line.
func explainPolicy(a *server.Explanation) string {
	policy := fmt.Sprintf("%s, %d per %s", a.Algorithm, a.Policy.Limit, a.Policy.Period)
	if a.Policy.TimeZone != "" {
		policy += " in " + a.Policy.TimeZone
	}
	if a.Policy.WeekStarts != "" {
		policy += fmt.Sprintf(" (weeks from %s)", a.Policy.WeekStarts)
	}
	if a.Policy.Burst > 0 {
		policy += fmt.Sprintf(", burst %d", a.Policy.Burst)
	}
	if a.Policy.Shadow {
		policy += ", dry run"
	}
	return policy
}

// explainState writes the rows of the algorithm's state: the bucket, the
// windows or the log.
func explainState(a *server.Explanation, row func(k, format string, args ...any)) {
	st := &a.State
	switch {
	case st.Tokens != "":
		capacity := a.Policy.Burst
		if a.Algorithm == "leaky_bucket" {
			row("queued", "%s", server.ReadableAmount(st.Queued, capacity, ""))
		} else {
			row("tokens", "%s", server.ReadableAmount(st.Tokens, capacity, ""))
		}
		if st.BacklogUS != nil && *st.BacklogUS > 0 {
			what := "full in"
			if a.Algorithm == "leaky_bucket" {
				what = "empty in"
			}
			row(what, "%v (at %s)", time.Duration(*st.BacklogUS)*time.Microsecond, st.FullAt)
		}
	case st.WindowStart != "":
		row("window", "%s to %s", st.WindowStart, st.WindowEnd)
		if st.Previous != nil {
			row("previous", "%d", *st.Previous)
		}
		if st.Current != nil {
			row("current", "%d", *st.Current)
		}
		row("estimate", "%s", server.ReadableAmount(st.Estimate, a.Policy.Limit, ""))
	case st.Held != nil:
		leases := int64(0)
		if st.Leases != nil {
			leases = *st.Leases
		}
		row("held", "%d of %d by %d leases", *st.Held, a.Policy.Limit, leases)
		if st.Expires != "" {
			row("expires", "%s", st.Expires)
		}
	case st.Entries != nil:
		counted := int64(0)
		if st.Counted != nil {
			counted = *st.Counted
		}
		row("counted", "%d of %d in %d entries", counted, a.Policy.Limit, *st.Entries)
		if st.Oldest != "" {
			row("oldest", "%s", st.Oldest)
			row("newest", "%s", st.Newest)
		}
	}
}

// explainNext says what a request of the explanation's cost would get.
func explainNext(a *server.Explanation) string {
	next := fmt.Sprintf("cost %d: ", a.Cost)
	switch {
	case a.Allowed:
		next += fmt.Sprintf("allowed, %d remaining", a.Remaining)
		if a.DelayMS > 0 {
			next += fmt.Sprintf(", after waiting %v", millisDuration(a.DelayMS))
		}
	case a.RetryAfterMS < 0:
		next += "denied: it can never fit"
	default:
		next += fmt.Sprintf("denied, retry in %v", millisDuration(a.RetryAfterMS))
	}
	if a.ResetAfterMS > 0 {
		next += fmt.Sprintf("; back to initial in %v", millisDuration(a.ResetAfterMS))
	}
	return next
}
