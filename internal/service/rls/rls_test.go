package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// t0 is a time aligned to every unit up to a day, so that fixed windows
// start at t0.
var t0 = time.Unix(19676*86400, 0)

// clock is a settable time for Options.Now.
type clock = teststore.Clock

// events records the metrics hook's events.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) take() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.all
	e.all = nil
	return out
}

type harness struct {
	client rlsv3.RateLimitServiceClient
	clock  *clock
	events *events
	svc    *Service
	addr   string // the server's address
}

// compile decodes and compiles an envoy section given as YAML.
func compile(t testing.TB, src string) *Config {
	t.Helper()
	return compileSection(t, src, Section{})
}

// compileSection decodes the domains of src and compiles them with the
// section's options of s.
func compileSection(t testing.TB, src string, s Section) *Config {
	t.Helper()
	domains, ps := Parse([]byte(src), "envoy")
	if len(ps) > 0 {
		t.Fatalf("Parse = problems\n%s", problemLines(ps))
	}
	s.Domains = domains
	cfg, err := CompileSection(s)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start serves a Service for the envoy section src on a real gRPC server
// on a loopback port (with ServerOptions, as sluice serve's), with a
// memory store, and returns a client.
func start(t *testing.T, src string) *harness {
	t.Helper()
	return startWith(t, memstore.New(memstore.Options{}), compile(t, src))
}

func startWith(t *testing.T, store sluice.Store, cfg *Config) *harness {
	t.Helper()
	h := &harness{clock: teststore.NewClock(t0), events: &events{}}
	h.svc = New(store, cfg, Options{Now: h.clock.Now, OnDecision: h.events.add})
	srv := grpc.NewServer(ServerOptions()...)
	h.svc.Register(srv)
	conn := testkit.ServeGRPC(t, srv)
	h.addr = conn.Target()
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	return h
}

// desc builds a descriptor from key, value pairs.
var desc = testkit.Descriptor

func (h *harness) call(t *testing.T, domain string, ds ...*rlscommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return h.callReq(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (h *harness) callReq(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v) = %v", req, err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("ShouldRateLimit(%v) has %d statuses, want %d", req, len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// The units of the current limits the tests expect.
const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

// want is the expected status of one descriptor; a zero unit means no
// current_limit.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     time.Duration // -1: no duration_until_reset
}

func checkStatus(t *testing.T, what string, got *rlsv3.RateLimitResponse_DescriptorStatus, w want) {
	t.Helper()
	if got.GetCode() != w.code {
		t.Errorf("%s: code = %v, want %v", what, got.GetCode(), w.code)
	}
	if w.unit == 0 {
		if got.GetCurrentLimit() != nil {
			t.Errorf("%s: current_limit = %v, want none", what, got.GetCurrentLimit())
		}
	} else if cl := got.GetCurrentLimit(); cl.GetRequestsPerUnit() != w.rpu || cl.GetUnit() != w.unit {
		t.Errorf("%s: current_limit = %v, want %d per %v", what, cl, w.rpu, w.unit)
	}
	if got.GetLimitRemaining() != w.remaining {
		t.Errorf("%s: limit_remaining = %d, want %d", what, got.GetLimitRemaining(), w.remaining)
	}
	switch {
	case w.reset < 0:
		if got.GetDurationUntilReset() != nil {
			t.Errorf("%s: duration_until_reset = %v, want none", what, got.GetDurationUntilReset().AsDuration())
		}
	case w.unit != 0:
		if d := got.GetDurationUntilReset().AsDuration(); d != w.reset {
			t.Errorf("%s: duration_until_reset = %v, want %v", what, d, w.reset)
		}
	}
}

// check calls domain with the one descriptor d and checks the answer's
// overall code and the descriptor's status against w.
func (h *harness) check(t *testing.T, what, domain string, d *rlscommon.RateLimitDescriptor, w want) {
	t.Helper()
	resp := h.call(t, domain, d)
	if resp.OverallCode != w.code {
		t.Errorf("%s: overall_code = %v, want %v", what, resp.OverallCode, w.code)
	}
	checkStatus(t, what, resp.Statuses[0], w)
}

func TestOKThenOverLimit(t *testing.T) {
	h := start(t, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`)
	steps := []struct {
		at   time.Duration
		want want
	}{
		{0, want{ok, 3, minute, 2, time.Minute}},
		{10 * time.Second, want{ok, 3, minute, 1, 50 * time.Second}},
		{20 * time.Second, want{ok, 3, minute, 0, 40 * time.Second}},
		{30 * time.Second, want{over, 3, minute, 0, 30 * time.Second}},
		{59*time.Second + 999*time.Millisecond, want{over, 3, minute, 0, time.Millisecond}},
		{time.Minute, want{ok, 3, minute, 2, time.Minute}},
	}
	for _, s := range steps {
		h.clock.Set(t0.Add(s.at))
		h.check(t, "at "+s.at.String(), "edge", desc("remote_address", "10.0.0.1"), s.want)
	}
	// Another address has its own window.
	h.check(t, "other address", "edge", desc("remote_address", "10.0.0.2"), want{ok, 3, minute, 2, time.Minute})
}

// TestTwoLimitsOnOneDescriptor: 2 per second AND 5 per day, all-or-nothing.
func TestTwoLimitsOnOneDescriptor(t *testing.T) {
	h := start(t, `
domain: edge
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 5}
`)
	steps := []struct {
		at   time.Duration
		want want
	}{
		{0, want{ok, 2, second, 1, time.Second}},
		{0, want{ok, 2, second, 0, time.Second}},
		{0, want{over, 2, second, 0, time.Second}},         // not charged to the day
		{time.Second, want{ok, 2, second, 1, time.Second}}, // day: 2 left
		{time.Second, want{ok, 2, second, 0, time.Second}}, // day: 1 left
		{time.Second, want{over, 2, second, 0, time.Second}},
		{2 * time.Second, want{ok, 5, day, 0, 24*time.Hour - 2*time.Second}},
		{3 * time.Second, want{over, 5, day, 0, 24*time.Hour - 3*time.Second}},
		{24 * time.Hour, want{ok, 2, second, 1, time.Second}},
	}
	for i, s := range steps {
		h.clock.Set(t0.Add(s.at))
		h.check(t, fmt.Sprintf("step %d", i), "edge", desc("api_key", "k1"), s.want)
	}
}

func TestMatching(t *testing.T) {
	h := start(t, `
domain: m
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/special
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/v*
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: case
    rate_limit: {unit: HOUR, requests_per_unit: 6, unit_multiplier: 2}
`)
	tests := []struct {
		name string
		d    *rlscommon.RateLimitDescriptor
		want want
	}{
		{"nested", desc("message_type", "marketing", "to_number", "206"), want{ok, 5, day, 4, 24 * time.Hour}},
		{"nested other number has its own counter", desc("message_type", "marketing", "to_number", "207"), want{ok, 5, day, 4, 24 * time.Hour}},
		{"key without value", desc("to_number", "206"), want{ok, 100, day, 99, 24 * time.Hour}},
		{"placeholder without limit", desc("message_type", "marketing"), want{ok, 0, 0, 0, -1}},
		{"other value of a placeholder", desc("message_type", "transactional", "to_number", "206"), want{ok, 0, 0, 0, -1}},
		{"most specific value", desc("remote_address", "50.0.0.5"), want{over, 0, second, 0, -1}},
		{"fallback value", desc("remote_address", "50.0.0.6"), want{ok, 10, second, 9, time.Second}},
		{"exact before wildcard", desc("path", "/api/special"), want{ok, 1, minute, 0, time.Minute}},
		{"first wildcard in order", desc("path", "/api/v1"), want{ok, 2, minute, 1, time.Minute}},
		{"wildcard counts each value", desc("path", "/api/v2"), want{ok, 2, minute, 1, time.Minute}},
		{"wildcard again", desc("path", "/api/v1"), want{ok, 2, minute, 0, time.Minute}},
		{"shared wildcard", desc("path", "/shared/a"), want{ok, 3, minute, 2, time.Minute}},
		{"shared wildcard shares", desc("path", "/shared/b"), want{ok, 3, minute, 1, time.Minute}},
		{"key fallback after wildcards", desc("path", "/other"), want{ok, 4, minute, 3, time.Minute}},
		{"request deeper than config", desc("key", "value", "subkey", "subvalue"), want{ok, 0, 0, 0, -1}},
		{"config level matches", desc("key", "value"), want{ok, 300, second, 299, time.Second}},
		{"keys are case-sensitive", desc("Key", "value"), want{ok, 0, 0, 0, -1}},
		{"unknown key", desc("nothing", "x"), want{ok, 0, 0, 0, -1}},
		{"unlimited", desc("ldap", "cn=x"), want{ok, 0, 0, math.MaxUint32, -1}},
		{"unit multiplier", desc("case", "x"), want{ok, 6, hour, 5, 2 * time.Hour}},
		{"empty descriptor", desc(), want{ok, 0, 0, 0, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { h.check(t, tt.name, "m", tt.d, tt.want) })
	}
	t.Run("unit multiplier is reported", func(t *testing.T) {
		cl := h.call(t, "m", desc("case", "y")).Statuses[0].GetCurrentLimit()
		if cl.GetUnitMultiplier().GetValue() != 2 {
			t.Errorf("unit_multiplier = %v, want 2", cl.GetUnitMultiplier())
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		h.check(t, "unknown domain", "nowhere", desc("remote_address", "1.2.3.4"), want{ok, 0, 0, 0, -1})
	})
}

// TestWildcardAnywhere: a "*" anywhere in a configured value is a
// wildcard, after exact values and before the key alone, in the order of
// the file (envoyproxy/ratelimit's README on wildcards and its
// test/config/wildcard.yaml).
func TestWildcardAnywhere(t *testing.T) {
	h := start(t, `
domain: w
descriptors:
  - key: file
    value: log*.txt
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: "*.txt"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: log-special.txt
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: route
    value: svc*get*v1
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: route
    value: "*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: tail
    value: a*
    descriptors:
      - key: op
        value: "*x*"
        rate_limit: {unit: minute, requests_per_unit: 7}
`)
	tests := []struct {
		name string
		d    *rlscommon.RateLimitDescriptor
		want want
	}{
		{"star in the middle", desc("file", "log-2024.txt"), want{ok, 1, minute, 0, time.Minute}},
		{"star matches nothing", desc("file", "log.txt"), want{ok, 1, minute, 0, time.Minute}},
		{"exact before any wildcard", desc("file", "log-special.txt"), want{ok, 3, minute, 2, time.Minute}},
		{"leading star", desc("file", "notes.txt"), want{ok, 2, minute, 1, time.Minute}},
		{"no wildcard matches", desc("file", "log.csv"), want{ok, 0, 0, 0, -1}},
		{"two stars, both empty", desc("route", "svcgetv1"), want{ok, 4, minute, 3, time.Minute}},
		{"two stars", desc("route", "svc-a-get-b-v1"), want{ok, 4, minute, 3, time.Minute}},
		{"pieces out of order", desc("route", "svcv1get"), want{ok, 5, minute, 4, time.Minute}},
		{"a lone star shares its counter", desc("route", "anything"), want{ok, 5, minute, 3, time.Minute}},
		{"a lone star matches the empty value", desc("route", ""), want{ok, 5, minute, 2, time.Minute}},
		{"nested wildcards", desc("tail", "abc", "op", "xyz"), want{ok, 7, minute, 6, time.Minute}},
		{"nested wildcard misses", desc("tail", "abc", "op", "yz"), want{ok, 0, 0, 0, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { h.check(t, tt.name, "w", tt.d, tt.want) })
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true},
		{"foo*", "foobar", true},
		{"foo*", "fo", false},
		{"*bar", "bar", true},
		{"*bar", "xbar", true},
		{"*bar", "barx", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"**", "", true},
		{"a**b", "ab", true},
		{"*ab*ab*", "abab", true},
		{"*ab*ab*", "aab", false},
	}
	for _, tt := range tests {
		if got := globMatch(strings.Split(tt.pattern, "*"), tt.value); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

func TestHitsAddend(t *testing.T) {
	h := start(t, `
domain: h
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	withHits := func(d *rlscommon.RateLimitDescriptor, n uint64) *rlscommon.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	// Request-level 3 for a; b overrides it with 1.
	resp := h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("a", "x"), withHits(desc("b", "x"), 1),
	}})
	checkStatus(t, "a with request hits 3", resp.Statuses[0], want{ok, 10, minute, 7, time.Minute})
	checkStatus(t, "b with its own hits 1", resp.Statuses[1], want{ok, 10, minute, 9, time.Minute})
	// A per-descriptor 0 charges nothing and reports the state.
	resp = h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{withHits(desc("a", "x"), 0)}})
	checkStatus(t, "a with hits 0", resp.Statuses[0], want{ok, 10, minute, 7, time.Minute})
	// 8 more do not fit in 7: denied, and nothing charged; as in
	// envoyproxy/ratelimit, a refused descriptor has nothing left.
	resp = h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", HitsAddend: 8, Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "x")}})
	if resp.OverallCode != over {
		t.Errorf("8 hits: overall_code = %v, want OVER_LIMIT", resp.OverallCode)
	}
	checkStatus(t, "a with hits 8", resp.Statuses[0], want{over, 10, minute, 0, time.Minute})
	// More than the limit can never fit.
	resp = h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", Descriptors: []*rlscommon.RateLimitDescriptor{withHits(desc("a", "x"), 11)}})
	checkStatus(t, "a with hits 11", resp.Statuses[0], want{over, 10, minute, 0, -1})
	// Negative hits (refunds) are not supported: nothing is charged.
	neg := withHits(desc("a", "x"), 5)
	neg.IsNegativeHits = true
	checkStatus(t, "negative hits", h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", Descriptors: []*rlscommon.RateLimitDescriptor{neg}}).Statuses[0],
		want{ok, 10, minute, 7, time.Minute})
	resp = h.callReq(t, &rlsv3.RateLimitRequest{Domain: "h", HitsAddend: 7, Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "x")}})
	checkStatus(t, "a with the last 7", resp.Statuses[0], want{ok, 10, minute, 0, time.Minute})
}

