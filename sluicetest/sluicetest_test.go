package sluicetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// mutant wraps a memory store and breaks one promise of the Store contract.
type mutant struct {
	*memstore.Store
	kind string
}

func (m *mutant) fix(req sluice.Request) sluice.Request {
	switch m.kind {
	case "ignores-policy-name":
		req.Policy.Name = ""
	case "truncates-keys":
		if len(req.Key) > 64 {
			req.Key = req.Key[:64]
		}
	case "ignores-penalty":
		p := *req.Policy
		p.Penalty = sluice.Penalty{}
		req.Policy = &p
	case "no-escalation":
		p := *req.Policy
		p.Penalty.Factor = 1
		req.Policy = &p
	}
	return req
}

// Unblock lifts nothing under the "unblock-lifts-nothing" mutant.
func (m *mutant) Unblock(ctx context.Context, now time.Time, req sluice.Request) (bool, error) {
	if m.kind == "unblock-lifts-nothing" {
		return true, nil
	}
	return m.Store.Unblock(ctx, now, m.fix(req))
}

func (m *mutant) fixDecision(d sluice.Decision) sluice.Decision {
	if m.kind == "retry-off-by-1ms" && !d.Allowed && d.RetryAfter > 0 {
		d.RetryAfter += time.Millisecond
	}
	return d
}

func (m *mutant) Allow(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	req = m.fix(req)
	if m.kind == "check-then-act" {
		d, err := m.Store.Peek(ctx, now, req)
		if err != nil || !d.Allowed {
			return d, err
		}
		time.Sleep(20 * time.Microsecond) // the race under test: others decide meanwhile
		m.Store.Allow(ctx, now, req)      // the verdict of the Peek stands
		return d, nil
	}
	d, err := m.Store.Allow(ctx, now, req)
	return m.fixDecision(d), err
}

func (m *mutant) Peek(ctx context.Context, now time.Time, req sluice.Request) (sluice.Decision, error) {
	if m.kind == "peek-charges" {
		return m.Store.Allow(ctx, now, m.fix(req))
	}
	d, err := m.Store.Peek(ctx, now, m.fix(req))
	return m.fixDecision(d), err
}

func (m *mutant) AllowAll(ctx context.Context, now time.Time, reqs []sluice.Request, out []sluice.Decision) (sluice.Decision, error) {
	fixed := make([]sluice.Request, len(reqs))
	for i, r := range reqs {
		fixed[i] = m.fix(r)
	}
	if m.kind == "allowall-charges-each" && len(reqs) > 0 {
		ds := make([]sluice.Decision, len(reqs))
		for i, r := range fixed {
			d, err := m.Store.Allow(ctx, now, r)
			if err != nil {
				return d, err
			}
			ds[i] = d
		}
		if out != nil {
			copy(out, ds)
		}
		return algo.Combine(ds), nil
	}
	return m.Store.AllowAll(ctx, now, fixed, out)
}

// TestMutant runs the conformance suite on the mutant named by
// $SLUICETEST_MUTANT; TestSuiteCatchesMutants runs it in a child process.
func TestMutant(t *testing.T) {
	kind := os.Getenv("SLUICETEST_MUTANT")
	if kind == "" {
		t.Skip("run by TestSuiteCatchesMutants")
	}
	sluicetest.Run(t, func(t *testing.T) sluice.Store {
		return &mutant{Store: memstore.New(memstore.Options{}), kind: kind}
	}, sluicetest.Penalties())
}

// TestSuiteCatchesMutants checks that the suite can fail: each broken store
// must fail the subtest that covers the promise it breaks.
func TestSuiteCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, c := range []struct{ kind, subtest string }{
		{"peek-charges", "TestMutant/Peek/"},
		{"allowall-charges-each", "TestMutant/AllowAll/AllOrNothing"},
		{"ignores-policy-name", "TestMutant/DistinctPolicies"},
		{"truncates-keys", "TestMutant/ArbitraryKeys/"},
		{"retry-off-by-1ms", "TestMutant/RetryAndReset/"},
		{"retry-off-by-1ms", "TestMutant/Timeline/token_bucket"},
		{"check-then-act", "TestMutant/Concurrency/"},
		{"ignores-penalty", "TestMutant/PenaltyTimeline/"},
		{"no-escalation", "TestMutant/PenaltyHours"},
		{"unblock-lifts-nothing", "TestMutant/PenaltyOperations"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMutant$", "-test.v")
			cmd.Env = append(os.Environ(), "SLUICETEST_MUTANT="+c.kind)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that breaks the contract (%s)", c.kind)
			}
			if !strings.Contains(string(out), "--- FAIL: "+c.subtest) {
				t.Errorf("the suite failed the %s store, but not in %s:\n%s", c.kind, c.subtest, failLines(string(out)))
			}
		})
	}
}

