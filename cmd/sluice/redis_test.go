package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// redisConfig uses a Redis at addr. Its timeout is long, so that a slow
// machine's first call (a new connection, a script load) is not degraded:
// the tests stop Redis, which fails calls at once.
func redisConfig(addr, onError string) string {
	return fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q], prefix: "cmdtest:"}
  timeout: 2s
  on_error: %s
limits:
  tiny: {algorithm: sliding_log, limit: 2, period: 1h}
`, addr, onError)
}

// TestServeRedis runs the service on a private Redis, stops Redis (the
// local failure policy decides, and says so), and starts it again (Redis
// decides again, and the log says Redis answers again).
func TestServeRedis(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), redisConfig(srv.Addr, "local"))
	in := startServe(t, "--config", path)
	if !strings.Contains(in.stderr.String(), "msg=\"redis answers\"") {
		t.Errorf("the log does not say Redis answers:\n%s", in.stderr)
	}
	for i, want := range []string{`{"allowed":true,"limit":2,"remaining":1,`, `{"allowed":true,"limit":2,"remaining":0,`, `{"allowed":false,`} {
		if code, body := in.check(t, "tiny", "a"); code != 200 || !strings.HasPrefix(body, want) || strings.Contains(body, "degraded") {
			t.Errorf("check %d over Redis = %d %s, want %s...", i, code, body, want)
		}
	}
	if keys, err := srv.Do("KEYS", "cmdtest:*"); err != nil || len(keys.([]any)) != 1 {
		t.Errorf("Redis holds keys %v (%v) under the prefix, want one", keys, err)
	}
	if got := in.metric(t, `sluice_store_circuit_state{state="closed"}`); got != "1" {
		t.Errorf("circuit closed = %q, want 1", got)
	}

	srv.Kill()
	// Key a's refusal is cached: still refused, as Redis refused it, and
	// not degraded (docs/redis.md, "Refused floods").
	if code, body := in.check(t, "tiny", "a"); code != 200 || !strings.HasPrefix(body, `{"allowed":false,`) || strings.Contains(body, "degraded") {
		t.Errorf("check of a refused key without Redis = %d %s, want refused as cached", code, body)
	}
	// The local store starts empty: a new key is allowed, degraded.
	if code, body := in.check(t, "tiny", "d"); code != 200 || !strings.HasPrefix(body, `{"allowed":true,"limit":2,"remaining":1,`) || !strings.Contains(body, `"degraded":true`) {
		t.Errorf("check without Redis = %d %s, want allowed by the local store, degraded", code, body)
	}
	testkit.WaitFor(t, waitTimeout, "the breaker to open", func() bool {
		in.check(t, "tiny", "b")
		return strings.Contains(in.stderr.String(), "msg=\"redis circuit breaker changed state\" from=closed to=open on_error=local")
	})
	if !strings.Contains(in.stderr.String(), "msg=\"redis call failed\"") {
		t.Errorf("the log does not report the failed Redis call:\n%s", in.stderr)
	}
	if n, err := strconv.Atoi(in.metric(t, "sluice_redis_errors_total")); err != nil || n < 1 {
		t.Errorf("sluice_redis_errors_total = %d (%v), want at least 1", n, err)
	}
	if code, _, body := in.do(t, "GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"status":"degraded"`) {
		t.Errorf("readyz without Redis = %d %s, want 200 degraded", code, body)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Redis kept nothing (no persistence): key c starts afresh, decided by
	// Redis once the breaker closes.
	testkit.WaitFor(t, waitTimeout, "Redis to decide again", func() bool {
		_, body := in.check(t, "tiny", "c")
		return !strings.Contains(body, "degraded")
	})
	if !strings.Contains(in.stderr.String(), "from=half-open to=closed") {
		t.Errorf("the log does not say the breaker closed:\n%s", in.stderr)
	}
	if n := strings.Count(in.stderr.String(), `level=INFO msg="redis answers again" down_for=`); n != 1 {
		t.Errorf("the log says %d times that Redis answers again, want once:\n%s", n, in.stderr)
	}
}

// TestServeRedisBlip stops Redis for one failed call, fewer than open
// the circuit breaker, and starts it again: the log warns of the failed
// call, then says once that Redis answers again, with how long it was
// away and how many calls failed.
func TestServeRedisBlip(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), redisConfig(srv.Addr, "allow"))
	in := startServe(t, "--config", path)
	if code, body := in.check(t, "tiny", "a"); code != 200 || strings.Contains(body, "degraded") {
		t.Fatalf("check over Redis = %d %s", code, body)
	}
	srv.Kill()
	if code, body := in.check(t, "tiny", "a"); code != 200 || !strings.Contains(body, `"degraded":true`) {
		t.Fatalf("check without Redis = %d %s, want degraded", code, body)
	}
	if !strings.Contains(in.stderr.String(), `msg="redis call failed"`) || strings.Contains(in.stderr.String(), "redis circuit breaker") {
		t.Fatalf("after one failed call the log should warn of it, the breaker still closed:\n%s", in.stderr)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "Redis to decide again", func() bool {
		_, body := in.check(t, "tiny", "b")
		return !strings.Contains(body, "degraded")
	})
	in.check(t, "tiny", "c")
	log := in.stderr.String()
	if n := strings.Count(log, `msg="redis answers again"`); n != 1 {
		t.Fatalf("the log says %d times that Redis answers again, want once:\n%s", n, log)
	}
	_, line, _ := strings.Cut(log, `msg="redis answers again"`)
	line, _, _ = strings.Cut(line, "\n")
	attrs := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		attrs[k] = v
	}
	down, err := time.ParseDuration(attrs["down_for"])
	failures, ferr := strconv.Atoi(attrs["failures"])
	if err != nil || ferr != nil || down <= 0 || failures < 1 {
		t.Errorf(`msg="redis answers again"%s: want down_for (positive) and failures (at least 1)`, line)
	}
}

// TestServeRedisUnreachable starts the service with a Redis that does not
// answer: it starts all the same, says so, and with on_error: deny refuses.
func TestServeRedisUnreachable(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	addr := srv.Addr
	srv.Kill()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), redisConfig(addr, "deny"))
	in := startServe(t, "--config", path)
	if !strings.Contains(in.stderr.String(), "msg=\"redis does not answer yet; the failure policy decides until it does\"") {
		t.Errorf("the log does not warn that Redis is unreachable:\n%s", in.stderr)
	}
	if code, body := in.check(t, "tiny", "a"); code != 200 || !strings.HasPrefix(body, `{"allowed":false,`) || !strings.Contains(body, `"degraded":true`) {
		t.Errorf("check = %d %s, want denied and degraded", code, body)
	}
}

