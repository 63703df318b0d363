package engine_test

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
)

// TestSummedCosts: n requests on 3 keys, request i on key i%3 with cost
// i%3+1, sum to each one's cost plus the costs of the earlier requests on
// its key, with keys of both kinds the stores use; up to SmallRepeat
// requests each pair of keys is compared at most once, and above it none,
// so that the work grows linearly with the requests (comparing every pair
// took 200 million comparisons for 20,000 requests).
func TestSummedCosts(t *testing.T) {
	for _, n := range []int{1, 2, engine.SmallRepeat, engine.SmallRepeat + 1, 20_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			const nkeys = 3
			hashes := make([]uint64, n)
			names := make([]string, n)
			reqs := make([]sluice.Request, n)
			for i := range n {
				hashes[i] = uint64(i%nkeys+1) * 0x9e3779b97f4a7c15
				names[i] = "k" + strconv.Itoa(i%nkeys)
				reqs[i].Cost = int64(i%nkeys + 1)
			}
			check := func(kind string, sums []int64, compared int) {
				t.Helper()
				if len(sums) != n {
					t.Fatalf("%s keys: %d sums, want %d", kind, len(sums), n)
				}
				for i, got := range sums {
					// Request i is the (i/nkeys+1)th on its key, each of
					// cost i%nkeys+1.
					if want := int64(i/nkeys+1) * int64(i%nkeys+1); got != want {
						t.Fatalf("%s keys: sums[%d] = %d, want %d", kind, i, got, want)
					}
				}
				small := min(n, engine.SmallRepeat)
				if maxPairs := small * (small - 1) / 2; compared > maxPairs || n > engine.SmallRepeat && compared != 0 {
					t.Errorf("%s keys: compared %d pairs for %d requests, want at most %d (none above %d requests)", kind, compared, n, maxPairs, engine.SmallRepeat)
				}
			}
			sums, compared := engine.SummedCosts(hashes, reqs, nil)
			check("hash", sums, compared)
			sums, compared = engine.SummedCosts(names, reqs, make([]int64, 0, 1))
			check("string", sums, compared)
		})
	}
}
