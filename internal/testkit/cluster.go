package testkit

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisClusterOptions configure StartRedisCluster. The zero value is 3 masters
// without replicas.
type RedisClusterOptions struct {
	// Masters is the number of masters; default 3 (the fewest that
	// redis-cli --cluster create accepts).
	Masters int
	// Replicas is the number of replicas per master; default 0.
	Replicas int
	// NodeTimeout is cluster-node-timeout, after which a master that does
	// not answer is failed over to its replica; default 1s.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node.
	Args []string
}

// RedisCluster is a Redis Cluster of private redis-server processes.
type RedisCluster struct {
	// Nodes are the cluster's servers: the first Masters of them started as
	// masters, the rest as their replicas.
	Nodes []*RedisServer
	// Addrs are the nodes' addresses, for a client's seed list.
	Addrs []string
}

// clusterTimeout bounds how long the cluster may take to form.
const clusterTimeout = 30 * time.Second

// StartRedisCluster starts a Redis Cluster on free loopback ports, waits until
// every node reports cluster_state:ok with all 16384 slots assigned, and
// stops every node when t ends.
func StartRedisCluster(t testing.TB, opts RedisClusterOptions) *RedisCluster {
	t.Helper()
	RequirePrograms(t, "redis-server", "redis-cli")
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	n := opts.Masters * (1 + opts.Replicas)
	c := &RedisCluster{}
	args := append([]string{"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10)}, opts.Args...)
	for i := range n {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("node%d", i))
		s, err := startServerIn(dir, args)
		if err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		t.Cleanup(s.Kill)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	create := append([]string{"--cluster", "create"}, c.Addrs...)
	create = append(create, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	cmd := exec.Command("redis-cli", create...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitOK(clusterTimeout); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

func startServerIn(dir string, args []string) (*RedisServer, error) {
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	return startServer(dir, true, args)
}

// WaitOK waits until every running node reports cluster_state:ok with all
// slots assigned and ok, and every replica's link to its master is up.
func (c *RedisCluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		why := c.notOK()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notOK returns why the cluster is not ready, or "".
func (c *RedisCluster) notOK() string {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		reply, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Sprintf("%s: %v", s.Addr, err)
		}
		info := parseInfo(fmt.Sprint(reply))
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" {
			return fmt.Sprintf("%s: cluster_state %s, %s slots ok", s.Addr, info["cluster_state"], info["cluster_slots_ok"])
		}
		repl, err := s.Info("replication")
		if err != nil {
			return fmt.Sprintf("%s: %v", s.Addr, err)
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Sprintf("%s: replica link %s", s.Addr, repl["master_link_status"])
		}
	}
	return ""
}

// Masters returns the nodes that are currently masters, as the running
// nodes report their own role.
func (c *RedisCluster) Masters() []*RedisServer {
	var out []*RedisServer
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		if repl, err := s.Info("replication"); err == nil && repl["role"] == "master" {
			out = append(out, s)
		}
	}
	return out
}

// NodeForSlot returns the running node that serves slot as master.
func (c *RedisCluster) NodeForSlot(slot int) (*RedisServer, error) {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		reply, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(fmt.Sprint(reply), "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && a <= slot && slot <= b {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no running master serves slot %d", slot)
}
