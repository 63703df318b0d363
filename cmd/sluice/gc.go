package main

import "runtime/debug"

// serveGCPercent is sluice serve's garbage collector target (GOGC): the
// heap may grow to three times its live data between collections, where
// Go's default (100) allows twice. The live heap of the service is small
// beside the garbage its requests make (the memory store at --max-keys is
// about 60 MB), and each collection costs CPU on every request in flight:
// 200 cut the server's CPU per decision by about a fifth over gRPC in the
// service benchmark (docs/BENCHMARKS.md, "Service"). docs/operations.md,
// "CPU and memory", says how to change it.
const serveGCPercent = 200

// setServeGC applies serveGCPercent unless the environment sets GOGC,
// which then wins as it does for any Go program. It returns the GOGC in
// effect and whether it came from the environment.
func setServeGC(getenv func(string) string) (percent int, fromEnv bool) {
	if getenv("GOGC") != "" {
		percent = debug.SetGCPercent(-1)
		debug.SetGCPercent(percent)
		return percent, true
	}
	debug.SetGCPercent(serveGCPercent)
	return serveGCPercent, false
}
