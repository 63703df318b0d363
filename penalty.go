package sluice

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/algo"
)

// MaxFactor is the largest Penalty.Factor.
const MaxFactor = 1000

// Penalty blocks a key for a while once its policy refuses it, longer for
// each repeat offence: the defence of a login endpoint against password
// guessing, where a key (an account) that spends its limit should not get
// another try as soon as the limit would let it.
//
// An offence is a refusal by the policy itself (Store.Allow or AllowAll
// refusing the request, a refused check of cost 0 included) while the key
// is not blocked, for a request that could fit the policy's capacity. It
// starts a block of BlockFor·Factor^(n−1), at most MaxBlock, where n is
// the key's count of offences remembered, this one included. During a
// block every request on the key is refused whatever the policy's state,
// and nothing is charged; such refusals are not offences. Offences are
// forgotten when ForgetAfter has passed since the end of the last block
// without a new offence: the next offence counts as the first again.
//
// A refusal during a block says when the request would pass: RetryAfter
// is the later of the block's end and the policy's own retry (so that a
// client that waits as told is never refused again), Remaining is 0 and
// ResetAfter is the later of the block's end and the policy's own reset.
// Peek reports a block and never starts one; Debit and Refund charge and
// give back whatever the block; Reset forgets the block and the offences
// with the rest of the key's state. docs/algorithms.md has the timeline.
//
// The zero Penalty is none. A concurrency policy takes no penalty.
type Penalty struct {
	// BlockFor is the first block's length: positive, whole microseconds,
	// at most MaxPeriod.
	BlockFor time.Duration
	// Factor multiplies the block for each further offence remembered: 0
	// or 1 means every block is BlockFor; at most MaxFactor. A Factor
	// above 1 needs ForgetAfter.
	Factor int64
	// MaxBlock caps a block: 0 means MaxPeriod; otherwise at least
	// BlockFor, whole microseconds, at most MaxPeriod.
	MaxBlock time.Duration
	// ForgetAfter is how long after a block ends, without a new offence,
	// the key's offences are forgotten: 0 means as soon as the block ends
	// (every offence is a first); whole microseconds, at most MaxPeriod.
	ForgetAfter time.Duration
}

// IsZero reports whether p is no penalty.
func (p Penalty) IsZero() bool { return p == Penalty{} }

// Block returns the length of the block that the key's n-th remembered
// offence starts (n ≥ 1): BlockFor·Factor^(n−1), at most MaxBlock. p must
// be valid.
func (p Penalty) Block(n int64) time.Duration {
	return time.Duration(penaltyParams(p).Block(n)) * time.Microsecond
}

// String returns p in a readable form, such as
// "block 1m0s ×2 up to 24h0m0s, forgotten after 24h0m0s".
func (p Penalty) String() string {
	s := fmt.Sprintf("block %v", p.BlockFor)
	if p.Factor > 1 {
		s += fmt.Sprintf(" ×%d", p.Factor)
	}
	if p.MaxBlock != 0 {
		s += fmt.Sprintf(" up to %v", p.MaxBlock)
	}
	if p.ForgetAfter != 0 {
		s += fmt.Sprintf(", forgotten after %v", p.ForgetAfter)
	}
	return s
}

// problem returns what is wrong with p, or "".
func (p Penalty) problem() string {
	micros := func(d time.Duration) bool { return d%time.Microsecond == 0 }
	switch {
	case p.BlockFor <= 0:
		return fmt.Sprintf("penalty: block_for must be positive, got %v", p.BlockFor)
	case !micros(p.BlockFor) || !micros(p.MaxBlock) || !micros(p.ForgetAfter):
		return "penalty: block_for, max_block and forget_after must be whole numbers of microseconds"
	case p.BlockFor > MaxPeriod:
		return fmt.Sprintf("penalty: block_for must be at most %v (10 years), got %v", MaxPeriod, p.BlockFor)
	case p.Factor < 0 || p.Factor > MaxFactor:
		return fmt.Sprintf("penalty: factor must be from 1 to %d (0 means 1), got %d", MaxFactor, p.Factor)
	case p.MaxBlock != 0 && (p.MaxBlock < p.BlockFor || p.MaxBlock > MaxPeriod):
		return fmt.Sprintf("penalty: max_block must be from block_for (%v) to %v (10 years), got %v", p.BlockFor, MaxPeriod, p.MaxBlock)
	case p.ForgetAfter < 0 || p.ForgetAfter > MaxPeriod:
		return fmt.Sprintf("penalty: forget_after must be from 0 to %v (10 years), got %v", MaxPeriod, p.ForgetAfter)
	case p.Factor > 1 && p.ForgetAfter == 0:
		return fmt.Sprintf("penalty: factor %d needs forget_after: without it every offence is forgotten when its block ends, and no block grows", p.Factor)
	}
	return ""
}

// penaltyParams returns p in the algorithms' units, its defaults filled in
// (internal/engine.PenaltyParams does the same for the stores).
func penaltyParams(p Penalty) algo.Penalty {
	if p.MaxBlock == 0 {
		p.MaxBlock = MaxPeriod
	}
	return algo.Penalty{
		BlockFor:    int64(p.BlockFor / time.Microsecond),
		Factor:      max(p.Factor, 1),
		MaxBlock:    int64(p.MaxBlock / time.Microsecond),
		ForgetAfter: int64(p.ForgetAfter / time.Microsecond),
	}
}