// TestAllOrNothing: when one descriptor is over, none is charged.
func TestAllOrNothing(t *testing.T) {
	h := start(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	resp := h.call(t, "d", desc("user", "u"), desc("path", "/p"))
	if resp.OverallCode != ok {
		t.Fatalf("first: overall_code = %v, want OK", resp.OverallCode)
	}
	checkStatus(t, "first user", resp.Statuses[0], want{ok, 10, minute, 9, time.Minute})
	checkStatus(t, "first path", resp.Statuses[1], want{ok, 1, minute, 0, time.Minute})
	for i := range 3 {
		resp = h.call(t, "d", desc("user", "u"), desc("path", "/p"))
		if resp.OverallCode != over {
			t.Fatalf("repeat %d: overall_code = %v, want OVER_LIMIT", i, resp.OverallCode)
		}
		checkStatus(t, "denied user (not charged)", resp.Statuses[0], want{ok, 10, minute, 9, time.Minute})
		checkStatus(t, "denied path", resp.Statuses[1], want{over, 1, minute, 0, time.Minute})
	}
	h.check(t, "user alone", "d", desc("user", "u"), want{ok, 10, minute, 8, time.Minute})
	evs := h.events.take()
	var denied, charged int
	for _, ev := range evs {
		if ev.Outcome == OutcomeDenied {
			denied++
		}
		if ev.Charged {
			charged++
		}
	}
	if denied != 3 || charged != 3 {
		t.Errorf("events: %d denied, %d charged, want 3 and 3: %+v", denied, charged, evs)
	}
}

func TestShadowMode(t *testing.T) {
	h := start(t, `
domain: s
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {unit: second, requests_per_unit: 1}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: gate
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	a := desc("service", "auth", "user", "user-a")
	for i := range 2 {
		h.check(t, fmt.Sprintf("shadow call %d", i), "s", a, want{ok, 1, second, 0, time.Second})
	}
	evs := h.events.take()
	if len(evs) != 2 || evs[0].Outcome != OutcomeAllowed || !evs[0].Charged || evs[1].Outcome != OutcomeShadowDenied || evs[1].Charged {
		t.Errorf("shadow events = %+v, want allowed and charged, then shadow_denied", evs)
	}
	if evs[0].Key != "service.user_user-a" {
		t.Errorf("event key = %q, want service.user_user-a", evs[0].Key)
	}
	if resp := h.call(t, "s", desc("service", "auth", "user", "user-b")); resp.OverallCode != ok {
		t.Errorf("user-b: overall_code = %v, want OK", resp.OverallCode)
	}
	if resp := h.call(t, "s", desc("service", "auth", "user", "user-b")); resp.OverallCode != over {
		t.Errorf("user-b again: overall_code = %v, want OVER_LIMIT", resp.OverallCode)
	}
	// A shadow descriptor is not charged when the request is denied.
	h.clock.Set(t0.Add(time.Second))
	h.call(t, "s", desc("gate", "g"))
	resp := h.call(t, "s", desc("gate", "g"), a)
	if resp.OverallCode != over {
		t.Fatalf("gate again: overall_code = %v, want OVER_LIMIT", resp.OverallCode)
	}
	checkStatus(t, "shadow beside a denial", resp.Statuses[1], want{ok, 1, second, 1, time.Second})
	h.check(t, "shadow after", "s", a, want{ok, 1, second, 0, time.Second})
}

func TestReplaces(t *testing.T) {
	h := start(t, `
domain: r
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 1, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 2
          unit: second
`)
	d1 := desc("key_1", "value_1", "user", "bkthomps")
	d2 := desc("key_2", "value_2", "user", "bkthomps")
	for i := range 2 {
		resp := h.call(t, "r", d1, d2)
		if resp.OverallCode != ok {
			t.Fatalf("call %d: overall_code = %v, want OK (the 1/s limit is replaced)", i, resp.OverallCode)
		}
		checkStatus(t, "replaced", resp.Statuses[0], want{ok, 0, 0, 0, -1})
		checkStatus(t, "replacing", resp.Statuses[1], want{ok, 2, second, uint32(1 - i), time.Second})
	}
	// Alone, the replaced limit applies, and was not charged above.
	h.check(t, "specific alone", "r", d1, want{ok, 1, second, 0, time.Second})
	if got := h.call(t, "r", d1).Statuses[0].GetCurrentLimit().GetName(); got != "specific_limit" {
		t.Errorf("current_limit.name = %q, want specific_limit", got)
	}
}

// TestAlgorithm: sliding_window refuses at a window boundary where
// envoyproxy/ratelimit's fixed window would admit.
func TestAlgorithm(t *testing.T) {
	h := start(t, `
domain: a
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
`)
	h.clock.Set(t0.Add(59 * time.Second))
	for range 2 {
		h.call(t, "a", desc("fixed", "x"), desc("sliding", "x"))
	}
	h.clock.Set(t0.Add(60 * time.Second))
	if got := h.call(t, "a", desc("fixed", "x")).OverallCode; got != ok {
		t.Errorf("fixed window at the boundary = %v, want OK", got)
	}
	if got := h.call(t, "a", desc("sliding", "x")).OverallCode; got != over {
		t.Errorf("sliding window at the boundary = %v, want OVER_LIMIT", got)
	}
	for i := range 5 {
		want := ok
		if i == 4 {
			want = over
		}
		if got := h.call(t, "a", desc("bucket", "x")).OverallCode; got != want {
			t.Errorf("token bucket request %d = %v, want %v", i, got, want)
		}
	}
}

// TestRateLimitOverride: Envoy's limit override replaces the configured
// limit, as in envoyproxy/ratelimit.
func TestRateLimitOverride(t *testing.T) {
	h := start(t, `
domain: o
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	d := desc("tenant", "t1")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	h.check(t, "override first", "o", d, want{ok, 1, second, 0, time.Second})
	h.check(t, "override second", "o", d, want{over, 1, second, 0, time.Second})
	h.check(t, "configured limit", "o", desc("tenant", "t1"), want{ok, 100, minute, 99, time.Minute})
	bad := desc("tenant", "t1")
	bad.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "o", Descriptors: []*rlscommon.RateLimitDescriptor{bad}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("override with unit UNKNOWN: error = %v, want InvalidArgument", err)
	}
}

func TestInvalidRequests(t *testing.T) {
	h := start(t, "domain: x\ndescriptors: []\n")
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "b")}}},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("ShouldRateLimit = %v, want InvalidArgument", err)
			}
		})
	}
}

