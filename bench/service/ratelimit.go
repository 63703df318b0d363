package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// floodPerMinute is the limit of the flood key: a fixed window of 10
// requests a minute, so that nearly every request of the flood is refused.
const floodPerMinute = 10

// envoyDomain is one Envoy domain as an envoyproxy/ratelimit configuration
// file. Both sluice serve (as an item of its envoy: section) and
// envoyproxy/ratelimit (as a file of its runtime directory) read the same
// text, so the two decide on the same limits.
type envoyDomain struct {
	file, yaml string
}

// envoyDomains are the domains the Redis comparison with
// envoyproxy/ratelimit uses: rls, every key allowed (a fixed window of
// 1,000,000 a second, envoyproxy/ratelimit's only algorithm), and flood,
// where (user, attacker) has floodPerMinute requests a minute and every
// other user 1,000,000 a second.
func envoyDomains() []envoyDomain {
	return []envoyDomain{
		{"rls.yaml", fmt.Sprintf(`domain: %s
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: %d
`, windowLimit.name, windowLimit.limit)},
		{"flood.yaml", fmt.Sprintf(`domain: %s
descriptors:
  - key: user
    value: %s
    rate_limit:
      unit: minute
      requests_per_unit: %d
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: %d
`, floodLimit.name, floodKey, floodPerMinute, floodLimit.limit)},
	}
}

// asListItem indents a YAML document as one item of a list at the given
// indentation.
func asListItem(doc, indent string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		if i == 0 {
			b.WriteString(indent + "- " + line + "\n")
		} else {
			b.WriteString(indent + "  " + line + "\n")
		}
	}
	return b.String()
}

// ratelimitSettings are the environment variables envoyproxy/ratelimit is
// started with; every other setting is its default. localCache is
// LOCAL_CACHE_SIZE_IN_BYTES, 0 for none (its default).
func ratelimitSettings(root, redisAddr string, port, grpcPort, debugPort, localCache int) []string {
	return []string{
		"RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit", // the files are in RUNTIME_ROOT/ratelimit/config
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"USE_STATSD=false", // nothing listens for statsd; its stats are kept in memory
		"LOG_LEVEL=warn",   // its default
		"HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(port),
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=" + strconv.Itoa(debugPort),
		"LOCAL_CACHE_SIZE_IN_BYTES=" + strconv.Itoa(localCache),
	}
}

// startRatelimit starts envoyproxy/ratelimit (the binary bin, built from
// github.com/envoyproxy/ratelimit/src/service_cmd) as name on free loopback
// ports with the Redis at redisAddr, its configuration files in
// DIR/name-runtime, and waits until its /healthcheck answers OK and its
// gRPC port accepts connections.
func startRatelimit(name, dir, bin, redisAddr string, localCache int) (*server, error) {
	root := filepath.Join(dir, name+"-runtime")
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	for _, d := range envoyDomains() {
		if err := os.WriteFile(filepath.Join(conf, d.file), []byte(d.yaml), 0o644); err != nil {
			return nil, err
		}
	}
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	env := append(os.Environ(), ratelimitSettings(root, redisAddr, ports[0], ports[1], ports[2], localCache)...)
	p, err := startWith(name, filepath.Join(dir, name+".log"), env, bin)
	if err != nil {
		return nil, err
	}
	r := readyFile{
		HTTP: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		GRPC: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		PID:  p.pid(),
	}
	if err := waitHealthy(p, r); err != nil {
		p.stop()
		return nil, err
	}
	return &server{proc: p, ready: r}, nil
}

// waitHealthy waits until GET /healthcheck on r.HTTP answers 200, a
// decision in the rls domain through its JSON endpoint names the domain's
// limit (its configuration is loaded) and r.GRPC accepts a connection.
func waitHealthy(p *proc, r readyFile) error {
	deadline := time.Now().Add(startTimeout)
	hc := &http.Client{Timeout: time.Second}
	var last error
	for {
		last = probe(hc, r)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, p.err, p.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %v (%v); see %s", p.name, startTimeout, last, p.log.Name())
		}
	}
}

func probe(hc *http.Client, r readyFile) error {
	resp, err := hc.Get("http://" + r.HTTP + "/healthcheck")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthcheck: %s", resp.Status)
	}
	body := `{"domain":"` + windowLimit.name + `","descriptors":[{"entries":[{"key":"user","value":"probe"}]}]}`
	resp, err = hc.Post("http://"+r.HTTP+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"currentLimit"`) {
		return fmt.Errorf("POST /json: %s %s: the %s domain is not loaded", resp.Status, b, windowLimit.name)
	}
	c, err := net.DialTimeout("tcp", r.GRPC, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
