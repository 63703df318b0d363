package sluicetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// penaltyOf is the penalty of the penalty timelines: a block of 1 s,
// doubled by each further offence up to 4 s, offences forgotten 30 s
// after the last block ends.
var penaltyOf = sluice.Penalty{BlockFor: sec, Factor: 2, MaxBlock: 4 * sec, ForgetAfter: 30 * sec}

// penaltyBucketRows is the timeline of a token bucket of 10 per second
// with burst 3 under penaltyOf. A refusal while the key is blocked says
// when the request would pass: the later of the block's end and the
// bucket's own retry; its reset is the later of the block's end and the
// bucket's own reset, of the state as it is (nothing is charged).
var penaltyBucketRows = []row{
	{at: 0, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
	// The bucket refuses (its own retry 100 ms): offence 1, blocked for 1 s.
	{at: 0, cost: 1, blocked: true, offence: true, remaining: 0, retry: 1 * sec, reset: 1 * sec},
	// Blocked: the bucket, full again since 300 ms, would admit it.
	{at: 500 * ms, cost: 1, blocked: true, remaining: 0, retry: 500 * ms, reset: 500 * ms},
	{at: 500 * ms, cost: 1, peek: true, blocked: true, remaining: 0, retry: 500 * ms, reset: 500 * ms},
	{at: 1 * sec, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
	// Offence 2, remembered: blocked for 2 s, until 3.1 s.
	{at: 1*sec + 100*ms, cost: 2, blocked: true, offence: true, remaining: 0, retry: 2 * sec, reset: 2 * sec},
	// Never fits: neither an offence nor blocked (the block has ended).
	{at: 3*sec + 100*ms, cost: 4, remaining: 3, retry: never, reset: 0},
	{at: 3*sec + 100*ms, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
	// Offence 3: 4 s, until 7.1 s.
	{at: 3*sec + 100*ms, cost: 1, blocked: true, offence: true, remaining: 0, retry: 4 * sec, reset: 4 * sec},
	{at: 7*sec + 100*ms, cost: 1, allowed: true, remaining: 2, reset: 100 * ms},
	// Offence 4: 8 s capped at 4 s, until 11.1 s; offences are
	// forgotten from 41.1 s.
	{at: 7*sec + 100*ms, cost: 3, blocked: true, offence: true, remaining: 0, retry: 4 * sec, reset: 4 * sec},
	{at: 41*sec + 100*ms, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
	// Forgotten: offence 1 again, 1 s.
	{at: 41*sec + 100*ms, cost: 1, blocked: true, offence: true, remaining: 0, retry: 1 * sec, reset: 1 * sec},
}

var penaltyCases = []timelineCase{
	{"token_bucket", sluice.TokenBucket(10, sec, 3), penaltyBucketRows},
	{"gcra", sluice.GCRA(10, sec, 3), penaltyBucketRows},
	// Every admitted request finds the queue empty: no delay.
	{"leaky_bucket", sluice.LeakyBucket(10, sec, 3), penaltyBucketRows},
	{"fixed_window", sluice.FixedWindow(2, 10*sec), []row{
		{at: 0, cost: 1, allowed: true, remaining: 1, reset: 10 * sec},
		{at: 1 * sec, cost: 1, allowed: true, remaining: 0, reset: 9 * sec},
		// Offence 1: blocked until 3 s; the window refuses until 10 s.
		{at: 2 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 8 * sec, reset: 8 * sec},
		{at: 2*sec + 500*ms, cost: 1, blocked: true, remaining: 0, retry: 7500 * ms, reset: 7500 * ms},
		// The block has ended and the window still refuses: offence 2,
		// blocked until 5 s.
		{at: 3 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 7 * sec, reset: 7 * sec},
		{at: 10 * sec, cost: 1, allowed: true, remaining: 1, reset: 10 * sec},
		{at: 10*sec + 100*ms, cost: 1, allowed: true, remaining: 0, reset: 9900 * ms},
		// Offence 3: blocked for 4 s, until 14.2 s.
		{at: 10*sec + 200*ms, cost: 1, blocked: true, offence: true, remaining: 0, retry: 9800 * ms, reset: 9800 * ms},
		{at: 20 * sec, cost: 1, allowed: true, remaining: 1, reset: 10 * sec},
	}},
	{"sliding_log", sluice.SlidingLog(2, 10*sec), []row{
		{at: 0, cost: 1, allowed: true, remaining: 1, reset: 10 * sec},
		{at: 1 * sec, cost: 1, allowed: true, remaining: 0, reset: 10 * sec},
		// Offence 1: blocked until 3 s; the log refuses until 10 s.
		{at: 2 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 8 * sec, reset: 9 * sec},
		{at: 10 * sec, cost: 1, allowed: true, remaining: 0, reset: 10 * sec},
		// The log would admit it at 11 s; offence 2 blocks it until 12 s.
		{at: 10 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 2 * sec, reset: 10 * sec},
		// Blocked; the log alone would admit it (its state as it is
		// counts the entry of 10 s, until 20 s).
		{at: 11*sec + 500*ms, cost: 1, blocked: true, remaining: 0, retry: 500 * ms, reset: 8500 * ms},
		{at: 12 * sec, cost: 1, allowed: true, remaining: 0, reset: 10 * sec},
	}},
	{"sliding_window", sluice.SlidingWindow(2, 10*sec), []row{
		{at: 0, cost: 1, allowed: true, remaining: 1, reset: 20 * sec},
		{at: 1 * sec, cost: 1, allowed: true, remaining: 0, reset: 19 * sec},
		// The estimate admits one more at 15 s (2·5/10 + 1 ≤ 2): offence
		// 1, blocked until 3 s.
		{at: 2 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 13 * sec, reset: 18 * sec},
		{at: 15 * sec, cost: 1, allowed: true, remaining: 0, reset: 15 * sec},
		// 1 + 1 + 1 > 2 until 20 s; offence 2 blocks it until 17 s.
		{at: 15 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 5 * sec, reset: 15 * sec},
		{at: 16 * sec, cost: 1, blocked: true, remaining: 0, retry: 4 * sec, reset: 14 * sec},
	}},
}

// penaltyTimeline replays, for every rate algorithm, a timeline of blocks
// worked out by hand from the definitions in docs/algorithms.md.
func (s *suite) penaltyTimeline(t *testing.T) {
	s.needCallerTime(t)
	for _, tc := range penaltyCases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			p.Penalty = penaltyOf
			runRows(t, s.newStore(t), p, "guesser", tc.rows)
		})
	}
}

// penaltyHours checks escalation and forgetting over days: a bucket of 1
// per second, blocks of 1 minute doubled per offence up to a day,
// offences forgotten a day after the last block ends. A guesser who comes
// back as each block ends is refused for 1, 2, 4, ... minutes, then a
// day at a time; a day of quiet after a block forgets them all.
func (s *suite) penaltyHours(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	p := sluice.TokenBucket(1, sec, 1)
	p.Penalty = sluice.Penalty{BlockFor: time.Minute, Factor: 2, MaxBlock: 24 * time.Hour, ForgetAfter: 24 * time.Hour}
	at := time.Duration(0)
	block := time.Minute
	for n := 1; n <= 14; n++ {
		runRowsFrom(t, st, p, "guesser", t0.Add(at), []row{
			{at: 0, cost: 1, allowed: true, remaining: 0, reset: sec},
			{at: 0, cost: 1, blocked: true, offence: true, remaining: 0, retry: block, reset: block},
			{at: block / 2, cost: 1, peek: true, blocked: true, remaining: 0, retry: block / 2, reset: block / 2},
			{at: block - ms, cost: 1, blocked: true, remaining: 0, retry: ms, reset: ms},
		})
		if t.Failed() {
			t.Fatalf("offence %d, at t0+%v: blocked for %v", n, at, block)
		}
		at += block
		block = min(2*block, 24*time.Hour)
	}
	// The last block ended at `at`: a day later the offences are
	// forgotten.
	runRowsFrom(t, st, p, "guesser", t0.Add(at+24*time.Hour), []row{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: sec},
		{at: 0, cost: 1, blocked: true, offence: true, remaining: 0, retry: time.Minute, reset: time.Minute},
	})
	// The same history on another store, offending a millisecond sooner:
	// remembered.
	st = s.newStore(t)
	at, block = 0, time.Minute
	for range 14 {
		runRowsFrom(t, st, p, "remembered", t0.Add(at), []row{
			{at: 0, cost: 1, allowed: true, remaining: 0, reset: sec},
			{at: 0, cost: 1, blocked: true, offence: true, remaining: 0, retry: block, reset: block},
		})
		at += block
		block = min(2*block, 24*time.Hour)
	}
	runRowsFrom(t, st, p, "remembered", t0.Add(at+24*time.Hour-ms), []row{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: sec},
		{at: 0, cost: 1, blocked: true, offence: true, remaining: 0, retry: 24 * time.Hour, reset: 24 * time.Hour},
	})
}

