package rls

import (
	"fmt"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// usageYAML has a budget of 100 units an hour per tenant in each of two
// algorithms, reported as usage, a shadow budget, and a plain limit per
// address beside them.
const usageYAML = `
domain: llm
descriptors:
  - key: tenant
    usage: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: team
    usage: true
    algorithm: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: trial
    usage: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// usageStep is one call of a usage timeline: at, its descriptors (hits <
// 0: none of the descriptor's own, so the request's 1), and the answer.
type usageStep struct {
	at      time.Duration
	descs   []usageDesc
	overall rlsv3.RateLimitResponse_Code
	want    []want
}

type usageDesc struct {
	key, value string
	hits       int64
}

// u is a descriptor (key, value) with hits_addend hits, or none for -1.
func u(key, value string, hits int64) usageDesc { return usageDesc{key, value, hits} }

var usageTimelines = []struct {
	name  string
	steps []usageStep
}{
	// The acceptance timeline: 100 an hour in fixed windows; usage of 60
	// leaves 40; a second 60 is charged (120 of 100) and answered
	// OVER_LIMIT; every request after it, checks of 0 included, is refused
	// until the window ends, and the next window starts afresh.
	{"fixed window goes into debt and out with the window", []usageStep{
		{0, []usageDesc{u("tenant", "t1", 60)}, ok, []want{{ok, 100, hour, 40, time.Hour}}},
		{time.Minute, []usageDesc{u("tenant", "t1", 0)}, ok, []want{{ok, 100, hour, 40, 59 * time.Minute}}},
		{2 * time.Minute, []usageDesc{u("tenant", "t1", 60)}, over, []want{{over, 100, hour, 0, 58 * time.Minute}}},
		{3 * time.Minute, []usageDesc{u("tenant", "t1", 0)}, over, []want{{over, 100, hour, 0, 57 * time.Minute}}},
		{4 * time.Minute, []usageDesc{u("tenant", "t1", -1)}, over, []want{{over, 100, hour, 0, 56 * time.Minute}}},
		// Another tenant was never in debt.
		{5 * time.Minute, []usageDesc{u("tenant", "t2", 0)}, ok, []want{{ok, 100, hour, 100, 0}}},
		{59*time.Minute + 59*time.Second, []usageDesc{u("tenant", "t1", 0)}, over, []want{{over, 100, hour, 0, time.Second}}},
		{time.Hour, []usageDesc{u("tenant", "t1", 0)}, ok, []want{{ok, 100, hour, 100, 0}}},
		{time.Hour, []usageDesc{u("tenant", "t1", 30)}, ok, []want{{ok, 100, hour, 70, time.Hour}}},
	}},
	// Usage that fits exactly leaves nothing: the next check is refused.
	{"spent exactly", []usageStep{
		{0, []usageDesc{u("tenant", "t3", 100)}, ok, []want{{ok, 100, hour, 0, time.Hour}}},
		{0, []usageDesc{u("tenant", "t3", 0)}, over, []want{{over, 100, hour, 0, time.Hour}}},
	}},
	// Usage beyond the whole budget is counted too, never "can never fit".
	{"usage above the limit", []usageStep{
		{0, []usageDesc{u("tenant", "t4", 250)}, over, []want{{over, 100, hour, 0, time.Hour}}},
		{30 * time.Minute, []usageDesc{u("tenant", "t4", 0)}, over, []want{{over, 100, hour, 0, 30 * time.Minute}}},
	}},
	// A token bucket repays the debt as it refills: 36 s a unit. After 120
	// of 100, a request of 1 fits 21 units later, at 12m36s.
	{"token bucket repays the debt", []usageStep{
		{0, []usageDesc{u("team", "a", 60)}, ok, []want{{ok, 100, hour, 40, 36 * time.Minute}}},
		{0, []usageDesc{u("team", "a", 60)}, over, []want{{over, 100, hour, 0, 12*time.Minute + 36*time.Second}}},
		{12*time.Minute + 35*time.Second, []usageDesc{u("team", "a", 0)}, over, []want{{over, 100, hour, 0, time.Second}}},
		{12*time.Minute + 36*time.Second, []usageDesc{u("team", "a", 0)}, ok, []want{{ok, 100, hour, 1, 59*time.Minute + 24*time.Second}}},
	}},
	// A shadow budget counts the usage and never refuses.
	{"shadow budget", []usageStep{
		{0, []usageDesc{u("trial", "x", 150)}, ok, []want{{ok, 100, hour, 0, time.Hour}}},
		{0, []usageDesc{u("trial", "x", 0)}, ok, []want{{ok, 100, hour, 0, time.Hour}}},
	}},
	// A budget in debt refuses the request, and the plain descriptor
	// beside its check is not charged; once the check passes, it is.
	{"check refuses the request", []usageStep{
		{0, []usageDesc{u("tenant", "t5", 101)}, over, []want{{over, 100, hour, 0, time.Hour}}},
		{0, []usageDesc{u("tenant", "t5", 0), u("remote_address", "10.0.0.1", -1)}, over,
			[]want{{over, 100, hour, 0, time.Hour}, {ok, 1000, hour, 1000, 0}}},
		{time.Hour, []usageDesc{u("tenant", "t5", 0), u("remote_address", "10.0.0.1", -1)}, ok,
			[]want{{ok, 100, hour, 100, 0}, {ok, 1000, hour, 999, time.Hour}}},
	}},
	// Usage that does not fit refuses the request; the descriptors beside
	// it are not charged, but the usage is.
	{"usage refuses the rest", []usageStep{
		{0, []usageDesc{u("tenant", "t6", 150), u("remote_address", "10.0.0.2", -1)}, over,
			[]want{{over, 100, hour, 0, time.Hour}, {ok, 1000, hour, 1000, time.Hour}}},
		{0, []usageDesc{u("remote_address", "10.0.0.2", -1)}, ok, []want{{ok, 1000, hour, 999, time.Hour}}},
	}},
	// Without usage: true, a second 60 is refused and not counted, and a
	// hits_addend of 0 reports the state and is OK (as before).
	{"without usage", []usageStep{
		{0, []usageDesc{u("plain", "p", 60)}, ok, []want{{ok, 100, hour, 40, time.Hour}}},
		{2 * time.Minute, []usageDesc{u("plain", "p", 60)}, over, []want{{over, 100, hour, 0, 58 * time.Minute}}},
		{3 * time.Minute, []usageDesc{u("plain", "p", 0)}, ok, []want{{ok, 100, hour, 40, 57 * time.Minute}}},
		{4 * time.Minute, []usageDesc{u("plain", "p", 40)}, ok, []want{{ok, 100, hour, 0, 56 * time.Minute}}},
		{5 * time.Minute, []usageDesc{u("plain", "p", 0)}, ok, []want{{ok, 100, hour, 0, 55 * time.Minute}}},
	}},
}

// TestUsageDescriptors replays the usage timelines on the memory store and
// on Redis: descriptors with usage: true count every hits_addend, fitting
// or not, refuse while the key is in debt or spent (a hits_addend of 0
// included), and leave the other descriptors of a refused request
// uncharged.
func TestUsageDescriptors(t *testing.T) {
	eachUsageStore(t, func(t *testing.T, store sluice.Store) {
		for n, tl := range usageTimelines {
			t.Run(tl.name, func(t *testing.T) {
				h := startWith(t, store, compile(t, usageYAML))
				// Each timeline a day after the one before: a store reads
				// a clock that steps back as one that stands still.
				base := t0.Add(time.Duration(n) * 24 * time.Hour)
				for i, s := range tl.steps {
					h.clock.Set(base.Add(s.at))
					descs := make([]*rlscommon.RateLimitDescriptor, len(s.descs))
					for j, d := range s.descs {
						descs[j] = desc(d.key, d.value)
						if d.hits >= 0 {
							descs[j].HitsAddend = wrapperspb.UInt64(uint64(d.hits))
						}
					}
					resp := h.call(t, "llm", descs...)
					what := fmt.Sprintf("step %d (at %v, %v)", i, s.at, s.descs)
					if resp.OverallCode != s.overall {
						t.Errorf("%s: overall_code = %v, want %v", what, resp.OverallCode, s.overall)
					}
					for j, w := range s.want {
						checkStatus(t, fmt.Sprintf("%s: status %d", what, j), resp.Statuses[j], w)
					}
				}
			})
		}
	})
}

// TestUsageEvents checks what the metrics hook hears of usage: every
// hits_addend of a usage descriptor counted (Charged), its outcome
// whether it fitted.
func TestUsageEvents(t *testing.T) {
	h := start(t, usageYAML)
	hits := func(n uint64, kv ...string) *rlscommon.RateLimitDescriptor {
		d := desc(kv...)
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	h.call(t, "llm", hits(60, "tenant", "e"))
	h.call(t, "llm", hits(60, "tenant", "e"))
	h.call(t, "llm", hits(0, "tenant", "e"))
	want := []Event{
		{Domain: "llm", Key: "tenant", Outcome: OutcomeAllowed, Hits: 60, Charged: true, Usage: true},
		{Domain: "llm", Key: "tenant", Outcome: OutcomeDenied, Hits: 60, Charged: true, Usage: true},
		{Domain: "llm", Key: "tenant", Outcome: OutcomeDenied, Hits: 0, Charged: false, Usage: true},
	}
	got := h.events.take()
	if len(got) != len(want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// eachUsageStore runs f on the memory store and on Redis deciding at the
// caller's times (the timelines' clock).
func eachUsageStore(t *testing.T, f func(t *testing.T, store sluice.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) {
		f(t, teststore.Redis(t, redisstore.Options{CallerTime: true}))
	})
}
