package httplimit

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// PerIPMaxKeys is the most client addresses PerIP's store tracks; past it,
// a new address evicts the one closest to a fresh state (memstore's
// MaxKeys).
const PerIPMaxKeys = 1_000_000

// PerIP returns middleware that limits each client address to policy p,
// counted in process: the common case in one line,
//
//	mux.Handle("/", httplimit.PerIP(sluice.SlidingWindow(100, time.Minute))(handler))
//
// or r.Use(httplimit.PerIP(...)) with routers that take
// func(http.Handler) http.Handler. Each call has its own in-memory store
// (memstore, at most PerIPMaxKeys addresses, no goroutine), so wrap once
// and reuse the result for handlers that should share the budget.
//
// The client address is the connection's remote address, IPv6 grouped by
// /64. X-Forwarded-For, X-Real-IP and Forwarded are ignored: anyone can
// send them. Behind a reverse proxy every client would then share the
// proxy's address; use New with Options.ClientIP and the proxy's address
// in TrustedProxies instead. Responses are New's: the RateLimit fields on
// every response, and 429 with Retry-After and a problem+json body on a
// refusal.
//
// PerIP panics if p is invalid (a limit or period below 1, say), as
// regexp.MustCompile does: a policy written in the code is a constant,
// and a wrong one should stop the program where it starts.
func PerIP(p sluice.Policy) func(http.Handler) http.Handler {
	store := memstore.New(memstore.Options{MaxKeys: PerIPMaxKeys})
	m, err := New(store, []Limit{{Policy: p}}, nil)
	if err != nil {
		panic(fmt.Sprintf("httplimit.PerIP: %v", err))
	}
	return m.Handler
}
