package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// readyz is an answer of GET /readyz.
type readyz struct {
	code        int
	Status      string   `json:"status"`
	Store       string   `json:"store"`
	Masters     int      `json:"masters"`
	MastersDown []string `json:"masters_down"`
}

func getReadyz(c *http.Client, addr string) (readyz, error) {
	req, err := http.NewRequest("GET", "http://"+addr+"/readyz", nil)
	if err != nil {
		return readyz{}, err
	}
	resp, b, err := testkit.Fetch(c, req)
	if err != nil {
		return readyz{}, err
	}
	r := readyz{code: resp.StatusCode}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("GET /readyz = %d %s: %v", resp.StatusCode, b, err)
	}
	return r, nil
}

// clusterReadiness runs `sluice serve` with on_error: error on the cluster,
// every node listed in store.redis.addrs: checks on keys in different
// slots are a 422, a proxy rule keyed apart is reported at the start and
// answered 500, and then it kills a master that has a replica. Until the cluster notices, /readyz answers 200 "degraded",
// naming that master, and never the others; once the cluster has promoted
// the replica, /readyz is "ready" again within clusterComeback and answers
// 200 "ready" to the next 100 polls in a row, although dead nodes are
// still listed in the addresses.
func clusterReadiness(t *testing.T, c *testkit.RedisCluster) {
	cfg := testkit.WriteFile(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
`+testkit.RedisStoreYAML("ready:", time.Second, c.Addrs...)+`limits:
  api: {algorithm: token_bucket, limit: 100, period: 1m}
  hourly: {algorithm: fixed_window, limit: 1000, period: 1h}
proxy:
  rules:
    - name: split
      limits: [{limit: api, key: ip}, {limit: hourly, key: "header:X-User"}]
`)
	svc := startService(t, "sluice", "--config", cfg)
	client := newClient(t, 1)
	poll := func() readyz {
		t.Helper()
		r, err := getReadyz(client, svc.http)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ready := func() bool {
		r := poll()
		return r.code == 200 && r.Status == "ready"
	}
	testkit.WaitFor(t, 10*time.Second, "/readyz to answer 200 ready after the start", ready)

	// Checks on keys in different slots ("a" and "b" hash apart) are a
	// 422 that says what to do; on one key, a decision.
	for body, want := range map[string]int{
		`{"checks":[{"limit":"api","key":"a"},{"limit":"api","key":"b"}]}`:    http.StatusUnprocessableEntity,
		`{"checks":[{"limit":"api","key":"a"},{"limit":"hourly","key":"a"}]}`: http.StatusOK,
	} {
		resp, err := client.Post("http://"+svc.http+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want != http.StatusOK && !strings.Contains(string(b), "same key") {
			t.Errorf("POST /v1/check %s = %d %s, want %d", body, resp.StatusCode, b, want)
		}
	}

	// The rule whose limits are keyed apart is reported at the start, and
	// its requests are a 500 (never a 503 to retry, never let through).
	if log := svc.log.String(); !strings.Contains(log, "a rule can never be decided on this Redis Cluster") || !strings.Contains(log, "proxy.rules[0]") {
		t.Errorf("the log does not report the split rule at the start:\n%s", tail(log, 20))
	}
	req, err := http.NewRequest("GET", "http://"+svc.http+"/v1/forward-auth?rule=split", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User", "u1")
	if resp, err := client.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Retry-After") != "" {
			t.Errorf("forward-auth on the split rule = %d (Retry-After %q), want 500 without Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}

	var victim *testkit.RedisServer
	for _, m := range c.Masters() {
		if repl, err := m.Info("replication"); err == nil && repl["connected_slaves"] != "0" {
			victim = m
			break
		}
	}
	if victim == nil {
		t.Fatal("no master has a replica")
	}
	victim.Kill()
	// The cluster marks the master failed after cluster-node-timeout (1 s);
	// until then, the other masters still decide.
	if r := poll(); r.code != 200 || r.Status != "degraded" || r.Store != "partly unreachable" || r.Masters != 3 ||
		!slices.Equal(r.MastersDown, []string{victim.Addr}) {
		t.Errorf("/readyz just after %s died = %+v, want 200 degraded, %s down of 3", victim.Addr, r, victim.Addr)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		t.Fatalf("the cluster did not fail over: %v", err)
	}
	promoted := time.Now()
	testkit.WaitFor(t, clusterComeback, "/readyz to answer 200 ready after the promotion", ready)
	t.Logf("/readyz was ready again %v after the cluster reported the promotion", time.Since(promoted))
	for i := range 100 {
		if r := poll(); r.code != 200 || r.Status != "ready" || r.Masters != 3 {
			t.Fatalf("/readyz poll %d after the promotion = %+v, want 200 ready with 3 masters", i+1, r)
		}
	}
}
