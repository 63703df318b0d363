package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Op is the Store method a Step calls.
type Op uint8

// The operations of a trace.
const (
	OpAllow Op = iota
	OpPeek
	OpAllowAll
	OpDebit
	OpRefund
)

// String returns the name of the Store method.
func (o Op) String() string {
	switch o {
	case OpAllow:
		return "Allow"
	case OpPeek:
		return "Peek"
	case OpAllowAll:
		return "AllowAll"
	case OpDebit:
		return "Debit"
	case OpRefund:
		return "Refund"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Step is one Store call of a Trace: Op at At with Reqs, which holds one
// request for Allow and Peek and one or more, all for one key, for
// AllowAll.
type Step struct {
	At   time.Time
	Op   Op
	Reqs []sluice.Request
}

// String describes the step on one line.
func (st Step) String() string {
	parts := make([]string, len(st.Reqs))
	for i, r := range st.Reqs {
		parts[i] = fmtRequest(r)
	}
	return fmt.Sprintf("%s %s(%s)", st.At.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), st.Op, strings.Join(parts, "; "))
}

// Trace is a sequence of Store calls at non-decreasing times. Seed is the
// seed RandomTrace made it from.
type Trace struct {
	Seed  uint64
	Steps []Step
}

// TraceConfig configures RandomTrace. The zero value gives the defaults
// stated with each field.
type TraceConfig struct {
	// Steps is the number of calls; default 2000.
	Steps int
	// Keys is the number of distinct keys; default 5. Some of them hold
	// braces and separators.
	Keys int
	// MaxCost bounds the usual cost, drawn from 1..MaxCost; default 5.
	MaxCost int64
	// BigCostOneIn makes one request in BigCostOneIn cost a random amount
	// up to its policy's capacity plus one, which drives large policies to
	// large numbers (and sometimes past the capacity). 0 means 16; a
	// negative value turns big costs off.
	BigCostOneIn int
	// MaxGap bounds the time between calls; default 6 hours. A quarter of
	// the gaps are zero and the rest spread over every order of magnitude
	// from a microsecond up.
	MaxGap time.Duration
	// Policies are the policies drawn from; default TracePolicies().
	Policies []sluice.Policy
	// Start is the time of the first call; default 2025-01-01T00:00:00Z.
	Start time.Time
	// Usage adds the calls of costs known afterwards: Debit (one call in
	// six, sometimes of several times the capacity, driving keys into
	// debt), Refund (one in ten) and checks (Allow and Peek of cost 0, one
	// in eight of them). Policies must then be rate policies.
	Usage bool
}

// TracePolicies returns RandomTrace's default policies: every algorithm,
// with rates that are not whole microseconds per unit, two policies with
// equal numbers and different names, and policies with the largest limits
// and periods Sluice accepts, which need exact arithmetic beyond 2^53.
func TracePolicies() []sluice.Policy {
	return []sluice.Policy{
		sluice.TokenBucket(7, 13*time.Second, 3).Named("tb"),
		sluice.TokenBucket(7, 13*time.Second, 3).Named("tb-twin"),
		sluice.TokenBucket(sluice.MaxLimit, sluice.MaxPeriod, 0).Named("tb-huge"),
		sluice.GCRA(5, 2*time.Second, 0).Named("gcra"),
		sluice.GCRA(999_999_937, time.Hour, 17).Named("gcra-fast"),
		sluice.LeakyBucket(3, time.Second, 4).Named("leaky"),
		sluice.LeakyBucket(1, time.Minute, 5).Named("leaky-slow"),
		sluice.FixedWindow(10, time.Minute).Named("fixed"),
		sluice.FixedWindow(sluice.MaxLimit, 24*time.Hour).Named("fixed-huge"),
		sluice.SlidingLog(6, 90*time.Second).Named("log"),
		sluice.SlidingLog(sluice.MaxLimit, time.Hour).Named("log-huge"),
		sluice.SlidingWindow(9, 10*time.Minute).Named("window"),
		sluice.SlidingWindow(sluice.MaxLimit, 7*time.Hour).Named("window-huge"),
	}
}

// PenaltyPolicies returns policies of every rate algorithm with penalties
// (sluice.Penalty) whose blocks, escalation and forgetting a random trace
// meets often: blocks from a millisecond to an hour, factors 1 to 3,
// offences forgotten after seconds to hours, and two policies with equal
// numbers and different penalties, which share their keys' state.
func PenaltyPolicies() []sluice.Policy {
	with := func(p sluice.Policy, block time.Duration, factor int64, most, forget time.Duration) sluice.Policy {
		p.Penalty = sluice.Penalty{BlockFor: block, Factor: factor, MaxBlock: most, ForgetAfter: forget}
		return p
	}
	return []sluice.Policy{
		with(sluice.TokenBucket(7, 13*time.Second, 3).Named("tb"), 10*time.Second, 2, time.Hour, time.Minute),
		with(sluice.TokenBucket(7, 13*time.Second, 3).Named("tb"), time.Second, 3, 0, 3*time.Hour),
		with(sluice.GCRA(5, 2*time.Second, 0).Named("gcra"), time.Millisecond, 3, time.Minute, 10*time.Second),
		with(sluice.LeakyBucket(3, time.Second, 4).Named("leaky"), 333*time.Millisecond+1, 1, 0, 0),
		with(sluice.FixedWindow(10, time.Minute).Named("fixed"), time.Minute, 2, 24*time.Hour, time.Hour),
		with(sluice.SlidingLog(6, 90*time.Second).Named("log"), 7*time.Second, 2, 0, 10*time.Minute),
		with(sluice.SlidingWindow(9, 10*time.Minute).Named("window"), time.Hour, 2, 4*time.Hour, 6*time.Hour),
		with(sluice.SlidingWindow(sluice.MaxLimit, 7*time.Hour).Named("window-huge"), time.Second, 1000, sluice.MaxPeriod, sluice.MaxPeriod),
	}
}

// RandomTrace returns a trace made from seed: Allow, Peek and AllowAll calls
// (over two or three policies of one key, sometimes with a policy twice) on
// several keys, with random costs, random leaky-bucket MaxDelays and random
// gaps. The same seed and config give the same trace in every Go release.
func RandomTrace(seed uint64, cfg TraceConfig) Trace {
	if cfg.Steps <= 0 {
		cfg.Steps = 2000
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 5
	}
	if cfg.MaxCost <= 0 {
		cfg.MaxCost = 5
	}
	if cfg.BigCostOneIn == 0 {
		cfg.BigCostOneIn = 16
	}
	if cfg.MaxGap <= 0 {
		cfg.MaxGap = 6 * time.Hour
	}
	if len(cfg.Policies) == 0 {
		cfg.Policies = TracePolicies()
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		switch i % 3 {
		case 0:
			keys[i] = fmt.Sprintf("user-%d", i)
		case 1:
			keys[i] = fmt.Sprintf("{user}:%d", i)
		default:
			keys[i] = fmt.Sprintf("user:%d\x00\n", i)
		}
	}
	r := newRand(seed)
	request := func(p *sluice.Policy, key string) sluice.Request {
		req := sluice.Request{Policy: p, Key: key, Cost: 1 + r.int63n(cfg.MaxCost)}
		if cfg.BigCostOneIn > 0 && r.intn(cfg.BigCostOneIn) == 0 {
			req.Cost = 1 + r.int63n(p.Capacity()+1)
		}
		if p.Algorithm == sluice.LeakyBucketAlgorithm && r.intn(3) == 0 {
			req.MaxDelay = time.Duration(1+r.int63n(2_000_000)) * time.Microsecond
		}
		return req
	}
	tr := Trace{Seed: seed, Steps: make([]Step, cfg.Steps)}
	now := cfg.Start
	for i := range tr.Steps {
		now = now.Add(randomGap(r, cfg.MaxGap))
		key := keys[r.intn(len(keys))]
		st := Step{At: now}
		switch n := r.intn(8); {
		case n < 4:
			st.Op = OpAllow
		case n < 5:
			st.Op = OpPeek
		default:
			st.Op = OpAllowAll
		}
		if cfg.Usage {
			switch n := r.intn(30); {
			case n < 5:
				st.Op = OpDebit
			case n < 8:
				st.Op = OpRefund
			}
			if st.Op == OpDebit || st.Op == OpRefund {
				req := request(&cfg.Policies[r.intn(len(cfg.Policies))], key)
				if st.Op == OpDebit && r.intn(4) == 0 {
					req.Cost = 1 + r.int63n(3*req.Policy.Capacity())
				}
				req.MaxDelay = 0
				st.Reqs = []sluice.Request{req}
				tr.Steps[i] = st
				continue
			}
		}
		if st.Op != OpAllowAll || len(cfg.Policies) == 1 {
			st.Reqs = []sluice.Request{request(&cfg.Policies[r.intn(len(cfg.Policies))], key)}
		} else {
			k := min(2+r.intn(2), len(cfg.Policies))
			for _, j := range pick(r, len(cfg.Policies), k) {
				st.Reqs = append(st.Reqs, request(&cfg.Policies[j], key))
			}
			if r.intn(8) == 0 {
				st.Reqs = append(st.Reqs, request(st.Reqs[0].Policy, key))
			}
		}
		if cfg.Usage && st.Op != OpAllowAll && r.intn(8) == 0 {
			st.Reqs[0].Cost = 0
		}
		tr.Steps[i] = st
	}
	return tr
}

// pick returns k distinct numbers from [0, n) in random order.
func pick(r *rand, n, k int) []int {
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	for i := range k {
		j := i + r.intn(n-i)
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm[:k]
}

// outcome is what a store answered to one step.
type outcome struct {
	d   sluice.Decision
	out []sluice.Decision
	err error
}

func (o outcome) String() string {
	s := fmtDecision(o.d)
	if o.out != nil && o.err == nil {
		s += " out " + fmtDecisions(o.out)
	}
	if o.err != nil {
		s += fmt.Sprintf(" error %q", o.err)
	}
	return s
}

// apply runs one step against st, turning a panic into an error.
func apply(st sluice.Store, step Step) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = outcome{err: fmt.Errorf("panic: %v", r)}
		}
	}()
	ctx := context.Background()
	switch step.Op {
	case OpAllow:
		o.d, o.err = st.Allow(ctx, step.At, step.Reqs[0])
	case OpPeek:
		o.d, o.err = st.Peek(ctx, step.At, step.Reqs[0])
	case OpDebit:
		o.d, o.err = st.Debit(ctx, step.At, step.Reqs[0])
	case OpRefund:
		o.d, o.err = st.Refund(ctx, step.At, step.Reqs[0])
	default:
		o.out = make([]sluice.Decision, len(step.Reqs))
		o.d, o.err = st.AllowAll(ctx, step.At, step.Reqs, o.out)
	}
	return o
}

