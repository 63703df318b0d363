package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/redisstore"
)

// clusterComeback is how soon after the cluster reports the promotion the
// dead master's keys must be decided by Redis again: the client learns
// the new topology from the errors of its calls, a little after the nodes
// agree on it.
const clusterComeback = 2 * time.Second

// TestCluster runs a Redis Cluster of 3 masters with one replica each
// (cluster-node-timeout 1 s) and, on the same cluster, checks hostile keys,
// a master's death under load, and then the service's readiness across
// another master's death.
func TestCluster(t *testing.T) {
	c := testkit.StartRedisCluster(t, testkit.RedisClusterOptions{Replicas: 1, NodeTimeout: time.Second})
	t.Run("hostile keys", func(t *testing.T) { clusterHostileKeys(t, c) })
	t.Run("failover under load", func(t *testing.T) { clusterFailover(t, c, testScale()) })
	t.Run("readiness across a failover", func(t *testing.T) { clusterReadiness(t, c) })
}

// hostileKeys are keys that try to leave their place in a Redis key or
// collide with another: hash-tag braces, the key layout's own separators
// and escapes, control bytes, invalid UTF-8, a key that looks like the
// hashed form of another, and keys of a megabyte.
func hostileKeys() []string {
	mb := strings.Repeat("k", 1<<20)
	sum := sha256.Sum256([]byte(mb))
	return []string{
		"{", "}", "{}", "{a}", "a", "a}b{", "{k:a}", "k:a", "}:tb:1:24h0m0s:0", "a:b", "a%3Ab", "a%3ab", "%",
		"#", "#" + hex.EncodeToString(sum[:16]), "a\nb", "a\r\nb", "\x00", "a\x00b", "a\x00c", "\xff", "\xfe", "é",
		" ", "*", "?", "[a]", mb, mb + "y", "y" + mb,
	}
}

