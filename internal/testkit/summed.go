// This file checks the running sums of costs that the stores compute for
// an AllowAll whose requests repeat keys (memstore and redisstore each
// have a summedCosts).

package testkit

import (
	"strconv"
	"testing"
)

// CheckSummedCosts checks sum, a store's running sums of costs per key.
// For each n of 1, 2, small, small+1 and 20,000 it calls sum with n
// requests on 3 keys, request i on key i%3 with cost i%3+1; sum returns
// each request's cost plus the costs of the earlier requests on its key,
// and how many pairs of keys it compared. Up to small requests sum may
// compare each pair once; above small it must compare none, so that its
// work grows linearly with the requests. Each n is a subtest.
func CheckSummedCosts(t *testing.T, small int, sum func(keys []int, costs []int64) (sums []int64, compared int)) {
	t.Helper()
	for _, n := range []int{1, 2, small, small + 1, 20_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			const nkeys = 3
			keys := make([]int, n)
			costs := make([]int64, n)
			for i := range n {
				keys[i] = i % nkeys
				costs[i] = int64(i%nkeys + 1)
			}
			sums, compared := sum(keys, costs)
			if len(sums) != n {
				t.Fatalf("summedCosts returned %d sums, want %d", len(sums), n)
			}
			for i, got := range sums {
				// Request i is the (i/nkeys+1)th on its key, each of cost
				// i%nkeys+1.
				if want := int64(i/nkeys+1) * int64(i%nkeys+1); got != want {
					t.Fatalf("sums[%d] = %d, want %d", i, got, want)
				}
			}
			if maxPairs := min(n, small) * (min(n, small) - 1) / 2; compared > maxPairs || n > small && compared != 0 {
				t.Errorf("summedCosts compared %d pairs of keys for %d requests, want at most %d (none above %d requests)", compared, n, maxPairs, small)
			}
		})
	}
}
