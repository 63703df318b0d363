// Package flood holds Sluice's flood tests of the in-memory store: a flood
// of distinct keys against a key cap (memory stays under the documented
// bound, steady keys keep deciding exactly, idle keys go first), and one
// hot key hit from every core (throughput, tail latency, and every caller
// making progress). The package has no API; its tests are the point.
//
// The short variants run with every `go test ./...`. The long ones run with
// `make flood`, which sets SLUICE_FLOOD_KEYS=10000000; their results are
// recorded in docs/reliability.md, and the promises they back are in
// docs/guarantees.md.
package flood