func TestStoreFailure(t *testing.T) {
	const src = "domain: f\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	t.Run("error is Unavailable", func(t *testing.T) {
		h := startWith(t, teststore.Failing{Err: errors.New("backend unreachable")}, compile(t, src))
		_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "f", Descriptors: []*rlscommon.RateLimitDescriptor{desc("k", "v")}})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("ShouldRateLimit = %v, want Unavailable", err)
		}
	})
	for _, allow := range []bool{true, false} {
		name := map[bool]string{true: "failure policy allows", false: "failure policy denies"}[allow]
		t.Run(name, func(t *testing.T) {
			h := startWith(t, teststore.Failing{Degraded: &sluice.Decision{Allowed: allow, Degraded: true}}, compile(t, src))
			resp := h.call(t, "f", desc("k", "v"))
			wantCode := map[bool]rlsv3.RateLimitResponse_Code{true: ok, false: over}[allow]
			if resp.OverallCode != wantCode || resp.Statuses[0].Code != wantCode {
				t.Errorf("codes = %v, %v, want %v", resp.OverallCode, resp.Statuses[0].Code, wantCode)
			}
			evs := h.events.take()
			if len(evs) != 1 || !evs[0].Degraded {
				t.Errorf("events = %+v, want one degraded", evs)
			}
		})
	}
}