// protectedConfig uses a Redis at addr with extra store.redis fields (a
// password or TLS); its limit admits one request an hour.
func protectedConfig(addr, extra string) string {
	return fmt.Sprintf(`listen: {http: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addrs: [%q], prefix: "cmdtest:", %s}
  timeout: 2s
  on_error: deny
limits:
  tiny: {algorithm: fixed_window, limit: 1, period: 1h}
`, addr, extra)
}

// decidedByRedis checks that in decides key "a" in Redis: one admitted,
// then denied, never degraded, and one key under the prefix in srv.
func decidedByRedis(t *testing.T, in *instance, srv *testkit.RedisServer) {
	t.Helper()
	for i, want := range []string{`{"allowed":true,`, `{"allowed":false,`} {
		if code, body := in.check(t, "tiny", "a"); code != 200 || !strings.HasPrefix(body, want) || strings.Contains(body, "degraded") {
			t.Errorf("check %d = %d %s, want %s... from Redis", i, code, body, want)
		}
	}
	if keys, err := srv.Do("KEYS", "cmdtest:*"); err != nil || len(keys.([]any)) != 1 {
		t.Errorf("Redis holds keys %v (%v) under the prefix, want one", keys, err)
	}
}

// TestServeRedisPassword runs the service on a Redis that requires a
// password, read from store.redis.password_file: decisions come from Redis.
// With a wrong password Redis refuses every call, the failure policy
// decides, and the log says why.
func TestServeRedisPassword(t *testing.T) {
	t.Parallel()
	const password = "s3cret-redis-pw"
	srv := testkit.StartRedis(t, testkit.RedisOptions{Password: password})
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "redis.pass"), password+"\n")
	in := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "good.yaml"), protectedConfig(srv.Addr, "password_file: redis.pass")))
	decidedByRedis(t, in, srv)

	bad := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "bad.yaml"), protectedConfig(srv.Addr, `password: "not-the-password"`)))
	if code, body := bad.check(t, "tiny", "b"); code != 200 || !strings.HasPrefix(body, `{"allowed":false,`) || !strings.Contains(body, `"degraded":true`) {
		t.Errorf("check with a wrong password = %d %s, want denied by the failure policy", code, body)
	}
	if log := bad.stderr.String(); !strings.Contains(log, "WRONGPASS") {
		t.Errorf("the log does not say Redis refused the password:\n%s", log)
	}
	if strings.Contains(bad.stderr.String(), "not-the-password") {
		t.Errorf("the log shows the password:\n%s", bad.stderr)
	}
}

