package envoycompat

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit"
)

// compatCase is one call sequence of the suite.
type compatCase struct {
	name string
	// ref names the reference's test, fixture or README section that the
	// case is derived from.
	ref string
	// config names the case's domain document, testdata/domains/NAME.yaml,
	// in envoyproxy/ratelimit's format, its domain written DOMAIN.
	config string
	// diff, when set, is the entry of docs/envoy.md's list of differences
	// that explains where Sluice's answers (the ones expected here) are
	// not the reference's; "" when they are the reference's.
	diff  string
	calls []call
	// counting, when set, are the calls' answers when the service counts
	// refused hits as the reference does by default (sluice serve
	// --envoy-env without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): the
	// reference's own answers, where calls has Sluice's under diff.
	counting []call
}

// callsFor returns the calls of c for a server that counts refused hits
// or not.
func (c compatCase) callsFor(counting bool) []call {
	if counting && c.counting != nil {
		return c.counting
	}
	return c.calls
}

// domain is the name of the case's domain in attempt n.
func (c compatCase) domain(n int) string {
	return fmt.Sprintf("%s~%d", c.name, n)
}

// envoySection returns the envoy section holding every case's domain,
// copies times.
func envoySection(t *testing.T, cases []compatCase) string {
	var b strings.Builder
	b.WriteString("envoy:\n")
	for _, c := range cases {
		if c.config == "" {
			continue
		}
		config := fixture(t, "domains", c.config)
		for n := range copies {
			doc := strings.ReplaceAll(strings.Trim(config, "\n"), "DOMAIN", c.domain(n))
			lines := strings.Split(doc, "\n")
			for i, l := range lines {
				switch {
				case i == 0:
					lines[i] = "  - " + l
				case l != "":
					lines[i] = "    " + l
				}
			}
			b.WriteString(strings.Join(lines, "\n") + "\n")
		}
	}
	return b.String()
}

// serverConfig is the configuration of a sluice serve with the store
// section storeYAML and the envoy section envoy.
func serverConfig(storeYAML, envoy string) string {
	return "listen: {http: \"127.0.0.1:0\", grpc: \"127.0.0.1:0\"}\n" + storeYAML + envoy
}

const memoryStore = "store: {backend: memory}\n"

// redisStore returns the store section of a private Redis.
func redisStore(t *testing.T) string {
	srv := testkit.StartRedis(t)
	return fmt.Sprintf("store:\n  backend: redis\n  redis: {addrs: [%q], prefix: \"compat:\"}\n  timeout: 2s\n  on_error: error\n", srv.Addr)
}

// stores runs f once against a server with the memory store and once
// against one with a private Redis, in parallel.
func stores(t *testing.T, f func(t *testing.T, storeYAML string)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, memoryStore)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		testkit.RequirePrograms(t, "redis-server")
		f(t, redisStore(t))
	})
}

// TestCompatibility runs every call sequence of cases against sluice
// serve with each store.
func TestCompatibility(t *testing.T) {
	if n := countCalls(cases); len(cases) < 60 {
		t.Fatalf("the suite has %d sequences (%d calls), want at least 60", len(cases), n)
	}
	stores(t, func(t *testing.T, storeYAML string) {
		s := startServer(t, "sluice serve", serverConfig(storeYAML, envoySection(t, cases)))
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { runCase(t, s, c) })
		}
	})
}

func countCalls(cs []compatCase) int {
	n := 0
	for _, c := range cs {
		n += len(c.calls)
	}
	return n
}

// runCase runs the calls of c in order. The whole sequence must fall in
// one window of each limit it counts: it starts early in the shortest
// one, and when it crosses a boundary all the same it runs again on a
// fresh copy of its domain.
func runCase(t *testing.T, s *server, c compatCase) {
	periods := c.periods()
	for attempt := range copies {
		if len(periods) > 0 {
			waitEarlyInWindow(periods[0])
		}
		start := time.Now()
		bad := c.run(s, c.domain(attempt), c.callsFor(s.counting))
		end := time.Now()
		if crossed(periods, start, end) {
			t.Logf("attempt %d crossed a window boundary (%v to %v); again on a fresh domain", attempt, start.Format(time.StampMicro), end.Format(time.StampMicro))
			continue
		}
		for _, b := range bad {
			t.Error(b)
		}
		return
	}
	t.Errorf("all %d attempts crossed a window boundary", copies)
}