// TestSetConfig swaps the configuration while serving; an unchanged limit
// keeps its state.
func TestSetConfig(t *testing.T) {
	const v1 = "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	h := start(t, v1)
	h.call(t, "c", desc("k", "v"))
	h.svc.SetConfig(compile(t, v1+"  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
	h.check(t, "after reload", "c", desc("k", "v"), want{ok, 2, minute, 0, time.Minute})
	h.svc.SetConfig(nil)
	h.check(t, "no config", "c", desc("k", "v"), want{ok, 0, 0, 0, -1})
}

// TestStoreKeyUnambiguous: values cannot be chosen to share a counter.
func TestStoreKeyUnambiguous(t *testing.T) {
	a := storeKey("d", []entry{{"a", "x|b=1:y"}, {"b", "z"}}, nil)
	b := storeKey("d", []entry{{"a", "x"}, {"b", "y|b=1:z"}}, nil)
	if a == b {
		t.Errorf("storeKey collides: %q", a)
	}
}

// countingStore counts the calls a Service makes to a real store.
type countingStore struct {
	sluice.Store
	mu                    sync.Mutex
	allow, allowAll, peek int
}

func (c *countingStore) Allow(ctx context.Context, now time.Time, r sluice.Request) (sluice.Decision, error) {
	c.mu.Lock()
	c.allow++
	c.mu.Unlock()
	return c.Store.Allow(ctx, now, r)
}

func (c *countingStore) AllowAll(ctx context.Context, now time.Time, rs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	c.mu.Lock()
	c.allowAll++
	c.mu.Unlock()
	return c.Store.AllowAll(ctx, now, rs, out)
}

func (c *countingStore) Peek(ctx context.Context, now time.Time, r sluice.Request) (sluice.Decision, error) {
	c.mu.Lock()
	c.peek++
	c.mu.Unlock()
	return c.Store.Peek(ctx, now, r)
}

// TestOneStoreCall: the limits of every descriptor of a request, several
// per descriptor included, go to the store in one AllowAll call.
func TestOneStoreCall(t *testing.T) {
	cs := &countingStore{Store: memstore.New(memstore.Options{})}
	h := startWith(t, cs, compile(t, `
domain: one
descriptors:
  - key: a
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 50}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	for i, wantCode := range []rlsv3.RateLimitResponse_Code{ok, over} {
		resp := h.call(t, "one", desc("a", "1"), desc("b", "1"), desc("unmatched", "x"))
		if resp.OverallCode != wantCode {
			t.Errorf("call %d: overall_code = %v, want %v", i, resp.OverallCode, wantCode)
		}
	}
	if cs.allowAll != 2 || cs.allow != 0 || cs.peek != 0 {
		t.Errorf("store calls: %d AllowAll, %d Allow, %d Peek; want 2, 0, 0", cs.allowAll, cs.allow, cs.peek)
	}
}

func BenchmarkShouldRateLimit(b *testing.B) {
	cfg := compile(b, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 1000000000}
      - {unit: day, requests_per_unit: 1000000000}
`)
	svc := New(memstore.New(memstore.Options{}), cfg, Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"), desc("api_key", "k1"),
	}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.OverallCode != ok {
				b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
			}
		}
	})
}