// TestServeRedisTLS runs the service on a Redis that accepts only TLS,
// trusting its certificate through store.redis.tls.ca_file: decisions come
// from Redis. Without the CA the certificate is refused and the failure
// policy decides.
func TestServeRedisTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := testkit.StartRedis(t, testkit.RedisOptions{TLS: testkit.NewRedisTLSFiles(t, dir, "redis")})
	in := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "good.yaml"), protectedConfig(srv.Addr, "tls: {ca_file: redis.crt}")))
	decidedByRedis(t, in, srv)

	untrusted := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "system-roots.yaml"), protectedConfig(srv.Addr, "tls: true")))
	if code, body := untrusted.check(t, "tiny", "b"); code != 200 || !strings.Contains(body, `"degraded":true`) {
		t.Errorf("check with a certificate the system does not trust = %d %s, want decided by the failure policy", code, body)
	}
	if log := untrusted.stderr.String(); !strings.Contains(log, "certificate") {
		t.Errorf("the log does not say the certificate was refused:\n%s", log)
	}
}

// TestServeRedisSentinel runs the service through a Redis Sentinel, which
// names the master of the set in store.redis.sentinel.master_set:
// decisions come from that master. A set the sentinel does not monitor
// leaves the service to its failure policy.
func TestServeRedisSentinel(t *testing.T) {
	t.Parallel()
	master := testkit.StartRedis(t)
	sentinel := testkit.StartRedisSentinel(t, master, "sluice-master")
	dir := t.TempDir()
	in := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "good.yaml"), protectedConfig(sentinel.Addr, "sentinel: {master_set: sluice-master}")))
	decidedByRedis(t, in, master)

	unknown := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "unknown.yaml"), protectedConfig(sentinel.Addr, "sentinel: {master_set: no-such-set}")))
	if code, body := unknown.check(t, "tiny", "b"); code != 200 || !strings.Contains(body, `"degraded":true`) {
		t.Errorf("check with a set the sentinel does not know = %d %s, want decided by the failure policy", code, body)
	}
}

// TestServeRedisSentinelFailover fails the master over to its replica
// through the sentinel: the service follows, and decisions come from the
// new master, without a restart.
func TestServeRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	master := testkit.StartRedis(t)
	replica := testkit.StartRedis(t, testkit.RedisOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	role := func(s *testkit.RedisServer) string {
		info, err := s.Info("replication")
		if err != nil {
			return err.Error()
		}
		return info["role"] + "/" + info["master_link_status"]
	}
	testkit.WaitFor(t, waitTimeout, "the replica to follow the master", func() bool { return role(replica) == "slave/up" })
	sentinel := testkit.StartRedisSentinel(t, master, "sluice-master")
	in := startServe(t, "--config", writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), protectedConfig(sentinel.Addr, "sentinel: {master_set: sluice-master}")))
	decidedByRedis(t, in, master)

	// The sentinel must know the replica before it can promote it.
	testkit.WaitFor(t, waitTimeout, "the sentinel to fail over", func() bool {
		_, err := sentinel.Do("SENTINEL", "FAILOVER", "sluice-master")
		return err == nil
	})
	testkit.WaitFor(t, waitTimeout, "the replica to become master", func() bool { return role(replica) == "master/" })
	// A fresh key each time: a refusal by the old master would be cached
	// (docs/redis.md, "Refused floods").
	n := 0
	testkit.WaitFor(t, waitTimeout, "decisions from the new master", func() bool {
		n++
		key := "after" + strconv.Itoa(n)
		code, body := in.check(t, "tiny", key)
		if code != 200 || strings.Contains(body, "degraded") {
			return false
		}
		keys, err := replica.Do("KEYS", "cmdtest:*"+key+"*")
		return err == nil && len(keys.([]any)) == 1
	})
}
