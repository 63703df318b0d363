package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestServeDenialLog checks that a denial logs the same message whichever
// door it came through (the decision API, forward-auth, the reverse
// proxy), as docs/operations.md says: msg "rate limit: denied", with the
// limits that denied, the method, the path and retry_after.
func TestServeDenialLog(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	t.Cleanup(up.Close)
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), `listen: {http: "127.0.0.1:0"}
limits:
  api: {algorithm: fixed_window, limit: 1, period: 1h}
  fa: {algorithm: fixed_window, limit: 1, period: 1h}
  px: {algorithm: fixed_window, limit: 1, period: 1h}
proxy:
  upstream: `+up.URL+`
  rules:
    - name: fa
      match: {path_prefix: /v1/forward-auth}
      limits: [{limit: fa, key: ip}]
    - name: px
      limits: [{limit: px, key: ip}]
`)
	in := startServe(t, "--config", cfg, "--log-format", "json", "--log-level", "debug")
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/check", `{"limit":"api","key":"k"}`},
		{"GET", "/v1/forward-auth?rule=fa", ""},
		{"GET", "/items", ""},
	} {
		for i, want := range []string{"allowed", "denied"} {
			code, _, body := in.do(t, req.method, req.path, req.body)
			denied := code == 429 || strings.Contains(body, `"allowed":false`)
			if denied != (want == "denied") {
				t.Errorf("%s %s, request %d = %d %s, want it %s", req.method, req.path, i, code, body, want)
			}
		}
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Msg        string   `json:"msg"`
		Limits     []string `json:"limits"`
		Method     string   `json:"method"`
		Path       string   `json:"path"`
		RetryAfter *int64   `json:"retry_after"`
	}
	var got []entry
	for line := range strings.SplitSeq(strings.TrimSpace(in.stderr.String()), "\n") {
		var rec struct {
			Msg string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if !strings.Contains(rec.Msg, "denied") {
			continue
		}
		var e entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("denial line %q: %v", line, err)
		}
		got = append(got, e)
	}
	want := []struct{ limit, method, path string }{
		{"api", "POST", "/v1/check"},
		{"fa", "GET", "/v1/forward-auth"},
		{"px", "GET", "/items"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d denial lines, want %d:\n%s", len(got), len(want), in.stderr)
	}
	for i, w := range want {
		e := got[i]
		if e.Msg != "rate limit: denied" || !slices.Equal(e.Limits, []string{w.limit}) || e.Method != w.method || e.Path != w.path || e.RetryAfter == nil || *e.RetryAfter <= 0 {
			t.Errorf("denial %d logged %+v, want msg \"rate limit: denied\", limits [%s], %s %s and a retry_after", i, e, w.limit, w.method, w.path)
		}
	}
}