// run runs the calls of c on domain and returns what differs from the
// expectations.
func (c compatCase) run(s *server, domain string, calls []call) []string {
	var bad []string
	for i, cl := range calls {
		r := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: cl.descs, HitsAddend: cl.hits}
		switch {
		case cl.noDomain:
			r.Domain = ""
		case cl.domain != "":
			r.Domain = cl.domain
		}
		resp, before, after, err := s.ask(r)
		switch {
		case cl.err != "":
			if err == nil {
				bad = append(bad, fmt.Sprintf("call %d: answered %v, want the error %s", i, resp, cl.err))
			} else if got := grpcstatus.Code(err).String(); got != cl.err {
				bad = append(bad, fmt.Sprintf("call %d: error %v, want %s", i, err, cl.err))
			}
			continue
		case err != nil:
			bad = append(bad, fmt.Sprintf("call %d: %v", i, err))
			continue
		}
		for _, b := range cl.check(resp, before, after) {
			bad = append(bad, fmt.Sprintf("call %d %v: %s", i, descString(r), b))
		}
	}
	return bad
}

func descString(r *rlsv3.RateLimitRequest) string {
	var parts []string
	for _, d := range r.Descriptors {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		s := "(" + strings.Join(es, ",") + ")"
		if d.HitsAddend != nil {
			s += fmt.Sprintf("×%d", d.HitsAddend.Value)
		}
		parts = append(parts, s)
	}
	if r.HitsAddend > 0 {
		return fmt.Sprintf("%s hits %d", strings.Join(parts, " "), r.HitsAddend)
	}
	return strings.Join(parts, " ")
}

// periods returns the periods of the limits that the calls of c report,
// shortest first.
func (c compatCase) periods() []time.Duration {
	seen := map[time.Duration]bool{}
	var out []time.Duration
	for _, cl := range c.calls {
		for _, w := range cl.want {
			if w.unit == 0 {
				continue
			}
			p := unitLen[w.unit] * time.Duration(max(w.mult, 1))
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// waitEarlyInWindow sleeps, when less than 80% (at most 5 s) of the
// current window of period p is left, until the next window starts. The
// service's windows follow the wall clock, which only waiting moves.
func waitEarlyInWindow(p time.Duration) {
	now := time.Now()
	left := windowEnd(now, p).Sub(now)
	if left < min(p*8/10, 5*time.Second) {
		time.Sleep(left + 5*time.Millisecond) // to the next window's start
	}
}

// crossed reports whether start and end fall in different windows of one
// of periods.
func crossed(periods []time.Duration, start, end time.Time) bool {
	for _, p := range periods {
		if !windowEnd(start, p).Equal(windowEnd(end, p)) {
			return true
		}
	}
	return false
}

// TestDifferencesAreDocumented: every difference a case shows is an entry
// of docs/envoy.md's list of differences.
func TestDifferencesAreDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, found := strings.Cut(string(b), "## Differences from envoyproxy/ratelimit")
	if !found {
		t.Fatal("docs/envoy.md has no section \"Differences from envoyproxy/ratelimit\"")
	}
	list = strings.Join(strings.Fields(list), " ")
	testkit.WantAll(t, "docs/envoy.md's list of differences", list, "`TestReloadDomains`", "`missing-requests-per-unit`", "`replaces-unknown-name`", "`period-too-long`", "`quota-mode-without-limit`")
	if !strings.Contains(list, diffLimitCounters) {
		t.Errorf("TestReloadDomains shows the difference %q, which docs/envoy.md does not list", diffLimitCounters)
	}
	matching := 0
	for _, c := range cases {
		if c.ref == "" {
			t.Errorf("case %s names no reference test", c.name)
		}
		if c.diff == "" {
			matching++
			continue
		}
		if !strings.Contains(list, c.diff) {
			t.Errorf("case %s shows the difference %q, which docs/envoy.md does not list", c.name, c.diff)
		}
		if !strings.Contains(list, "`"+c.name+"`") {
			t.Errorf("case %s shows the difference %q, but docs/envoy.md's list does not name the case", c.name, c.diff)
		}
	}
	t.Logf("%d sequences: %d answer as the reference, %d show a listed difference", len(cases), matching, len(cases)-matching)
}
