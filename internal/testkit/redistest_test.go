package testkit

import (
	"testing"
	"time"
)

func TestServerKillRestart(t *testing.T) {
	s := StartRedis(t)
	if s.Port == 6379 {
		t.Fatalf("StartRedis used port 6379")
	}
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatalf("PING after Kill succeeded, want an error")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	got, err := s.Do("GET", "k")
	if err != nil || got != nil {
		t.Errorf("GET k after a restart = %v, %v; want nil (no persistence)", got, err)
	}
	info, err := s.Info("server")
	if err != nil || info["tcp_port"] == "" {
		t.Errorf("Info(server) = %v, %v; want tcp_port", info, err)
	}
}

func TestCluster(t *testing.T) {
	start := time.Now()
	c := StartRedisCluster(t, RedisClusterOptions{})
	t.Logf("3-master cluster ready in %v", time.Since(start))
	if len(c.Nodes) != 3 || len(c.Masters()) != 3 {
		t.Fatalf("StartRedisCluster gave %d nodes, %d masters; want 3, 3", len(c.Nodes), len(c.Masters()))
	}
	for _, slot := range []int{0, 8000, 16383} {
		if _, err := c.NodeForSlot(slot); err != nil {
			t.Errorf("NodeForSlot(%d): %v", slot, err)
		}
	}
}

func TestProxy(t *testing.T) {
	s := StartRedis(t)
	p := StartRedisProxy(t, s.Addr)
	if got, err := RedisDo(p.Addr, "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING through the proxy = %v, %v", got, err)
	}
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if got, err := RedisDo(p.Addr, "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING through the slow proxy = %v, %v", got, err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("PING with a 100ms delay took %v", took)
	}
	p.SetDelay(0)
	p.DropMidReply()
	if got, err := RedisDo(p.Addr, "PING"); err == nil {
		t.Errorf("PING with the reply cut = %v, want an error", got)
	}
	if got, err := RedisDo(p.Addr, "PING"); err != nil || got != "PONG" {
		t.Errorf("PING after the cut reply = %v, %v", got, err)
	}
}