// penaltyAllowAll checks blocks in AllowAll: an offence of one policy
// charges none of the others; a blocked key refuses the whole, charging
// nothing, and its refusal is no offence.
func (s *suite) penaltyAllowAll(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	a := sluice.TokenBucket(1, sec, 1).Named("guesses")
	a.Penalty = sluice.Penalty{BlockFor: time.Minute}
	b := sluice.FixedWindow(10, time.Hour).Named("hourly")
	reqs := []sluice.Request{{Policy: &a, Key: "k", Cost: 1}, {Policy: &b, Key: "k", Cost: 1}}
	for i, c := range []struct {
		at   time.Duration
		want []sluice.Decision
	}{
		{0, []sluice.Decision{
			{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: sec},
			{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Hour},
		}},
		// guesses refuses: its offence blocks k for a minute; hourly is
		// not charged.
		{0, []sluice.Decision{
			{Limit: 1, RetryAfter: time.Minute, ResetAfter: time.Minute, Blocked: true, Offence: true},
			{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Hour},
		}},
		{30 * sec, []sluice.Decision{
			{Limit: 1, RetryAfter: 30 * sec, ResetAfter: 30 * sec, Blocked: true},
			{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Hour - 30*sec},
		}},
		{time.Minute, []sluice.Decision{
			{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: sec},
			{Allowed: true, Limit: 10, Remaining: 8, ResetAfter: time.Hour - time.Minute},
		}},
	} {
		d, out, err := allowAll(t, st, t0.Add(c.at), reqs)
		if err != nil {
			t.Fatalf("step %d: AllowAll(%s) error = %v", i, fmtAt(t0.Add(c.at)), err)
		}
		if got, want := fmtDecisions(out), fmtDecisions(c.want); got != want {
			t.Errorf("step %d: AllowAll(%s) out = %s, want %s", i, fmtAt(t0.Add(c.at)), got, want)
		}
		if d.Allowed != c.want[0].Allowed || d.Blocked != c.want[0].Blocked || d.Offence != c.want[0].Offence {
			t.Errorf("step %d: AllowAll(%s) = %s, want allowed %v, blocked %v, offence %v (guesses')", i, fmtAt(t0.Add(c.at)), fmtDecision(d), c.want[0].Allowed, c.want[0].Blocked, c.want[0].Offence)
		}
	}
	// A blocked key refuses the whole even when another policy refuses
	// too; that refusal is no offence of the blocked policy, whose block
	// stays a minute from its start.
	st = s.newStore(t)
	full := sluice.FixedWindow(1, time.Hour).Named("once")
	both := []sluice.Request{{Policy: &a, Key: "j", Cost: 1}, {Policy: &full, Key: "j", Cost: 1}}
	if _, _, err := allowAll(t, st, t0, both); err != nil {
		t.Fatal(err)
	}
	if d, err := allow(t, st, t0, sluice.Request{Policy: &a, Key: "j", Cost: 1}); err != nil || d.RetryAfter != time.Minute {
		t.Fatalf("Allow(guesses, j) = %s, %v; want a block of 1m", fmtDecision(d), err)
	}
	_, out, err := allowAll(t, st, t0.Add(10*sec), both)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].RetryAfter != 50*sec || out[0].Offence || !out[0].Blocked {
		t.Errorf("AllowAll(guesses, once) during the block: guesses = %s, want retry 50s (the block, not a new one)", fmtDecision(out[0]))
	}
}

