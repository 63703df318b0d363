package envoycompat

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestReloadDomains: a reload adds and removes domains, keeps the
// counters of limits it does not change and turns on response headers; a
// bad file is refused and the service keeps its configuration. Its envoy
// sections are testdata/reload's: before (two domains; alpha's descriptor
// detailed has detailed_metric), after (alpha as it was, beta removed,
// gamma added, and the reference's response headers asked for) and broken
// (refused: the reference keeps its configuration when a new one fails to
// load, and so does Sluice). Derived
// from test/integration/integration_test.go (its runtime reload of
// reload.yaml and existingDomainreload.yaml) and test/service's
// TestServiceWithDefaultRatelimitHeaders; detailed_metric from
// test/config TestBasicConfig's key7.
func TestReloadDomains(t *testing.T) {
	stores(t, func(t *testing.T, storeYAML string) {
		// The counts below are of one hour's window: start with a minute
		// of it left at least. The service's windows follow the wall
		// clock, which only waiting moves.
		if now := time.Now(); windowEnd(now, time.Hour).Sub(now) < time.Minute {
			time.Sleep(windowEnd(now, time.Hour).Sub(now) + 10*time.Millisecond) // to the next hour's start
		}
		s := startServer(t, "sluice serve", serverConfig(storeYAML, fixture(t, "reload", "before")))
		want := func(domain string, desc *rlscommon.RateLimitDescriptor, w status) *rlsv3.RateLimitResponse {
			t.Helper()
			resp, before, after, err := s.ask(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds(desc)})
			if err != nil {
				t.Fatalf("%s: %v", domain, err)
			}
			c := one(desc, w)
			for _, b := range c.check(resp, before, after) {
				t.Errorf("%s %s: %s", domain, descString(&rlsv3.RateLimitRequest{Descriptors: ds(desc)}), b)
			}
			return resp
		}
		want("alpha", d("k", "x"), ok(2, hour, 1))
		want("beta", d("k", "x"), ok(1, hour, 0))
		want("gamma", d("k", "x"), none)
		want("alpha", d("detailed", "v1"), ok(5, hour, 4))
		want("alpha", d("m", "x"), ok(2, hour, 1))
		metrics := s.metrics(t)
		testkit.WantAll(t, "/metrics", metrics, `descriptor="detailed_v1",domain="alpha"`, `descriptor="k",domain="alpha"`)

		s.reload(t, serverConfig(storeYAML, fixture(t, "reload", "after")))
		testkit.WaitFor(t, waitTimeout, "gamma after the reload", func() bool {
			resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: "gamma", Descriptors: ds(d("probe", "x"))})
			return err == nil && len(resp.Statuses) == 1 && s.hasDomain(t, "gamma")
		})
		want("alpha", d("k", "x"), ok(2, hour, 0)) // its counter is kept
		want("beta", d("k", "x"), none)            // removed
		// A limit whose numbers changed starts afresh: the listed
		// difference "Counters belong to a limit" (the reference would
		// answer 1, its counter holding the earlier request).
		want("alpha", d("m", "x"), ok(3, hour, 2))
		resp := want("gamma", d("k", "x"), ok(1, hour, 0))
		checkReferenceHeaders(t, resp, "1", "0", false)
		resp = want("gamma", d("k", "x"), over(1, hour))
		checkReferenceHeaders(t, resp, "1", "0", true)

		checkIETFAfterReload(t, s, storeYAML)
		resp = want("gamma", d("k", "x"), over(1, hour))
		if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[0].Key != "RateLimit-Policy" || h[1].Value != `"k";r=0;t=`+h[2].Value || h[2].Key != "Retry-After" {
			t.Errorf("OVER_LIMIT headers %v, want RateLimit-Policy, RateLimit with r=0 and t equal to Retry-After", h)
		}

		s.reload(t, serverConfig(storeYAML, fixture(t, "reload", "broken")))
		testkit.WaitFor(t, waitTimeout, "the bad file to be refused", func() bool { return strings.Contains(s.log.String(), "hours") })
		want("gamma", d("k", "x"), over(1, hour))
		want("alpha", d("k", "x"), over(2, hour))
	})
}

// hasDomain reports whether domain is configured: a descriptor with an
// override gets a limit only in a configured domain.
func (s *server) hasDomain(t *testing.T, domain string) bool {
	resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds(dl(1000, hour, "probe", fmt.Sprint(time.Now().UnixNano())))})
	return err == nil && resp.Statuses[0].GetCurrentLimit() != nil
}

// checkReferenceHeaders checks the headers envoyproxy/ratelimit adds
// with LIMIT_RESPONSE_HEADERS_ENABLED, and Retry-After when overLimit.
func checkReferenceHeaders(t *testing.T, resp *rlsv3.RateLimitResponse, limit, remaining string, overLimit bool) {
	t.Helper()
	h := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["RateLimit-Limit"] != limit || h["RateLimit-Remaining"] != remaining {
		t.Errorf("headers %v, want RateLimit-Limit %s and RateLimit-Remaining %s", h, limit, remaining)
	}
	if r, err := strconv.Atoi(h["RateLimit-Reset"]); err != nil || r < 1 || r > 3600 {
		t.Errorf("RateLimit-Reset = %q, want the seconds to the end of the hour", h["RateLimit-Reset"])
	}
	if _, has := h["Retry-After"]; has != overLimit {
		t.Errorf("headers %v: Retry-After present = %v, want %v", h, has, overLimit)
	}
}

// metrics returns the service's Prometheus metrics.
func (s *server) metrics(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+s.http+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, b := testkit.DoHTTP(t, http.DefaultClient, req)
	return b
}

// checkIETFAfterReload reloads testdata/reload/after.yaml with
// response_headers: ietf and checks the fields of a fresh alpha
// descriptor.
func checkIETFAfterReload(t *testing.T, s *server, storeYAML string) {
	t.Helper()
	// The IETF fields instead (draft -10), the same limits kept.
	s.reload(t, serverConfig(storeYAML, strings.Replace(fixture(t, "reload", "after"), "response_headers: reference", "response_headers: ietf", 1)))
	var ietf map[string]string
	probes := 0
	testkit.WaitFor(t, waitTimeout, "the IETF fields after the reload", func() bool {
		probes++ // a value of its own each time: a fresh counter
		resp, _, _, err := s.ask(&rlsv3.RateLimitRequest{Domain: "alpha", Descriptors: ds(d("detailed", fmt.Sprint("probe-", probes)))})
		if err != nil {
			return false
		}
		ietf = map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			ietf[hv.Key] = hv.Value
		}
		return ietf["RateLimit-Policy"] != ""
	})
	if got, want := ietf["RateLimit-Policy"], `"detailed";q=5;w=3600`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got := ietf["RateLimit"]; !strings.HasPrefix(got, `"detailed";r=4;t=`) {
		t.Errorf("RateLimit = %q, want \"detailed\";r=4;t=...", got)
	}
}