// errClass names the kind of an error, so that two stores' errors can be
// compared without comparing their text.
func errClass(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, sluice.ErrCostExceedsCapacity):
		return "ErrCostExceedsCapacity"
	case errors.Is(err, sluice.ErrInvalidCost):
		return "ErrInvalidCost"
	case errors.Is(err, sluice.ErrInvalidPolicy):
		return "ErrInvalidPolicy"
	}
	return "failure"
}

// differ returns why a and b disagree on step, or "".
func differ(step Step, a, b outcome) string {
	ca, cb := errClass(a.err), errClass(b.err)
	switch {
	case ca == "failure" || cb == "failure":
		return "a store failed"
	case ca != cb:
		return "the errors differ"
	case step.Op == OpAllowAll && ca != "none":
		// Only the verdict of a refused AllowAll is specified.
		if a.d.Allowed != b.d.Allowed || a.d.RetryAfter != b.d.RetryAfter {
			return "the decisions differ"
		}
		return ""
	case a.d != b.d:
		return "the decisions differ"
	}
	for i := range a.out {
		if a.out[i] != b.out[i] {
			return fmt.Sprintf("the decisions of request %d differ", i)
		}
	}
	return ""
}

// CompareStores replays tr through a and b, one step on a then the same
// step on b, and fails t at the first step where they answer differently:
// a different Decision in any field, different decisions in AllowAll's out,
// or errors of different kinds (ErrCostExceedsCapacity, ErrInvalidCost,
// ErrInvalidPolicy). Any other error, or a panic, fails t as a store
// failure. Both stores must start empty and honour the times of the trace.
//
// The failure message names the seed and the step, and shows the earlier
// steps on the same key with a's answers, so that a mismatch can be
// reproduced and read.
func CompareStores(t testing.TB, a, b sluice.Store, tr Trace) {
	t.Helper()
	answers := make([]outcome, len(tr.Steps))
	for i, step := range tr.Steps {
		oa, ob := apply(a, step), apply(b, step)
		answers[i] = oa
		why := differ(step, oa, ob)
		if why == "" {
			continue
		}
		var hist strings.Builder
		shown := 0
		for j := i - 1; j >= 0 && shown < 8; j-- {
			if tr.Steps[j].Reqs[0].Key == step.Reqs[0].Key {
				hist.WriteString(fmt.Sprintf("    step %d: %s\n      -> %s\n", j, tr.Steps[j], answers[j]))
				shown++
			}
		}
		t.Fatalf("trace seed %d, step %d of %d: %s\n  %s\n  a: %s\n  b: %s\n  earlier steps on this key, latest first, with a's answers:\n%s",
			tr.Seed, i, len(tr.Steps), why, step, oa, ob, hist.String())
	}
}