// failLines returns the FAIL lines of go test -v output.
func failLines(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if strings.Contains(line, "--- FAIL") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// recorder is a testing.TB that records a fatal failure instead of ending
// the test, so that the tests can check that CompareStores fails.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// compare runs CompareStores on a recorder and returns its failure message.
func compare(t *testing.T, a, b sluice.Store, tr sluicetest.Trace) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sluicetest.CompareStores(r, a, b, tr)
	}()
	<-done
	return r.msg
}

func TestCompareStores(t *testing.T) {
	t.Run("equal stores agree", func(t *testing.T) {
		for seed := range uint64(5) {
			tr := sluicetest.RandomTrace(seed, sluicetest.TraceConfig{})
			if msg := compare(t, memstore.New(memstore.Options{}), memstore.New(memstore.Options{Shards: 1}), tr); msg != "" {
				t.Errorf("two memory stores disagree:\n%s", msg)
			}
		}
	})
	for _, kind := range []string{"peek-charges", "allowall-charges-each", "ignores-policy-name", "retry-off-by-1ms"} {
		t.Run(kind+" is caught", func(t *testing.T) {
			tr := sluicetest.RandomTrace(1, sluicetest.TraceConfig{})
			msg := compare(t, memstore.New(memstore.Options{}), &mutant{Store: memstore.New(memstore.Options{}), kind: kind}, tr)
			if msg == "" {
				t.Fatalf("CompareStores passed a %s store", kind)
			}
			testkit.WantAll(t, "CompareStores message", msg, "trace seed 1, step ", "a: {", "b: {")
		})
	}
}

func TestRandomTrace(t *testing.T) {
	cfg := sluicetest.TraceConfig{Steps: 5000}
	a, b := sluicetest.RandomTrace(7, cfg), sluicetest.RandomTrace(7, cfg)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("RandomTrace(7) made two different traces")
	}
	if c := sluicetest.RandomTrace(8, cfg); fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("RandomTrace(7) and RandomTrace(8) made the same trace")
	}
	if len(a.Steps) != 5000 || a.Seed != 7 {
		t.Fatalf("RandomTrace(7, 5000 steps) has seed %d and %d steps", a.Seed, len(a.Steps))
	}
	ops := map[sluicetest.Op]int{}
	algs := map[sluice.Algorithm]int{}
	keys := map[string]bool{}
	var zeroGaps, hourGaps, bigCosts, maxDelays, duplicates int
	for i, st := range a.Steps {
		ops[st.Op]++
		if i > 0 {
			gap := st.At.Sub(a.Steps[i-1].At)
			switch {
			case gap < 0:
				t.Fatalf("step %d goes back in time by %v", i, -gap)
			case gap == 0:
				zeroGaps++
			case gap >= time.Hour:
				hourGaps++
			}
			if gap > 6*time.Hour {
				t.Errorf("step %d: gap %v exceeds the default 6h", i, gap)
			}
		}
		if (st.Op != sluicetest.OpAllowAll && len(st.Reqs) != 1) || len(st.Reqs) == 0 || len(st.Reqs) > 4 {
			t.Fatalf("step %d: %s with %d requests", i, st.Op, len(st.Reqs))
		}
		seen := map[string]bool{}
		for _, r := range st.Reqs {
			if r.Key != st.Reqs[0].Key {
				t.Fatalf("step %d: AllowAll over keys %q and %q", i, st.Reqs[0].Key, r.Key)
			}
			if err := r.Policy.Validate(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if r.Cost < 1 || r.Cost > max(5, r.Policy.Capacity()+1) {
				t.Fatalf("step %d: cost %d under %v", i, r.Cost, r.Policy)
			}
			if r.Cost > 5 {
				bigCosts++
			}
			if r.MaxDelay != 0 {
				maxDelays++
			}
			if seen[r.Policy.Name] {
				duplicates++
			}
			seen[r.Policy.Name] = true
			algs[r.Policy.Algorithm]++
			keys[r.Key] = true
		}
	}
	for _, op := range []sluicetest.Op{sluicetest.OpAllow, sluicetest.OpPeek, sluicetest.OpAllowAll} {
		if ops[op] < 500 {
			t.Errorf("%d %s steps in 5000, want at least 500", ops[op], op)
		}
	}
	for _, alg := range sluice.Algorithms() {
		if algs[alg] < 200 {
			t.Errorf("%d requests under %s, want at least 200", algs[alg], alg)
		}
	}
	if len(keys) != 5 {
		t.Errorf("%d keys, want 5", len(keys))
	}
	for name, n := range map[string]int{"zero gaps": zeroGaps, "gaps of an hour or more": hourGaps, "costs above 5": bigCosts, "MaxDelays": maxDelays, "duplicate policies in AllowAll": duplicates} {
		if n < 20 {
			t.Errorf("%d %s in 5000 steps, want at least 20", n, name)
		}
	}
}
