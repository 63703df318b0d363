package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// restartLimit is the limit of the restart test's one key, per day: no
// token comes back within the test, so what is admitted can be summed.
const restartLimit = 1000

// TestServeRestart restarts `sluice serve` (SIGTERM, then a new process on
// the same port) while callers spend one key's limit. With the Redis
// store, no limit is reset: the requests admitted before and after the
// restart add up to exactly the limit. With the memory store the state
// is lost: the new process admits the whole limit again.
func TestServeRestart(t *testing.T) {
	sc := testScale()
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) { serveRestart(t, sc, backend) })
	}
}

func serveRestart(t *testing.T, sc scale, backend string) {
	store := "store: {backend: memory}"
	if backend == "redis" {
		srv := testkit.StartRedis(t)
		store = fmt.Sprintf("store:\n  backend: redis\n  redis: {addrs: [%q]}\n  timeout: 2s\n  on_error: error", srv.Addr)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), fmt.Sprintf(`listen: {http: %q}
%s
limits:
  slow: {algorithm: token_bucket, limit: %d, period: 24h}
`, addr, store, restartLimit))
	old := startService(t, "sluice (before)", "--config", cfg)
	client := newClient(t, sc.callers)
	// Which process answered a call: the one its connection was made to,
	// known by when the connection was made, before or after the first
	// process had exited. (A connection one request dialled may serve
	// another first, so the dialler records it.)
	var mu sync.Mutex
	born := map[string]time.Time{} // connection (local address) -> when made
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			born[c.LocalAddr().String()] = time.Now()
			mu.Unlock()
		}
		return c, err
	}

	var admittedBorn []time.Time // of each admitted call's connection
	var admitted, deniedAfter, unreached atomic.Int64
	var restarted atomic.Bool
	decide := func(ctx context.Context, _ int) (outcome, bool, error) {
		var conn time.Time
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			conn = born[info.Conn.LocalAddr().String()]
		}})
		out, degraded, err := checkService(ctx, client, addr, "slow", "k")
		if err != nil {
			// No answer: the process was stopping or not yet listening.
			// A request without an answer was not admitted: a stopping
			// process finishes the requests it has read.
			unreached.Add(1)
			return failed, false, nil
		}
		switch {
		case out == failed || degraded:
			return 0, false, fmt.Errorf("a call got outcome %d, degraded %v: want a decision", out, degraded)
		case out == allowed:
			admitted.Add(1)
			mu.Lock()
			admittedBorn = append(admittedBorn, conn)
			mu.Unlock()
		case restarted.Load():
			deniedAfter.Add(1)
		}
		return out, false, nil
	}
	stop := make(chan struct{})
	l := load{callers: sc.callers, keys: 1, pace: sc.servicePace, dur: time.Minute, stop: stop}
	done := make(chan *result, 1)
	go func() { done <- l.run(t.Context(), decide, nil) }()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()

	testkit.WaitFor(t, 20*time.Second, "half the limit admitted", func() bool { return admitted.Load() >= restartLimit/2 })
	t0 := time.Now()
	if err := old.stop(); err != nil {
		t.Fatalf("stopping the first process: %v", err)
	}
	exited := time.Now()
	startService(t, "sluice (after)", "--config", cfg)
	restarted.Store(true)
	gap := time.Since(t0)
	testkit.WaitFor(t, 20*time.Second, "denials after the restart", func() bool { return deniedAfter.Load() >= 20 })
	close(stop)
	r := <-done
	r.checkUnexpected(t)
	var before, after int
	for _, b := range admittedBorn {
		if b.Before(exited) {
			before++
		} else {
			after++
		}
	}
	t.Logf("%s store: %d calls, %d without an answer during the %v restart; admitted %d by the first process and %d by the second (limit %d)",
		backend, len(r.calls), unreached.Load(), gap.Round(time.Millisecond), before, after, restartLimit)
	if before == 0 || after == 0 {
		t.Errorf("admitted %d before and %d after the restart; want some on each side", before, after)
	}
	switch backend {
	case "redis":
		if before+after != restartLimit {
			t.Errorf("with Redis, %d + %d = %d requests admitted across a restart, want exactly the limit %d", before, after, before+after, restartLimit)
		}
	case "memory":
		// The new process starts from a full bucket.
		if after != restartLimit {
			t.Errorf("with the memory store, %d admitted after the restart, want the whole limit %d again (the state is lost)", after, restartLimit)
		}
	}
}
