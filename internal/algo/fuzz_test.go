package algo

import (
	"testing"
	"time"
)

// Symbolic costs in a decoded fuzz trace, resolved per algorithm.
const (
	costCapacity     = -1 // exactly the capacity
	costOverCapacity = -2 // one more than the capacity: never admissible
)

// decodeOps turns fuzz bytes into at most 64 events, three bytes each: a
// cost selector, and a gap of b1·2^(b2 mod 42) µs (up to about 17 years),
// with b2 ≥ 224 marking a peek. Costs are mostly 1..5, sometimes 0, the
// capacity or one more.
func decodeOps(start int64, ops []byte) []event {
	var out []event
	t := start
	for i := 0; i+2 < len(ops) && len(out) < 64; i += 3 {
		b0, b1, b2 := ops[i], ops[i+1], ops[i+2]
		t += int64(b1) << (b2 % 42)
		var cost int64
		switch {
		case b0 < 16:
			cost = 0
		case b0 < 40:
			cost = costCapacity
		case b0 < 56:
			cost = costOverCapacity
		default:
			cost = 1 + int64(b0%5)
		}
		out = append(out, event{t: t, cost: cost, peek: b2 >= 224})
	}
	return out
}

// FuzzAlgorithms feeds arbitrary parameters, start times, costs and gaps to
// the six algorithms and compares every decision with the reference model.
// Parameters that Params.Check refuses are skipped (Check itself must not
// panic on them); the start time is folded into [0, 2^61) µs, the range
// (1970 to about 73,000 AD) in which the functions promise exact results.
func FuzzAlgorithms(f *testing.F) {
	f.Add(int64(100), int64(100), uMin, origin2026, int64(0), []byte{60, 0, 0, 60, 0, 0, 60, 255, 12, 16, 1, 0})
	f.Add(int64(7), int64(7), uSec, origin2026, int64(0), []byte{24, 0, 0, 60, 143, 10, 60, 1, 0, 61, 17, 14})
	f.Add(int64(3), int64(3), 10*uSec, origin2026+1, int64(100_000), []byte{24, 0, 0, 62, 203, 14, 40, 3, 20, 63, 9, 230})
	f.Add(int64(MaxLimit), int64(MaxLimit), uYear, origin2026, int64(0), []byte{24, 0, 0, 60, 1, 0, 60, 123, 8, 24, 255, 41})
	f.Add(int64(1), int64(1000), uYear, origin2026, int64(1), []byte{24, 0, 0, 60, 0, 0, 64, 29, 40, 10, 255, 41})
	f.Add(int64(13), int64(20), 7*uSec+3, int64(1)<<60, int64(3_000_000), []byte{65, 7, 20, 66, 0, 0, 67, 99, 13, 68, 1, 231, 1, 1, 1})
	f.Add(int64(999_999_937), int64(3), int64(MaxPeriodMicros), int64(0), int64(0), []byte{60, 0, 0, 61, 255, 41, 62, 255, 41, 30, 0, 0})
	f.Fuzz(func(t *testing.T, limit, burst, period, start, maxDelayUS int64, ops []byte) {
		p := Params{Limit: limit, Burst: burst, Period: period}
		if p.Check() != nil {
			return
		}
		start = int64(uint64(start) % (1 << 61))
		trace := decodeOps(start, ops)
		for _, a := range algorithms {
			ap := a.params(p)
			capacity := a.capacity(ap)
			resolved := make([]event, len(trace))
			for i, e := range trace {
				switch e.cost {
				case costCapacity:
					e.cost = capacity
				case costOverCapacity:
					e.cost = capacity + 1
				}
				resolved[i] = e
			}
			var maxDelay time.Duration
			if a == leakyBucket && maxDelayUS > 0 {
				maxDelay = time.Duration(maxDelayUS%(1<<50)) * time.Microsecond
			}
			differential(t, a, p, maxDelay, resolved)
		}
	})
}
