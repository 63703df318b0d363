package algo

// Penalty is a validated penalty in the algorithms' units (µs): a refusal
// by the policy itself while the key is not blocked is an offence, which
// blocks the key for BlockFor·Factor^(n−1) µs, at most MaxBlock, n being
// the key's count of offences remembered; offences are forgotten
// ForgetAfter µs after the end of the last block. The zero Penalty is
// none.
type Penalty struct {
	BlockFor    int64 // ≥ 1
	Factor      int64 // ≥ 1
	MaxBlock    int64 // ≥ BlockFor
	ForgetAfter int64 // ≥ 0
}

// MaxOffences is the largest count of offences a Block keeps; further
// offences leave it there (their blocks are MaxBlock long long before).
const MaxOffences = 1 << 30

// Block is the penalty state of one (policy, key). Until is the first
// microsecond at which the key is no longer blocked; Forget the first at
// which its offences are forgotten (Until + ForgetAfter); Offences the
// count of offences remembered. The zero value is initial: not blocked,
// no offence.
type Block struct {
	Until    int64
	Forget   int64
	Offences int64
}

// Blocks reports whether b blocks the key at now.
func (b Block) Blocks(now int64) bool { return now < b.Until }

// Expiry returns the first microsecond at which b is back to initial.
func (b Block) Expiry() int64 { return b.Forget }

// Block returns the length in µs of the block of the n-th remembered
// offence (n ≥ 1): BlockFor·Factor^(n−1), at most MaxBlock. It multiplies
// at most 63 times, and never past MaxBlock, so nothing overflows.
func (p Penalty) Block(n int64) int64 {
	d := p.BlockFor
	for i := int64(1); i < n && d < p.MaxBlock && p.Factor > 1; i++ {
		if d > p.MaxBlock/p.Factor {
			return p.MaxBlock
		}
		d *= p.Factor
	}
	return min(d, p.MaxBlock)
}

// Offend returns the state after an offence at now on a key whose state is
// b and that is not blocked at now: the count of offences goes up by one,
// or starts again at 1 when the earlier ones are forgotten (now ≥
// b.Forget), and the key is blocked from now for that count's block.
func (p Penalty) Offend(b Block, now int64) Block {
	n := int64(1)
	if now < b.Forget {
		n = min(b.Offences+1, MaxOffences)
	}
	until := now + p.Block(n)
	return Block{Until: until, Forget: until + p.ForgetAfter, Offences: n}
}

// Offends reports whether own, a policy's verdict on a request (not the
// verdict of a block), is an offence when the key is not blocked: a
// refusal of a request that could fit the capacity.
func Offends(own Verdict) bool { return !own.Allowed && own.RetryAfter != Never }

// During returns the verdict on a request refused by the block b at now
// (b.Blocks(now)), given own, the policy's own verdict on the request,
// uncharged (when own admits, its ResetAfter must be the state's as it
// is, that of a request of cost 0, since nothing is charged): refused with Remaining 0, RetryAfter the later of the block's
// end and own's retry, ResetAfter the later of the block's end and own's
// reset. A request that exceeds the capacity keeps its verdict (RetryAfter
// Never).
func (b Block) During(now int64, own Verdict) Verdict {
	if own.RetryAfter == Never {
		return own
	}
	left := b.Until - now
	v := Verdict{Blocked: true, RetryAfter: retryMillis(left), ResetAfter: max(own.ResetAfter, ceilMillis(left))}
	if !own.Allowed {
		v.RetryAfter = max(v.RetryAfter, own.RetryAfter)
	}
	return v
}

// Penalize returns the verdict and the new penalty state for a request
// that the policy decided own on a key whose penalty state is b, at now:
// during a block, the block's verdict (own must then be uncharged); an
// offence starts a block; any other verdict is own. offence reports that
// the request was an offence, and the state changed.
func (p Penalty) Penalize(b Block, now int64, own Verdict) (nb Block, v Verdict, offence bool) {
	if b.Blocks(now) {
		return b, b.During(now, own), false
	}
	if !Offends(own) {
		return b, own, false
	}
	nb = p.Offend(b, now)
	v = nb.During(now, own)
	v.Offence = true
	return nb, v, true
}
