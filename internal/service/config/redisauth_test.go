package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// loadRedis writes doc as sluice.yaml in dir, loads it and returns its
// store.redis.
func loadRedis(t *testing.T, dir, doc string) Redis {
	t.Helper()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, testFormats)
	if err != nil {
		t.Fatal(err)
	}
	return c.Store().Redis
}

// TestRedisAuthAndTLS loads store.redis credentials and TLS files relative
// to the configuration's directory.
func TestRedisAuthAndTLS(t *testing.T) {
	dir := t.TempDir()
	testkit.NewRedisTLSFiles(t, dir, "ca")
	testkit.NewRedisTLSFiles(t, dir, "client")
	if err := os.WriteFile(filepath.Join(dir, "redis.pass"), []byte("  pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := loadRedis(t, dir, `store:
  backend: redis
  redis:
    addrs: [redis.internal:6380]
    username: sluice
    password_file: redis.pass
    tls:
      ca_file: ca.crt
      cert_file: client.crt
      key_file: client.key
      server_name: redis.internal
limits:
  a: {algorithm: gcra, limit: 1, period: 1s}
`)
	if r.Username != "sluice" || r.Password != "pa55word" || r.PasswordFile != filepath.Join(dir, "redis.pass") {
		t.Errorf("credentials = %q, %q from %q; want sluice, pa55word from redis.pass", r.Username, r.Password, r.PasswordFile)
	}
	if r.TLS == nil || r.TLS.Config == nil {
		t.Fatalf("TLS = %+v, want a configuration", r.TLS)
	}
	tc := r.TLS.Config
	if tc.ServerName != "redis.internal" || tc.RootCAs == nil || len(tc.Certificates) != 1 || r.TLS.CAFile != filepath.Join(dir, "ca.crt") {
		t.Errorf("TLS config: server name %q, roots %v, %d certificates, CA file %q", tc.ServerName, tc.RootCAs != nil, len(tc.Certificates), r.TLS.CAFile)
	}

	plain, err := Parse("x.yaml", []byte("store: {backend: redis, redis: {addrs: ['r:1'], tls: true}}\nlimits: {a: {algorithm: gcra, limit: 1, period: 1s}}"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if tl := plain.Store().Redis.TLS; tl == nil || tl.Config == nil || tl.Config.RootCAs != nil {
		t.Errorf("tls: true = %+v, want TLS with the system's roots", tl)
	}
	off, err := Parse("x.yaml", []byte("store: {backend: redis, redis: {addrs: ['r:1'], tls: false}}\nlimits: {a: {algorithm: gcra, limit: 1, period: 1s}}"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if off.Store().Redis.TLS != nil {
		t.Errorf("tls: false = %+v, want none", off.Store().Redis.TLS)
	}
}

// TestRedisSentinel loads store.redis.sentinel with the sentinels' own
// password from a file.
func TestRedisSentinel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sentinel.pass"), []byte("watch-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := loadRedis(t, dir, `store:
  backend: redis
  redis:
    addrs: [10.0.0.1:26379, 10.0.0.2:26379]
    password: data-pw
    sentinel: {master_set: sluice, username: watcher, password_file: sentinel.pass}
limits:
  a: {algorithm: gcra, limit: 1, period: 1s}
`)
	want := RedisSentinel{MasterSet: "sluice", Username: "watcher", Password: "watch-pw"}
	if r.Sentinel == nil || *r.Sentinel != want || r.Password != "data-pw" {
		t.Errorf("sentinel = %+v, data password %q; want %+v and data-pw", r.Sentinel, r.Password, want)
	}
}
