package algo

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// refBlock is the block of the n-th offence by its definition, with
// arbitrary precision: min(BlockFor·Factor^(n−1), MaxBlock).
func refBlock(p Penalty, n int64) int64 {
	d := new(big.Int).Exp(big.NewInt(p.Factor), big.NewInt(n-1), nil)
	d.Mul(d, big.NewInt(p.BlockFor))
	if d.Cmp(big.NewInt(p.MaxBlock)) > 0 {
		return p.MaxBlock
	}
	return d.Int64()
}

func TestPenaltyBlock(t *testing.T) {
	for _, tc := range []struct {
		p    Penalty
		n    int64
		want int64
	}{
		{Penalty{BlockFor: uMin, Factor: 2, MaxBlock: uDay}, 1, uMin},
		{Penalty{BlockFor: uMin, Factor: 2, MaxBlock: uDay}, 2, 2 * uMin},
		{Penalty{BlockFor: uMin, Factor: 2, MaxBlock: uDay}, 11, 1024 * uMin},
		{Penalty{BlockFor: uMin, Factor: 2, MaxBlock: uDay}, 12, uDay},
		{Penalty{BlockFor: uMin, Factor: 1, MaxBlock: uDay}, 1000, uMin},
		{Penalty{BlockFor: 1, Factor: 1000, MaxBlock: 10 * uYear}, MaxOffences, 10 * uYear},
		{Penalty{BlockFor: 10 * uYear, Factor: 1000, MaxBlock: 10 * uYear}, 2, 10 * uYear},
		{Penalty{BlockFor: 3, Factor: 7, MaxBlock: 3 * 7 * 7 * 7}, 4, 3 * 7 * 7 * 7},
		{Penalty{BlockFor: 3, Factor: 7, MaxBlock: 3*7*7*7 - 1}, 4, 3*7*7*7 - 1},
	} {
		if got := tc.p.Block(tc.n); got != tc.want {
			t.Errorf("%+v.Block(%d) = %d, want %d", tc.p, tc.n, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(2026, 33))
	for range 20000 {
		p := randomPenalty(rng)
		n := 1 + rng.Int64N(80)
		if got, want := p.Block(n), refBlock(p, n); got != want {
			t.Fatalf("%+v.Block(%d) = %d, want %d", p, n, got, want)
		}
	}
}

// randomPenalty draws a valid Penalty over the whole ranges.
func randomPenalty(rng *rand.Rand) Penalty {
	p := Penalty{BlockFor: logUniform(rng, 1, 10*uYear), Factor: logUniform(rng, 1, 1000)}
	p.MaxBlock = logUniform(rng, p.BlockFor, 10*uYear)
	if p.Factor > 1 || rng.IntN(2) == 0 {
		p.ForgetAfter = logUniform(rng, 1, 10*uYear)
	}
	return p
}

// penalized is one key under an algorithm and a penalty, decided as the
// stores decide it: during a block the algorithm is asked without
// charging, otherwise it decides and a refusal may start a block.
type penalized struct {
	lim *limiter
	pen Penalty
	b   Block
}

func (k *penalized) decide(now, cost int64) Verdict {
	if k.b.Blocks(now) {
		own := k.lim.peek(now, cost)
		if own.Allowed {
			own.ResetAfter = k.lim.peek(now, 0).ResetAfter // nothing is charged
		}
		return k.b.During(now, own)
	}
	own := k.lim.decide(now, cost)
	nb, v, _ := k.pen.Penalize(k.b, now, own)
	k.b = nb
	return v
}

// TestPenaltyTimeline replays the timeline of docs/algorithms.md: a fixed
// window of 2 per 10 s with a block of 1 s, doubled per offence up to 4 s,
// offences forgotten 30 s after the last block ends.
func TestPenaltyTimeline(t *testing.T) {
	pen := Penalty{BlockFor: uSec, Factor: 2, MaxBlock: 4 * uSec, ForgetAfter: 30 * uSec}
	k := &penalized{lim: newLimiter(fixedWindow, Params{Limit: 2, Burst: 2, Period: 10 * uSec}, 0), pen: pen}
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	offences := int64(0)
	for _, row := range []struct {
		t        int64 // ms since origin2026
		ok       bool
		retry    time.Duration
		reset    time.Duration
		offences int64
	}{
		{0, true, 0, ms(10000), 0},
		{1000, true, 0, ms(9000), 0},
		{2000, false, ms(8000), ms(8000), 1},    // offence 1: blocked to 3 s; the window refuses until 10 s
		{2500, false, ms(7500), ms(7500), 1},    // during the block: not an offence
		{3000, false, ms(7000), ms(7000), 2},    // the block has ended, the window still refuses: offence 2, blocked to 5 s
		{10000, true, 0, ms(10000), 2},          // a new window
		{10100, true, 0, ms(9900), 2},           //
		{10200, false, ms(9800), ms(9800), 3},   // offence 3: 4 s, blocked to 14.2 s
		{14100, false, ms(5900), ms(5900), 3},   // blocked still
		{20000, true, 0, ms(10000), 3},          //
		{20000, true, 0, ms(10000), 3},          //
		{20001, false, ms(9999), ms(9999), 4},   // offence 4: 8 s capped at 4 s, to 24.001 s
		{30000, true, 0, ms(10000), 4},          //
		{30000, true, 0, ms(10000), 4},          //
		{30000, false, ms(10000), ms(10000), 5}, // offence 5, to 34 s
		{70000, true, 0, ms(10000), 5},          // 36 s after the block: forgotten
		{70000, true, 0, ms(10000), 5},          //
		{70000, false, ms(10000), ms(10000), 1}, // offence 1 again: 1 s
	} {
		now := origin2026 + row.t*uMS
		got := k.decide(now, 1)
		want := Verdict{Allowed: row.ok, Blocked: !row.ok, Offence: row.offences != offences, RetryAfter: row.retry, ResetAfter: row.reset}
		offences = row.offences
		if row.ok {
			want.Remaining = got.Remaining // the window's own, checked by its tests
		}
		if got != want || k.b.Offences != row.offences {
			t.Fatalf("t=%dms: decide = %+v with %d offences, want %+v with %d", row.t, got, k.b.Offences, want, row.offences)
		}
	}
}

// refPenalty is the penalty by its definition, from the history of
// offences: when each happened and when its block ended.
type refPenalty struct {
	p          Penalty
	at, ending []int64
}

func (r *refPenalty) blocks(now int64) bool {
	return len(r.ending) > 0 && now < r.ending[len(r.ending)-1]
}

// offend records an offence at now and returns its block's end: its count
// is 1 plus the offences before it, back to the first that was followed
// by one at least ForgetAfter after its block ended.
func (r *refPenalty) offend(now int64) {
	n := int64(1)
	next := now
	for j := len(r.at) - 1; j >= 0 && next < r.ending[j]+r.p.ForgetAfter; j-- {
		n++
		next = r.at[j]
	}
	r.at = append(r.at, now)
	r.ending = append(r.ending, now+refBlock(r.p, n))
}

// during returns the verdict of a request refused by a block at t: the
// smallest whole number of ms after which the block is over and the model
// admits it, and the smallest after which the block is over and the model
// is initial.
func (r *refPenalty) during(m model, t, c int64, guess Verdict) Verdict {
	if c > m.capacity() {
		return Verdict{Remaining: m.remaining(t), RetryAfter: Never, ResetAfter: refResetAfter(m, t, guess.ResetAfter)}
	}
	end := r.ending[len(r.ending)-1]
	retry := smallest(1, guess.RetryAfter.Milliseconds(), func(d int64) bool { return t+d*uMS >= end && m.allows(t+d*uMS, c) })
	reset := smallest(0, guess.ResetAfter.Milliseconds(), func(d int64) bool { return t+d*uMS >= end && m.initial(t+d*uMS) })
	return Verdict{Blocked: true, RetryAfter: durationMillis(retry), ResetAfter: durationMillis(reset)}
}

// TestDifferentialPenalty runs seeded random traces of every algorithm
// under a random penalty through the penalty's functions and through the
// reference models (the algorithm's and refPenalty), decision by
// decision: blocks, their escalation and forgetting, and what a refusal
// during a block reports.
func TestDifferentialPenalty(t *testing.T) {
	eachTrace(t, 5, 33, func(t *testing.T, rng *rand.Rand, i int, a algorithm, p Params) {
		// Blocks from a microsecond to about the period, and forgetting
		// over up to a few periods, so that traces see every case.
		pen := Penalty{BlockFor: logUniform(rng, 1, max(p.Period, 1)), Factor: 1 + rng.Int64N(4)}
		pen.MaxBlock = pen.BlockFor * logUniform(rng, 1, 64)
		pen.ForgetAfter = logUniform(rng, 1, 4*p.Period+1)
		lim := newLimiter(a, p, 0)
		k := &penalized{lim: lim, pen: pen}
		m := newModel(a, p, 0)
		ref := &refPenalty{p: pen}
		shape := traceShape{n: 300, start: origin2026 + rng.Int64N(uDay), maxGap: 3 * uHour}
		for j, e := range randomTrace(rng, p, a.capacity(a.params(p)), shape) {
			if e.cost == 0 {
				continue // a check's verdict is the stores' (algo.Check), tested with them
			}
			got := k.decide(e.t, e.cost)
			var want Verdict
			switch {
			case ref.blocks(e.t):
				want = ref.during(m, e.t, e.cost, got)
			default:
				var next model
				next, want = refDecide(m, e.t, e.cost, got)
				m = next
				if !want.Allowed && want.RetryAfter != Never {
					ref.offend(e.t)
					want = ref.during(m, e.t, e.cost, got)
					want.Offence = true
				}
			}
			if got != want {
				t.Fatalf("event %d: %v(t=%d, cost=%d) under %+v = %+v, want %+v (state %+v, params %+v)",
					j, a, e.t, e.cost, pen, got, want, k.b, lim.p)
			}
			if ref.blocks(e.t) != k.b.Blocks(e.t) {
				t.Fatalf("event %d: blocked = %v, want %v", j, k.b.Blocks(e.t), ref.blocks(e.t))
			}
		}
	})
}

func ExamplePenalty_Block() {
	p := Penalty{BlockFor: uMin, Factor: 2, MaxBlock: uHour}
	for n := int64(1); n <= 8; n++ {
		fmt.Print(time.Duration(p.Block(n))*time.Microsecond, " ")
	}
	// Output: 1m0s 2m0s 4m0s 8m0s 16m0s 32m0s 1h0m0s 1h0m0s
}
