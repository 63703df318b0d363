package rls

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/internal/service/decisionlog"
	"github.com/sluicehq/sluice/memstore"
)

// TestDecisionLog writes Envoy's decisions to a decision log: one line
// per request that matched a limit, the domain as the rule, each limit
// of each descriptor with its store key, hits and outcome, and the mode
// of the descriptors a replay does not decide. The memory store's time is
// the decision's.
func TestDecisionLog(t *testing.T) {
	cfg := compile(t, `
- domain: edge
  descriptors:
    - key: user
      rate_limits:
        - {unit: minute, requests_per_unit: 1}
        - {unit: hour, requests_per_unit: 5}
    - key: dry
      shadow_mode: true
      rate_limit: {unit: minute, requests_per_unit: 1}
    - key: quota
      quota_mode: true
      rate_limit: {unit: minute, requests_per_unit: 1}
    - key: tokens
      usage: true
      rate_limit: {unit: minute, requests_per_unit: 10}
    - key: closed
      rate_limit: {unit: minute, requests_per_unit: 0}
    - key: free
      rate_limit: {unlimited: true}
`)
	path := filepath.Join(t.TempDir(), "d.jsonl")
	dlog, err := decisionlog.Open(decisionlog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC)
	ms := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer ms.Close()
	svc := New(decisionlog.Store(ms), cfg, Options{DecisionLog: dlog})
	override := desc("user", "o")
	override.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	tokens := desc("tokens", "t")
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "a"), desc("dry", "a"), desc("quota", "a")}},
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "a"), desc("dry", "a"), desc("quota", "a")}},
		{Domain: "edge", HitsAddend: 12, Descriptors: []*rlscommon.RateLimitDescriptor{tokens}},
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("closed", "c"), override}},
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("free", "f"), desc("nothing", "n")}}, // no line
		{Domain: "other", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "a")}},                      // no line
	} {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	if err := dlog.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := func(entries ...string) string { return storeKey("edge", []entry{{entries[0], entries[1]}}, nil) }
	want := []decisionlog.Record{
		{Time: time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC), Door: "rls", Rule: "edge", Limits: []decisionlog.Entry{
			{Limit: "envoy:edge.user#0", Key: key("user", "a"), Cost: 1, Outcome: "allowed"},
			{Limit: "envoy:edge.user#1", Key: key("user", "a"), Cost: 1, Outcome: "allowed"},
			{Limit: "envoy:edge.dry", Key: key("dry", "a"), Cost: 1, Outcome: "allowed", Mode: "shadow"},
			{Limit: "envoy:edge.quota", Key: key("quota", "a"), Cost: 1, Outcome: "allowed", Mode: "quota"},
		}},
		// The minute's limit refuses: the quota descriptor, over too, is
		// the request's only one, so it refuses it as well.
		{Time: time.Date(2026, 12, 4, 10, 0, 30, int(time.Millisecond), time.UTC), Door: "rls", Rule: "edge", Limits: []decisionlog.Entry{
			{Limit: "envoy:edge.user#0", Key: key("user", "a"), Cost: 1, Outcome: "denied"},
			{Limit: "envoy:edge.user#1", Key: key("user", "a"), Cost: 1, Outcome: "allowed"},
			{Limit: "envoy:edge.dry", Key: key("dry", "a"), Cost: 1, Outcome: "shadow_denied", Mode: "shadow"},
			{Limit: "envoy:edge.quota", Key: key("quota", "a"), Cost: 1, Outcome: "denied", Mode: "quota"},
		}},
		{Time: time.Date(2026, 12, 4, 10, 0, 30, 2*int(time.Millisecond), time.UTC), Door: "rls", Rule: "edge", Limits: []decisionlog.Entry{
			{Limit: "envoy:edge.tokens", Key: key("tokens", "t"), Cost: 12, Outcome: "denied", Mode: "usage"},
		}},
		{Time: time.Date(2026, 12, 4, 10, 0, 30, 3*int(time.Millisecond), time.UTC), Door: "rls", Rule: "edge", Limits: []decisionlog.Entry{
			{Limit: "envoy:edge.closed", Key: key("closed", "c"), Cost: 1, Outcome: "denied", Mode: "zero"},
			{Limit: "envoy-override:edge", Key: key("user", "o"), Cost: 1, Outcome: "allowed", Mode: "override"},
		}},
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("the log has %d lines, want %d:\n%s", len(lines), len(want), b)
	}
	for i, line := range lines {
		var got decisionlog.Record
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want[i])
		if string(g) != string(w) {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
		}
	}
}
