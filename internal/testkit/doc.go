// Package testkit holds the helpers that Sluice's tests and benchmarks
// share and that need nothing of the module: private redis-server
// processes (single, TLS, Cluster, Sentinel) and a TCP proxy that delays
// or cuts their replies; the sluice binary run as a process, and the
// files it reads; certificate authorities and certificates; a Prometheus
// series' value; Envoy's rate limit descriptors; the fenced code blocks of
// the docs; the order of a JSON object's members; a check of the stores'
// running sums of costs per key; and the benchmarks'
// ResponseWriter, request loops, key picker, closed loop of callers and
// CPU time per operation. The store fixtures, which import the stores,
// are in internal/teststore. Only tests and benchmarks import it.
package testkit
