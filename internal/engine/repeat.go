package engine

import "github.com/sluicehq/sluice"

// SmallRepeat is the most requests of an AllowAll whose repeated keys
// SummedCosts finds by comparing each with the ones before it: at most 28
// comparisons, and nothing allocated. A store keeps the per-request work
// of up to SmallRepeat requests in arrays of this length, on the stack.
const SmallRepeat = 8

// SummedCosts appends to sums, for each request of reqs, its cost plus
// the costs of the requests before it with the same key (keys[i] is
// request i's key in the store: a hash, a Redis key), and returns sums:
// the Store contract decides a repeated (policy, key) of an AllowAll as
// one request of the summed cost up to it. Up to SmallRepeat requests it
// compares each key with the ones before it; for more it keeps a running
// sum per key in a map, comparing no pair, so that its work grows
// linearly with the requests. compared is the number of pairs of keys it
// compared.
func SummedCosts[K comparable](keys []K, reqs []sluice.Request, sums []int64) (_ []int64, compared int) {
	if len(reqs) <= SmallRepeat {
		for i := range reqs {
			cost := reqs[i].Cost
			for j := range i {
				if keys[j] == keys[i] {
					cost += reqs[j].Cost
				}
			}
			sums = append(sums, cost)
			compared += i
		}
		return sums, compared
	}
	running := make(map[K]int64, len(reqs))
	for i := range reqs {
		sum := running[keys[i]] + reqs[i].Cost
		running[keys[i]] = sum
		sums = append(sums, sum)
	}
	return sums, 0
}