// clusterHostileKeys decides every hostile key with a Limiter of two
// policies (so AllowAll in one script, on one slot) on the cluster: each
// key's first request is admitted and its second denied, whatever the
// other keys did, and the cluster holds exactly one Redis key per (policy,
// key).
func clusterHostileKeys(t *testing.T, c *testkit.RedisCluster) {
	st := teststore.RedisOn(t, redisstore.Options{Addrs: c.Addrs, Prefix: "hostile:", Failure: redisstore.FailError, Timeout: 10 * time.Second})
	lim, err := sluice.New(st, sluice.TokenBucket(1, 24*time.Hour, 0), sluice.SlidingWindow(10, 24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys := hostileKeys()
	for round, want := range []bool{true, false} {
		for _, k := range keys {
			d, err := lim.Allow(t.Context(), k, 1)
			if err != nil || d.Allowed != want || d.Degraded {
				t.Errorf("round %d: Allow(%q) = %+v, %v; want allowed %v, by Redis", round, short(k), d, err, want)
			}
		}
	}
	var total int64
	for _, m := range c.Masters() {
		n, err := m.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		total += n.(int64)
	}
	if want := int64(2 * len(keys)); total != want {
		t.Errorf("the cluster's masters hold %d keys for %d keys under 2 policies, want %d", total, len(keys), want)
	}
}

func short(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%s…(%d bytes)", s[:24], len(s))
	}
	return s
}

// clusterFailover kills the master that serves the first key's slot while
// callers decide on keys spread over all three masters. With on_error
// deny: no call takes longer than the timeout plus 20 ms; the keys of the
// dead master are decided by the failure policy until the cluster has
// promoted its replica, then by Redis again within clusterComeback, from
// the same store; no key ever admits more than its limit except by the writes the
// dead master had not yet replicated, which are counted and reported.
func clusterFailover(t *testing.T, c *testkit.RedisCluster, sc scale) {
	st := teststore.RedisOn(t, redisstore.Options{Addrs: c.Addrs, Prefix: "failover:", Failure: redisstore.FailDeny, Timeout: dieTimeout})
	lim := warmLimiter(t, st, sluice.TokenBucket(dieLimit, 24*time.Hour, 0))

	// Which master serves each key: the hash tag is "k:" and the key.
	keys := make([]string, dieKeys)
	onVictim := make([]bool, dieKeys)
	var victim *testkit.RedisServer
	for i := range keys {
		keys[i] = dieKey(i)
		reply, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", "k:"+keys[i])
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.NodeForSlot(int(reply.(int64)))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			victim = m
		}
		onVictim[i] = m == victim
	}

	decide := func(ctx context.Context, key int) (outcome, bool, error) {
		d, err := lim.Allow(ctx, keys[key], 1)
		switch {
		case err != nil:
			return 0, false, err
		case d.Degraded && d.Allowed:
			return 0, false, fmt.Errorf("a degraded decision admitted under on_error deny: %+v", d)
		case d.Allowed:
			return allowed, false, nil
		}
		return denied, d.Degraded, nil
	}
	var killed, promoted time.Duration
	stop := make(chan struct{})
	failover := func(r *result) {
		defer close(stop)
		time.Sleep(sc.kill - time.Since(r.t0)) // the scenario's timeline: the kill
		victim.Kill()
		killed = time.Since(r.t0)
		if err := c.WaitOK(30 * time.Second); err != nil {
			t.Errorf("the cluster did not fail over: %v", err)
			return
		}
		promoted = time.Since(r.t0)
		// Run on past the comeback, or to the run's total time.
		time.Sleep(max(promoted+clusterComeback+time.Second, sc.total) - time.Since(r.t0)) // the timeline's end
	}
	l := load{callers: sc.callers, keys: dieKeys, pace: sc.pace, dur: time.Minute, stop: stop}
	r := l.run(t.Context(), decide, failover)
	r.checkUnexpected(t)
	ev := []event{{killed, "master killed"}, {promoted, "cluster ok again"}}
	t.Logf("%d calls from %d callers, CPU pressure %.0f%%; per %v:\n%s", len(r.calls), sc.callers, 100*r.pressure, sc.bucket, r.table(sc.bucket, ev))
	t.Logf("the cluster reported the promoted replica %v after the master died", promoted-killed)
	r.checkBound(t, "from the kill on", killed, r.calls[len(r.calls)-1].start+1, dieTimeout+slack, 0)

	admitted := make([]int, dieKeys)
	var byGroup [2]struct{ n, degraded, inWindow, degradedInWindow int } // other masters, dead master
	backAfter := time.Duration(-1)
	var lateDegraded, late int
	for _, cl := range r.calls {
		if cl.out == allowed {
			admitted[cl.key]++
		}
		if cl.start < killed {
			continue
		}
		g := &byGroup[0]
		if onVictim[cl.key] {
			g = &byGroup[1]
		}
		g.n++
		if cl.degraded {
			g.degraded++
		}
		if cl.start < promoted {
			g.inWindow++
			if cl.degraded {
				g.degradedInWindow++
			}
		}
		if onVictim[cl.key] && !cl.degraded && backAfter < 0 {
			backAfter = cl.end - killed
		}
		if cl.start >= promoted+clusterComeback && !r.noisy(cl, redisstore.DefaultBreakerCooldown) {
			late++
			if cl.degraded {
				lateDegraded++
			}
		}
	}
	for i, name := range []string{"keys of the surviving masters", "keys of the dead master"} {
		g := byGroup[i]
		t.Logf("%s: from the kill to the promotion %d calls, %d degraded; from the kill to the end %d calls, %d degraded",
			name, g.inWindow, g.degradedInWindow, g.n, g.degraded)
	}
	switch {
	case backAfter < 0:
		t.Errorf("no key of the dead master was decided by Redis again")
	case backAfter > promoted-killed+clusterComeback:
		t.Errorf("the dead master's keys were decided by Redis again %v after the kill, more than %v after the cluster was ok (%v)", backAfter, clusterComeback, promoted-killed)
	default:
		t.Logf("the dead master's keys were decided by Redis again %v after the kill", backAfter)
	}
	if lateDegraded*100 > late && !r.overloaded(t) {
		t.Errorf("from %v after the promotion on, %d of %d calls were degraded, want at most 1%%", clusterComeback, lateDegraded, late)
	}
	var lost int
	for k, n := range admitted {
		switch {
		case n > dieLimit && onVictim[k]:
			lost += n - dieLimit
		case n > dieLimit:
			t.Errorf("key %d, on a master that did not fail, admitted %d requests, want at most %d", k, n, dieLimit)
		}
	}
	t.Logf("requests admitted again because the dead master had not replicated them: %d", lost)
}