func TestEventKeys(t *testing.T) {
	h := start(t, `
domain: e
descriptors:
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
`)
	o := desc("tenant", "t")
	o.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	h.call(t, "e", desc("path", "/shared/x"), desc("user", "alice"), desc("free", "x"), o, desc("nothing", "x"))
	var got []string
	for _, ev := range h.events.take() {
		got = append(got, ev.Key+" "+ev.Outcome.String())
	}
	want := []string{"path_/shared/* allowed", "user_alice allowed", "free unlimited", "override:tenant allowed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// TestResponseHeaders: response_headers adds the reference's
// RateLimit-Limit, -Remaining and -Reset (envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED, picked as its service picks them), or
// the IETF fields, and Retry-After when the answer is OVER_LIMIT.
func TestResponseHeaders(t *testing.T) {
	const domains = `
  - domain: h
    descriptors:
      - key: a
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 10, name: per-b}
      - key: s
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: u
        rate_limit: {unlimited: true}
`
	headers := func(resp *rlsv3.RateLimitResponse) string {
		var b strings.Builder
		for _, h := range resp.ResponseHeadersToAdd {
			fmt.Fprintf(&b, "%s: %s\n", h.Key, h.Value)
		}
		return b.String()
	}
	for _, tt := range []struct {
		style string
		calls [][]*rlscommon.RateLimitDescriptor
		want  []string
	}{
		{"reference", [][]*rlscommon.RateLimitDescriptor{
			{desc("a", "1"), desc("b", "1")},
			{desc("a", "1"), desc("b", "1")},
			{desc("a", "1"), desc("b", "1")},
			{desc("u", "1")},
			{desc("s", "1"), desc("b", "2")},
			{desc("s", "1"), desc("b", "2")},
		}, []string{
			"RateLimit-Limit: 2\nRateLimit-Remaining: 1\nRateLimit-Reset: 60\n",
			"RateLimit-Limit: 2\nRateLimit-Remaining: 0\nRateLimit-Reset: 60\n",
			"RateLimit-Limit: 2\nRateLimit-Remaining: 0\nRateLimit-Reset: 60\nRetry-After: 60\n",
			"",
			"RateLimit-Limit: 1\nRateLimit-Remaining: 0\nRateLimit-Reset: 1\n",
			"RateLimit-Limit: 1\nRateLimit-Remaining: 0\nRateLimit-Reset: 1\n",
		}},
		{"ietf", [][]*rlscommon.RateLimitDescriptor{
			{desc("a", "1"), desc("b", "1")},
			{desc("a", "1"), desc("b", "1")},
			{desc("a", "1"), desc("b", "1")},
			{desc("s", "1"), desc("b", "2")},
			{desc("s", "1")},
		}, []string{
			"RateLimit-Policy: \"a\";q=2;w=60, \"per-b\";q=10;w=3600\nRateLimit: \"a\";r=1;t=60\n",
			"RateLimit-Policy: \"a\";q=2;w=60, \"per-b\";q=10;w=3600\nRateLimit: \"a\";r=0;t=60\n",
			"RateLimit-Policy: \"a\";q=2;w=60, \"per-b\";q=10;w=3600\nRateLimit: \"a\";r=0;t=60\nRetry-After: 60\n",
			"RateLimit-Policy: \"per-b\";q=10;w=3600\nRateLimit: \"per-b\";r=9;t=3600\n",
			"",
		}},
		{"none", [][]*rlscommon.RateLimitDescriptor{{desc("a", "1")}}, []string{""}},
	} {
		t.Run(tt.style, func(t *testing.T) {
			domains, ps := DecodeSection(parseYAML(t, "response_headers: "+tt.style+"\ndomains:"+domains), "envoy")
			if len(ps) > 0 {
				t.Fatal(problemLines(ps))
			}
			cfg, err := CompileSection(domains)
			if err != nil {
				t.Fatal(err)
			}
			h := startWith(t, memstore.New(memstore.Options{}), cfg)
			for i, ds := range tt.calls {
				if got := headers(h.call(t, "h", ds...)); got != tt.want[i] {
					t.Errorf("call %d: headers\n%s\nwant\n%s", i, got, tt.want[i])
				}
			}
		})
	}
}

// parseYAML returns the document node of src.
func parseYAML(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestPenalty: a limit with a penalty (a Sluice extension) blocks a
// descriptor that went over it; during the block it is over whatever the
// limit says, and its duration_until_reset says when the block ends; a
// second offence blocks it longer.
func TestPenalty(t *testing.T) {
	h := start(t, `
domain: login
descriptors:
  - key: account
    rate_limit:
      unit: minute
      requests_per_unit: 1
      penalty: {block_for: 10m, factor: 3, forget_after: 24h}
`)
	h.clock.Set(t0)
	d := desc("account", "alice")
	h.check(t, "first", "login", d, want{ok, 1, minute, 0, time.Minute})
	h.check(t, "second: an offence", "login", d, want{over, 1, minute, 0, 10 * time.Minute})
	h.clock.Set(t0.Add(5 * time.Minute))
	for range 3 {
		h.check(t, "during the block", "login", d, want{over, 1, minute, 0, 5 * time.Minute})
	}
	h.check(t, "another account", "login", desc("account", "bob"), want{ok, 1, minute, 0, time.Minute})
	h.clock.Set(t0.Add(10 * time.Minute))
	h.check(t, "after the block", "login", d, want{ok, 1, minute, 0, time.Minute})
	h.check(t, "second offence", "login", d, want{over, 1, minute, 0, 30 * time.Minute})
}

// TestOnPenalty: Options.OnPenalty hears of each limit that its penalty
// refused, by the limit's name, once per request: the request that
// started the block with Offence set, each one refused by the block in
// force without; never of a limit without a penalty, nor of a request
// that the limit merely allowed or refused without a block.
func TestOnPenalty(t *testing.T) {
	cfg := compile(t, `
- domain: login
  descriptors:
    - key: account
      rate_limits:
        - {unit: hour, requests_per_unit: 100}
        - unit: minute
          requests_per_unit: 1
          penalty: {block_for: 10m}
    - key: ip
      rate_limit: {unit: minute, requests_per_unit: 1}
`)
	clock := teststore.NewClock(t0)
	type heard struct {
		limit            string
		blocked, offence bool
	}
	var got []heard
	svc := New(memstore.New(memstore.Options{}), cfg, Options{Now: clock.Now, OnPenalty: func(limit string, d sluice.Decision) {
		got = append(got, heard{limit, d.Blocked, d.Offence})
	}})
	call := func(d *rlscommon.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "login", Descriptors: []*rlscommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	account, ip := desc("account", "alice"), desc("ip", "203.0.113.7")
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, over, over} {
		if c := call(ip); c != want {
			t.Fatalf("ip call %d = %v, want %v", i, c, want)
		}
	}
	if len(got) != 0 {
		t.Fatalf("OnPenalty heard %v of a limit without a penalty", got)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, over, over, over} {
		if c := call(account); c != want {
			t.Fatalf("account call %d = %v, want %v", i, c, want)
		}
	}
	const name = "envoy:login.account#1"
	want := []heard{{name, true, true}, {name, true, false}, {name, true, false}}
	if !slices.Equal(got, want) {
		t.Errorf("OnPenalty heard %v, want %v", got, want)
	}
	clock.Set(t0.Add(10 * time.Minute))
	got = got[:0]
	if c := call(account); c != ok || len(got) != 0 {
		t.Errorf("after the block: %v, OnPenalty heard %v; want OK and nothing", c, got)
	}
}