// penaltyOperations checks what else touches a block: Peek reports one
// and starts none, Debit charges during one, Unblock lifts one and
// forgets the offences, Reset forgets everything.
func (s *suite) penaltyOperations(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	p := sluice.FixedWindow(1, time.Minute)
	p.Penalty = sluice.Penalty{BlockFor: 2 * time.Minute, Factor: 3, ForgetAfter: time.Hour}
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	runRows(t, st, p, "k", []row{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: time.Minute},
		// Peek reports the window's refusal and starts no block.
		{at: sec, cost: 1, peek: true, remaining: 0, retry: 59 * sec, reset: 59 * sec},
		{at: sec, cost: 1, peek: true, remaining: 0, retry: 59 * sec, reset: 59 * sec},
		// A check of cost 0 that finds no unit left is an offence.
		{at: 2 * sec, cost: 0, blocked: true, offence: true, remaining: 0, retry: 2 * time.Minute, reset: 2 * time.Minute},
	})
	if t.Failed() {
		return
	}
	ctx := t.Context()
	// Debit ignores the block: the window's count goes up to 2.
	d, err := st.Debit(ctx, t0.Add(3*sec), req)
	if err != nil || d.Allowed || d.Remaining != 0 {
		t.Errorf("Debit during a block = %s, %v; want charged, not fitting", fmtDecision(d), err)
	}
	lifted, err := st.Unblock(ctx, t0.Add(4*sec), req)
	if err != nil || !lifted {
		t.Fatalf("Unblock(blocked key) = %v, %v; want true", lifted, err)
	}
	if lifted, err := st.Unblock(ctx, t0.Add(4*sec), req); err != nil || lifted {
		t.Errorf("Unblock(unblocked key) = %v, %v; want false", lifted, err)
	}
	// Unblocked, offences forgotten: the window still refuses, and this
	// refusal is a first offence again (2 minutes, not 6).
	runRows(t, st, p, "k", []row{
		{at: 5 * sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 2 * time.Minute, reset: 2 * time.Minute},
		// A second offence after that block, remembered: 6 minutes.
		{at: 2*time.Minute + 5*sec, cost: 1, allowed: true, remaining: 0, reset: 55 * sec},
		{at: 2*time.Minute + 6*sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 6 * time.Minute, reset: 6 * time.Minute},
	})
	if err := st.Reset(ctx, req); err != nil {
		t.Fatal(err)
	}
	runRows(t, st, p, "k", []row{
		{at: 2*time.Minute + 7*sec, cost: 1, allowed: true, remaining: 0, reset: 53 * sec},
		// Reset forgot the offences too: a first offence again.
		{at: 2*time.Minute + 8*sec, cost: 1, blocked: true, offence: true, remaining: 0, retry: 2 * time.Minute, reset: 2 * time.Minute},
	})
}

