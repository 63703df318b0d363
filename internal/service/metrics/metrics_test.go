package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// TestRLSDescriptorLabelsBounded checks that the descriptor label of
// sluice_rls_decisions_total takes at most maxRLSDescriptors values.
func TestRLSDescriptorLabelsBounded(t *testing.T) {
	var d descriptorLabels
	for i := range maxRLSDescriptors {
		key := "d" + strings.Repeat("x", i)
		if got := d.label(key); got != key {
			t.Fatalf("label(%q) = %q, want the key itself", key, got)
		}
	}
	if got := d.label("one-too-many"); got != "_other" {
		t.Errorf("label past the cap = %q, want _other", got)
	}
	if got := d.label("d"); got != "d" {
		t.Errorf("label of a known key past the cap = %q, want d", got)
	}
	if got := d.label("override:api_key"); got != "override" {
		t.Errorf("label of an override = %q, want override", got)
	}
}

// failing is a store whose every call fails.
type failing struct{ sluice.Store }

var errDown = errors.New("down")

func (failing) Allow(context.Context, time.Time, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}

// TestStoreCounts checks that Store times each call under its operation,
// counts the failures and not the refusals of bad input, and that
// Underlying reaches the store beneath.
func TestStoreCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	s := m.Store(mem)
	ctx := context.Background()
	p := sluice.TokenBucket(2, time.Minute, 2).Named("p")
	reqs := []sluice.Request{{Policy: &p, Key: "a", Cost: 1}, {Policy: &p, Key: "b", Cost: 1}}
	if _, err := s.AllowAll(ctx, time.Time{}, reqs, make([]sluice.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	s.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "a", Cost: 0}) // an invalid cost: not a failure
	s.Peek(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "a", Cost: 1})
	m.Store(failing{mem}).Allow(ctx, time.Time{}, reqs[0])
	for _, c := range []struct {
		op         string
		calls, err float64
	}{{opAllowAll, 1, 0}, {opAllow, 2, 1}, {opPeek, 1, 0}} {
		if got := value(t, reg, "sluice_store_duration_seconds", c.op); got != c.calls {
			t.Errorf("sluice_store_duration_seconds_count{operation=%q} = %v, want %v", c.op, got, c.calls)
		}
		if got := value(t, reg, "sluice_store_errors_total", c.op); got != c.err {
			t.Errorf("sluice_store_errors_total{operation=%q} = %v, want %v", c.op, got, c.err)
		}
	}
	if Underlying(m.Store(s)) != mem {
		t.Errorf("Underlying does not reach the memory store through two decorators")
	}
	if _, err := New(reg); err == nil {
		t.Errorf("a second New on the same registry succeeded")
	}
}

// value returns the value of a counter, or the count of a histogram, of
// the series of family name whose one label has the value label.
func value(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	v, ok := testkit.MetricValue(t, reg, name, label)
	if !ok {
		t.Fatalf("no series %s{%q}", name, label)
	}
	return v
}

// TestRLSDecisionCounts checks that RLSDecision counts each decision in
// the series of its domain, descriptor and outcome, also once the series'
// counter is cached, and not in any other series.
func TestRLSDecisionCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m.RLSDecision("api", "user", "denied")
	}
	m.RLSDecision("api", "user", "allowed")
	m.RLSDecision("web", "user", "denied")
	m.RLSDecision("api", "override:user", "denied")
	for _, tt := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"api", "user", "denied"}, 3},
		{[]string{"api", "user", "allowed"}, 1},
		{[]string{"web", "user", "denied"}, 1},
		{[]string{"api", "override", "denied"}, 1},
	} {
		if got, _ := testkit.MetricValue(t, reg, "sluice_rls_decisions_total", tt.labels...); got != tt.want {
			t.Errorf("sluice_rls_decisions_total%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
}

// TestDecisionCountsAcrossSetLimits checks that sluice_decisions_total
// counts every decision, and that the counters Decision keeps do not
// outlive a limit that SetLimits removes: once the limit is configured
// again, its decisions count on the registered series.
func TestDecisionCountsAcrossSetLimits(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	value := func(limit, outcome string) (float64, bool) {
		return testkit.MetricValue(t, reg, "sluice_decisions_total", limit, outcome)
	}
	m.SetLimits(nil, []string{"a", "b"})
	for range 3 {
		m.Decision("a", "denied")
	}
	m.Decision("b", "allowed")
	if got, _ := value("a", "denied"); got != 3 {
		t.Errorf(`sluice_decisions_total{a, denied} = %v, want 3`, got)
	}
	if got, _ := value("b", "allowed"); got != 1 {
		t.Errorf(`sluice_decisions_total{b, allowed} = %v, want 1`, got)
	}
	m.SetLimits([]string{"a", "b"}, []string{"b"})
	if _, ok := value("a", "denied"); ok {
		t.Error("sluice_decisions_total{a, denied} is still reported after SetLimits removed a")
	}
	m.SetLimits([]string{"b"}, []string{"a", "b"})
	m.Decision("a", "denied")
	if got, _ := value("a", "denied"); got != 1 {
		t.Errorf(`sluice_decisions_total{a, denied} = %v after a was removed and configured again, want 1`, got)
	}
	m.Decision("b", "allowed")
	if got, _ := value("b", "allowed"); got != 2 {
		t.Errorf(`sluice_decisions_total{b, allowed} = %v, want 2 (b was kept)`, got)
	}
}
