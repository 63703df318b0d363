// This file starts private redis-server processes for tests: a
// single instance or a Redis Cluster, each on free loopback ports, with no
// persistence, in a temporary directory, stopped when the test ends.
//
// It never touches a Redis it did not start (and never port 6379). When
// redis-server is not on PATH the calling test is skipped with a message that
// says how to install it, unless the environment variable
// SLUICE_REQUIRE_REDIS is 1, in which case the test fails instead, so that CI
// cannot pass without Redis.

package testkit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireRedisEnv is the environment variable that turns a missing redis-server
// into a test failure instead of a skip.
const RequireRedisEnv = "SLUICE_REQUIRE_REDIS"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// RequirePrograms skips t (or fails it, when SLUICE_REQUIRE_REDIS=1) unless every
// named program is on PATH.
func RequirePrograms(t testing.TB, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			msg := fmt.Sprintf("%s not found on PATH: install it with `apt-get install redis-server` (Debian/Ubuntu); set %s=1 to make this a failure", p, RequireRedisEnv)
			if os.Getenv(RequireRedisEnv) == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// RedisServer is one redis-server process started by StartRedis or StartRedisCluster. Its
// methods are safe for concurrent use.
type RedisServer struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// Port is the client port; BusPort the cluster bus port (0 when not in
	// a cluster).
	Port, BusPort int

	dir      string
	args     []string
	wrap     []string // a command that runs redis-server, such as valgrind
	password string
	tls      *tls.Config

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// RedisOptions configure a server.
type RedisOptions struct {
	// Args are extra redis-server arguments, such as "--maxmemory", "10mb".
	Args []string
	// Password, if set, is required of clients (requirepass); the RedisServer's
	// own commands send it.
	Password string
	// TLS, if set, makes the server accept only TLS connections, with this
	// certificate and key (PEM files), on Port; the RedisServer's own commands
	// connect with ClientTLS.
	TLS *RedisTLSFiles
	// Wrap, if set, is a command and its arguments that run redis-server,
	// such as {"valgrind", "--tool=callgrind"}: the server is started as
	// Wrap followed by "redis-server" and its arguments.
	Wrap []string
}

// RedisTLSFiles are a TLS server's certificate and key, and the client side's
// configuration.
type RedisTLSFiles struct {
	CertFile, KeyFile string
	ClientTLS         *tls.Config
}

// StartRedis starts a single redis-server on a free loopback port and stops it
// when t ends.
func StartRedis(t testing.TB, opts ...RedisOptions) *RedisServer {
	t.Helper()
	RequirePrograms(t, "redis-server")
	var o RedisOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	args := o.Args
	if o.Password != "" {
		args = append(slices.Clone(args), "--requirepass", o.Password)
	}
	s, err := startServerAuth(t.TempDir(), false, args, o.Password, o.TLS, o.Wrap)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartRedisSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under the name set, and stops it when t ends. Its Addr
// answers SENTINEL commands; clients ask it for the master's address.
func StartRedisSentinel(t testing.TB, master *RedisServer, set string) *RedisServer {
	t.Helper()
	RequirePrograms(t, "redis-server")
	dir := t.TempDir()
	var lastErr error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n",
			ports[0], dir, filepath.Join(dir, "sentinel.log"), set, master.Port, set)
		if master.password != "" {
			text += fmt.Sprintf("sentinel auth-pass %s %s\n", set, master.password)
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Port: ports[0], dir: dir, args: []string{conf, "--sentinel"}}
		if lastErr = s.Restart(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: sentinel: %v", lastErr)
	return nil
}

// startServer picks free ports and starts a server in dir, retrying a few
// times when another process takes a port in between.
func startServer(dir string, cluster bool, extra []string) (*RedisServer, error) {
	return startServerAuth(dir, cluster, extra, "", nil, nil)
}

// startServerAuth is startServer for a server that requires password,
// that listens for TLS only when tlsFiles is set, and that runs under wrap
// when it is set.
func startServerAuth(dir string, cluster bool, extra []string, password string, tlsFiles *RedisTLSFiles, wrap []string) (*RedisServer, error) {
	var lastErr error
	for range 5 {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Port: ports[0], dir: dir, password: password, wrap: wrap}
		if tlsFiles != nil {
			s.tls = tlsFiles.ClientTLS
		}
		s.args = []string{
			"--port", strconv.Itoa(s.Port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--daemonize", "no",
			"--protected-mode", "no",
		}
		if cluster {
			s.BusPort = ports[1]
			s.args = append(s.args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-port", strconv.Itoa(s.BusPort),
			)
		}
		if tlsFiles != nil {
			s.args = append(s.args, "--port", "0", "--tls-port", strconv.Itoa(s.Port),
				"--tls-cert-file", tlsFiles.CertFile, "--tls-key-file", tlsFiles.KeyFile,
				"--tls-ca-cert-file", tlsFiles.CertFile, "--tls-auth-clients", "no")
		}
		s.args = append(s.args, extra...)
		if lastErr = s.Restart(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// freePorts returns n distinct free loopback ports, none of them 6379.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		if p := l.Addr().(*net.TCPAddr).Port; p != 6379 {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// Restart starts the server again on the same port and directory, after
// Kill or Stop (it does nothing while the server runs), and waits until it
// answers PING. Without persistence a restarted server is empty; a cluster
// node keeps its identity through nodes.conf.
func (s *RedisServer) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", s.args...)
	if len(s.wrap) > 0 {
		cmd = exec.Command(s.wrap[0], slices.Concat(s.wrap[1:], []string{"redis-server"}, s.args)...)
	}
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		if reply, err := s.do("PING"); err == nil && reply == "PONG" {
			break
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.Port, s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.Port, startTimeout, s.logTail())
		}
	}
	s.cmd, s.done = cmd, done
	return nil
}

// Pid returns the process id of the running server (of its Wrap command
// when it has one), or 0 when it is not running.
func (s *RedisServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// for the process to end. It does nothing when the server is not running.
func (s *RedisServer) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops the server with SIGTERM (a clean shutdown) and waits for it.
func (s *RedisServer) Stop() { s.stop(syscall.SIGTERM) }

func (s *RedisServer) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Running reports whether the server process is running.
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Pause stops the process with SIGSTOP: it keeps its connections but
// answers nothing, like a hung server, until Resume.
func (s *RedisServer) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *RedisServer) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

func (s *RedisServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// RedisDo sends one command to the server on a new connection and returns its
// reply: a string for simple and bulk strings, an int64 for integers, a
// []any for arrays, nil for a null reply, and an error for an error reply
// or a failed connection. It is meant for setup and inspection (INFO,
// CONFIG, CLUSTER INFO), not for speed.
func (s *RedisServer) Do(args ...string) (any, error) { return s.do(args...) }

func (s *RedisServer) do(args ...string) (any, error) {
	return doAuth(s.Addr, s.password, s.tls, args...)
}

// Keys returns the names of the keys that match pattern (KEYS), and fails
// t when the server cannot answer.
func (s *RedisServer) Keys(t testing.TB, pattern string) []string {
	t.Helper()
	reply, err := s.do("KEYS", pattern)
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	names := make([]string, 0, len(reply.([]any)))
	for _, k := range reply.([]any) {
		names = append(names, k.(string))
	}
	return names
}

// RedisDo sends one command to the Redis at addr on a new connection, as
// RedisServer.Do does; it is for reaching a server through a RedisProxy.
func RedisDo(addr string, args ...string) (any, error) { return doAuth(addr, "", nil, args...) }

// doAuth is RedisDo after AUTH password, unless password is empty, over TLS
// when tc is set.
func doAuth(addr, password string, tc *tls.Config, args ...string) (any, error) {
	d := &net.Dialer{Timeout: time.Second}
	var conn net.Conn
	var err error
	if tc != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, tc)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	command := func(args ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if password != "" {
		command("AUTH", password)
	}
	command(args...)
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := readReply(r); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return readReply(r)
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply %q", line)
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Info returns the fields of INFO section (for example "cpu",
// "commandstats", "memory") as a map.
func (s *RedisServer) Info(section string) (map[string]string, error) {
	reply, err := s.do("INFO", section)
	if err != nil {
		return nil, err
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("redistest: INFO replied %T", reply)
	}
	return parseInfo(text), nil
}

// CPU returns the CPU time the server has used so far, user and system
// (INFO cpu).
func (s *RedisServer) CPU() (time.Duration, error) {
	info, err := s.Info("cpu")
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(info[f], 64)
		if err != nil {
			return 0, fmt.Errorf("redistest: INFO cpu %s = %q", f, info[f])
		}
		total += v
	}
	return time.Duration(total * float64(time.Second)), nil
}

// ScriptCalls returns how many script calls (EVALSHA and EVAL) the server
// has run and the µs it spent in them (INFO commandstats): the time inside
// the scripts, without the network.
func (s *RedisServer) ScriptCalls() (calls, usec int64, err error) {
	info, err := s.Info("commandstats")
	if err != nil {
		return 0, 0, err
	}
	for _, name := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		for f := range strings.SplitSeq(info[name], ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec, nil
}

func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