// penaltyInspect checks, for a store that is a sluice.Inspector, what
// Inspect reports of a block: its end, the offences and when they are
// forgotten, and the block's refusal as the decision; then the offence
// remembered once the block has ended, and forgotten after ForgetAfter.
func (s *suite) penaltyInspect(t *testing.T) {
	s.needCallerTime(t)
	st := s.newStore(t)
	in, ok := st.(sluice.Inspector)
	if !ok {
		t.Skipf("%T is not a sluice.Inspector", st)
	}
	ctx := t.Context()
	p := sluice.FixedWindow(1, time.Hour)
	p.Penalty = sluice.Penalty{BlockFor: 2 * time.Hour, Factor: 2, ForgetAfter: time.Hour}
	req := sluice.Request{Policy: &p, Key: "k", Cost: 1}
	if _, err := allow(t, st, t0, req); err != nil {
		t.Fatal(err)
	}
	if d, err := allow(t, st, t0, req); err != nil || !d.Offence || !d.Blocked {
		t.Fatalf("second Allow = %s, %v; want an offence", fmtDecision(d), err)
	}
	got, err := in.Inspect(ctx, t0.Add(time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Decision{Limit: 1, RetryAfter: 2*time.Hour - time.Minute, ResetAfter: 2*time.Hour - time.Minute, Blocked: true}
	if !got.BlockedUntil.Equal(t0.Add(2*time.Hour)) || got.Offences != 1 || !got.Forgotten.Equal(t0.Add(3*time.Hour)) || got.Decision != want {
		t.Errorf("Inspect during the block = until %v, %d offences forgotten at %v, %s; want until t0+2h, 1, t0+3h, %s",
			got.BlockedUntil, got.Offences, got.Forgotten, fmtDecision(got.Decision), fmtDecision(want))
	}
	got, err = in.Inspect(ctx, t0.Add(150*time.Minute), req)
	if err != nil || !got.BlockedUntil.IsZero() || got.Offences != 1 || got.Decision.Blocked {
		t.Errorf("Inspect after the block = until %v, %d offences, %s, %v; want not blocked, 1 offence remembered",
			got.BlockedUntil, got.Offences, fmtDecision(got.Decision), err)
	}
	got, err = in.Inspect(ctx, t0.Add(3*time.Hour), req)
	if err != nil || got.Offences != 0 || !got.Forgotten.IsZero() {
		t.Errorf("Inspect when forgotten = %d offences, forgotten at %v, %v; want none", got.Offences, got.Forgotten, err)
	}
}

// penaltySettle checks that an estimate to settle (SettleWithin) and a
// penalty in one call are refused with ErrNotSupported before anything is
// decided: by Allow, and by AllowAll whether the estimate is the
// penalized request's or another's; Peek ignores SettleWithin. Nothing is
// charged: the penalized key and the other still admit their whole
// capacity afterwards.
func (s *suite) penaltySettle(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	p := sluice.TokenBucket(2, slow, 2).Named("penalized")
	p.Penalty = sluice.Penalty{BlockFor: time.Minute}
	q := sluice.TokenBucket(2, slow, 2).Named("plain")
	settle := sluice.Request{Policy: &p, Key: "k", Cost: 2, SettleWithin: time.Minute}
	if d, err := st.Allow(ctx, s.at(0), settle); !errors.Is(err, sluice.ErrNotSupported) {
		t.Errorf("Allow with SettleWithin under a penalty = %s, %v; want ErrNotSupported", fmtDecision(d), err)
	}
	if d, err := st.Peek(ctx, s.at(0), settle); err != nil || !d.Allowed {
		t.Errorf("Peek with SettleWithin under a penalty = %s, %v; want allowed (Peek ignores SettleWithin)", fmtDecision(d), err)
	}
	for _, reqs := range [][]sluice.Request{
		{settle, {Policy: &q, Key: "k", Cost: 2}},
		{{Policy: &p, Key: "k", Cost: 2}, {Policy: &q, Key: "k", Cost: 2, SettleWithin: time.Minute}},
	} {
		if d, err := st.AllowAll(ctx, s.at(0), reqs, nil); !errors.Is(err, sluice.ErrNotSupported) {
			t.Errorf("AllowAll with SettleWithin on %s beside a penalty on %s = %s, %v; want ErrNotSupported",
				policyWith(reqs), p.Name, fmtDecision(d), err)
		}
	}
	for _, pol := range []*sluice.Policy{&p, &q} {
		if d, err := st.Allow(ctx, s.at(0), sluice.Request{Policy: pol, Key: "k", Cost: 2}); err != nil || !d.Allowed {
			t.Errorf("Allow of the whole capacity of %s after the refusals = %s, %v; want allowed (nothing charged)", pol.Name, fmtDecision(d), err)
		}
	}
}

// policyWith names the policy of the request of reqs that has SettleWithin.
func policyWith(reqs []sluice.Request) string {
	for _, r := range reqs {
		if r.SettleWithin > 0 {
			return r.Policy.Name
		}
	}
	return ""
}
