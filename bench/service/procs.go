package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// ticksPerSecond is the unit of the CPU times in /proc (USER_HZ), 100 on
// every Linux this runs on.
const ticksPerSecond = 100

// startTimeout bounds how long a server may take to write its ready file.
const startTimeout = 60 * time.Second

// proc is a server process the harness started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// start starts name as a child process with its output in logPath.
func start(name, logPath string, argv ...string) (*proc, error) {
	return startWith(name, logPath, nil, argv...)
}

// startWith starts name as a child process with the environment env (nil:
// this process's) and its output in logPath.
func startWith(name, logPath string, env []string, argv ...string) (*proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop asks the process to end with SIGTERM, and kills it when it has not
// ended after 15 s.
func (p *proc) stop() error {
	defer p.log.Close()
	select {
	case <-p.done:
		return fmt.Errorf("%s had exited already: %v", p.name, p.err)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 15s of SIGTERM and was killed", p.name)
	}
}

// readyFile is what sluice serve and gubernatord write once listening.
type readyFile struct {
	HTTP string `json:"http"`
	GRPC string `json:"grpc"`
	PID  int    `json:"pid"`
}

// waitReady waits until p has written path, and returns its content.
func waitReady(p *proc, path string) (readyFile, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var r readyFile
			if err := json.Unmarshal(b, &r); err != nil {
				return r, fmt.Errorf("%s: ready file %s: %w", p.name, path, err)
			}
			if r.PID != p.pid() {
				return r, fmt.Errorf("%s: ready file %s names pid %d, not %d", p.name, path, r.PID, p.pid())
			}
			return r, nil
		}
		select {
		case <-p.done:
			return readyFile{}, fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, p.err, p.log.Name())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return readyFile{}, fmt.Errorf("%s did not write %s within %v; see %s", p.name, path, startTimeout, p.log.Name())
		}
	}
}

// server is a started server and where it listens.
type server struct {
	*proc
	ready readyFile
}

// startServer starts a server that writes a ready file (sluice serve or
// gubernatord) and waits until it listens.
func startServer(name, dir string, argv ...string) (*server, error) {
	return startServerWith(name, dir, nil, argv...)
}

// startServerWith is startServer with the environment env (nil: this
// process's).
func startServerWith(name, dir string, env []string, argv ...string) (*server, error) {
	readyPath := filepath.Join(dir, name+".ready.json")
	p, err := startWith(name, filepath.Join(dir, name+".log"), env, append(argv, "--ready-file", readyPath)...)
	if err != nil {
		return nil, err
	}
	r, err := waitReady(p, readyPath)
	if err != nil {
		p.stop()
		return nil, err
	}
	return &server{proc: p, ready: r}, nil
}

// redisServer is a private redis-server on a free loopback port.
type redisServer struct {
	*proc
	addr   string
	client rueidis.Client
}

// startRedis starts redis-server on a free loopback port, without
// persistence, with its files in dir, and waits until it answers.
func startRedis(bin, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := start("redis-server", filepath.Join(dir, "redis.log"), bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			if err == nil {
				return &redisServer{proc: p, addr: addr, client: c}, nil
			}
			c.Close()
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("redis-server exited (%v); see %s", p.err, p.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("redis-server at %s did not answer within %v: %w", addr, startTimeout, err)
		}
	}
}

// cpu returns redis-server's user+system CPU time as it reports it (INFO
// cpu), which is finer than /proc's ticks.
func (r *redisServer) cpu(ctx context.Context) (time.Duration, error) {
	s, err := r.client.Do(ctx, r.client.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, ok := infoField(s, f)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s = %q: %w", f, v, err)
		}
		total += x
	}
	return time.Duration(total * float64(time.Second)), nil
}

// commands returns how many times redis-server has run each command
// (INFO commandstats), by command name in lower case.
func (r *redisServer) commands(ctx context.Context) (map[string]int64, error) {
	s, err := r.client.Do(ctx, r.client.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandStats(s)
}

// parseCommandStats reads the calls of each command in the text of INFO
// commandstats: lines "cmdstat_NAME:calls=N,usec=...".
func parseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		line = strings.TrimRight(line, "\r\n")
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("INFO commandstats: line %q has no ':'", line)
		}
		v, ok := strings.CutPrefix(fields, "calls=")
		if !ok {
			return nil, fmt.Errorf("INFO commandstats: line %q does not start with calls=", line)
		}
		v, _, _ = strings.Cut(v, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("INFO commandstats: line %q: calls=%q is not a count", line, v)
		}
		calls[name] = n
	}
	return calls, nil
}

func (r *redisServer) stop() error {
	r.client.Close()
	return r.proc.stop()
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// procCPU returns the user+system CPU time process pid has used, from
// /proc/PID/stat (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / ticksPerSecond, nil
}

// machineBusy returns the CPU time all cores of the machine have spent
// busy (not idle, not waiting for I/O), from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy int64
	for i, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		// Fields: user nice system idle iowait irq softirq steal guest
		// guest_nice; guest time is counted in user already.
		switch i {
		case 3, 4, 8, 9:
		default:
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / ticksPerSecond, nil
}

// loadAvg returns the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
