package redisstore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestClusterFailover kills the master that holds a key in a cluster of 3
// masters with one replica each: decisions are degraded while the cluster
// fails over, and come from the promoted replica afterwards, without a new
// store. Check names the dead master, and only it, until the promotion,
// and then, soon after, reports every master up, 100 times in a row,
// although the dead node is still one of the store's addresses.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes a few seconds")
	}
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{Replicas: 1})
	st := newTestStore(t, c.Addrs[:1], Options{Failure: FailDeny, Timeout: failTimeout, BreakerCooldown: failCooldown})
	warm(t, st, c.Addrs...)
	lag := lagProbe(t)
	req := sluice.Request{Policy: new(sluice.FixedWindow(1000, time.Hour)), Key: "k", Cost: 1}
	if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("Allow before the failover = %+v, %v", d, err)
	}
	master, err := c.NodeForSlot(int(slot(st.policies.get(req.Policy).key(st.prefix, req.Key))))
	if err != nil {
		t.Fatal(err)
	}
	// A store for Check, with every node listed; a generous timeout, so
	// that a loaded machine does not fail a check.
	ready := newTestStore(t, c.Addrs, Options{Timeout: time.Second})
	if h := ready.Check(t.Context()); h.Err != nil || h.Masters != 3 || len(h.Down) != 0 {
		t.Fatalf("Check before the failover = %+v, want 3 masters, none down", h)
	}
	master.Kill()
	killed := time.Now()
	if h := ready.Check(t.Context()); !h.Partial() || !slices.Equal(h.Down, []string{master.Addr}) {
		// The cluster needs about a second (cluster-node-timeout) to
		// notice, and longer to promote the replica.
		t.Errorf("Check after the master died = %+v, want %s down of 3", h, master.Addr)
	}
	var degraded int
	testkit.WaitFor(t, 20*time.Second, "a decision from Redis after the master died", func() bool {
		start := time.Now()
		d, err := st.Allow(t.Context(), time.Time{}, req)
		if took := time.Since(start); took > failTimeout+failMargin+lag() {
			t.Errorf("a call took %v during the failover, want at most %v (+ %v of scheduling lag)", took, failTimeout+failMargin, lag())
		}
		if err != nil {
			t.Fatalf("Allow during the failover: %v", err)
		}
		if d.Degraded {
			degraded++
			return false
		}
		if !d.Allowed {
			t.Errorf("first decision after the failover = %+v, want allowed", d)
		}
		return true
	})
	t.Logf("the promoted replica decided %v after the master died (%d degraded decisions meanwhile)", time.Since(killed), degraded)
	if err := c.WaitOK(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The client routes by its own view of the slots, which it reads
	// again within a second of a failed command.
	promoted := time.Now()
	testkit.WaitFor(t, 5*time.Second, "Check to report every master up after the promotion", func() bool {
		return ready.Check(t.Context()).Err == nil
	})
	t.Logf("Check reported every master up %v after the cluster was ok again", time.Since(promoted))
	for i := range 100 {
		if h := ready.Check(t.Context()); h.Err != nil || h.Masters != 3 || len(h.Down) != 0 {
			t.Fatalf("Check %d after the promotion = %+v, want 3 masters, none down", i+1, h)
		}
	}
}

// TestClusterBreakerPerMaster kills one master of a cluster that keeps
// serving the slots it still covers (cluster-require-full-coverage no):
// the dead master's keys are decided by the failure policy, its own breaker
// opens and spares callers its timeouts, and the other masters' keys are
// still decided by Redis, every one of them.
func TestClusterBreakerPerMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster takes a few seconds to start")
	}
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{Args: []string{"--cluster-require-full-coverage", "no"}})
	var changes []string
	var mu sync.Mutex
	st := newTestStore(t, c.Addrs[:1], Options{Failure: FailDeny, Timeout: failTimeout, BreakerThreshold: 3, BreakerCooldown: time.Minute,
		OnBreakerChange: func(from, to BreakerState) {
			mu.Lock()
			changes = append(changes, from.String()+"->"+to.String())
			mu.Unlock()
		}})
	warm(t, st, c.Addrs...)
	p := sluice.FixedWindow(1_000_000, time.Hour)
	// Keys on each master.
	byMaster := map[string][]string{}
	for i := 0; len(byMaster) < 3 || i < 60; i++ {
		k := fmt.Sprint("user", i)
		m, err := c.NodeForSlot(int(slot(st.policies.get(&p).key(st.prefix, k))))
		if err != nil {
			t.Fatal(err)
		}
		byMaster[m.Addr] = append(byMaster[m.Addr], k)
	}
	call := func(k string) (sluice.Decision, time.Duration) {
		start := time.Now()
		d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: k, Cost: 1})
		if err != nil {
			t.Fatalf("Allow(%s): %v", k, err)
		}
		return d, time.Since(start)
	}
	for _, keys := range byMaster {
		for _, k := range keys {
			if d, _ := call(k); d.Degraded || !d.Allowed {
				t.Fatalf("Allow(%s) before the kill = %+v", k, d)
			}
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the store to read the cluster's slot map", func() bool { return st.breakers.slots.Load() != nil })

	dead := c.Masters()[0]
	dead.Kill()
	var deadCalls, slowDead, healthyDegraded, healthyCalls int
	for round := range 20 {
		for addr, keys := range byMaster {
			for _, k := range keys {
				d, took := call(k)
				if addr == dead.Addr {
					deadCalls++
					if !d.Degraded || d.Allowed {
						t.Errorf("round %d: Allow(%s) on the dead master = %+v, want denied by the failure policy", round, k, d)
					}
					if took > failTimeout/2 {
						slowDead++
					}
					continue
				}
				healthyCalls++
				if d.Degraded || !d.Allowed {
					healthyDegraded++
				}
			}
		}
	}
	if healthyDegraded > 0 {
		t.Errorf("%d of %d calls for keys on the living masters were decided by the failure policy, want none", healthyDegraded, healthyCalls)
	}
	// The breaker of the dead master opens after BreakerThreshold
	// failures (with a few more while the connection's failure is found):
	// the rest are decided at once.
	if slowDead > 10 {
		t.Errorf("%d of %d calls for the dead master's keys took longer than %v; its breaker should spare them", slowDead, deadCalls, failTimeout/2)
	}
	if got := st.BreakerState(); got != BreakerOpen {
		t.Errorf("BreakerState = %v, want open (one master's breaker is)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) == 0 || changes[0] != "closed->open" {
		t.Errorf("OnBreakerChange calls = %v, want closed->open first", changes)
	}
}
