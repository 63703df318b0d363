package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestClusterFailover kills the master that holds a key in a cluster of 3
// masters with one replica each: decisions are degraded while the cluster
// fails over, and come from the promoted replica afterwards, without a new
// store.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes a few seconds")
	}
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1})
	st := newTestStore(t, c.Addrs[:1], Options{Failure: FailDeny, Timeout: failTimeout, BreakerCooldown: failCooldown})
	req := sluice.Request{Policy: sluice.FixedWindow(1000, time.Hour), Key: "k", Cost: 1}
	if d, err := st.Allow(t.Context(), time.Time{}, req); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("Allow before the failover = %+v, %v", d, err)
	}
	master, err := c.NodeForSlot(int(slot(st.policies.get(&req.Policy).key(st.prefix, req.Key))))
	if err != nil {
		t.Fatal(err)
	}
	master.Kill()
	killed := time.Now()
	var degraded int
	for {
		start := time.Now()
		d, err := st.Allow(t.Context(), time.Time{}, req)
		if took := time.Since(start); took > failTimeout+failMargin {
			t.Errorf("a call took %v during the failover, want at most %v", took, failTimeout+failMargin)
		}
		if err != nil {
			t.Fatalf("Allow during the failover: %v", err)
		}
		if !d.Degraded {
			if !d.Allowed {
				t.Errorf("first decision after the failover = %+v, want allowed", d)
			}
			break
		}
		degraded++
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("no decision from Redis 20s after the master died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the promoted replica decided %v after the master died (%d degraded decisions meanwhile)", time.Since(killed), degraded)
}
