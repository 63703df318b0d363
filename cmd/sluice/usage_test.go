package main

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestValidateUsage: validate accepts a token budget settled by the
// upstream's usage, with cost 0, and names the file, line and field of
// each mistake in one.
func TestValidateUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeConfig(t, filepath.Join(dir, "good.yaml"), `limits:
  tokens: {algorithm: fixed_window, limit: 100000, period: 24h}
proxy:
  upstream: http://127.0.0.1:9000
  rules:
    - limits: [{limit: tokens, key: "header:X-API-Key", cost: 0, usage: openai}]
`)
	if r := runSluice(t, nil, "validate", good); r.code != 0 || r.stdout != "ok: "+good+"\n" || r.stderr != "" {
		t.Errorf("validate good.yaml: exit %d, stdout %q, stderr %q; want 0 and ok", r.code, r.stdout, r.stderr)
	}
	bad := writeConfig(t, filepath.Join(dir, "bad.yaml"), `limits:
  tokens: {algorithm: fixed_window, limit: 100000, period: 24h}
proxy:
  upstream: http://127.0.0.1:9000
  rules:
    - limits:
        - {limit: tokens, key: "header:X-API-Key", cost: 0, usage: openai_total}
    - limits:
        - {limit: tokens, key: "header:X-API-Key", cost: 0}
    - limits:
        - {limit: tokens, key: "header:X-API-Key", usage: "header:X-Tokens", charge_on: [200]}
`)
	r := runSluice(t, nil, "validate", bad)
	want := []string{
		bad + `:7: proxy.rules[0].limits[0].usage: unknown usage "openai_total" (want header:NAME, openai (usage.total_tokens), openai:prompt (usage.prompt_tokens) or openai:completion (usage.completion_tokens))`,
		bad + `:9: proxy.rules[1].limits[0].cost: must be from 1 to 1000000000, got 0; a cost of 0 needs usage (the limit is then charged what the upstream's response reports)`,
		bad + `:11: proxy.rules[2].limits[0].charge_on: cannot be combined with usage`,
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != 1 || len(lines) != len(want) {
		t.Fatalf("validate bad.yaml: exit %d, stderr:\n%s\nwant 1 and %d problems", r.code, r.stderr, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) || !problemLine.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want it to start %q", i+1, lines[i], want[i])
		}
	}
}

// curlRE reads a documented curl command of docs/llm-budgets.md: its
// flags, path, header fields and body.
var curlRE = regexp.MustCompile(`^\$ curl (.*?)localhost:8080(/\S+)((?: -H '[^']*')*) -d '([^']*)'$`)

// timeRE finds the numbers of a refusal that depend on the time of day.
var timeRE = regexp.MustCompile(`t=[1-9][0-9]*|Retry-After: [0-9]+|retry in [0-9]+ seconds|"retry-after":[0-9]+`)

// TestDocsLLMBudget runs the walk-through of docs/llm-budgets.md: the
// page's configuration in front of the fake OpenAI-compatible API, its
// curl commands, one after the other, answered with the statuses, quota
// fields and bodies it shows (but for the numbers that depend on the time
// of day), then the count and the metrics it gives; and its validate
// example.
func TestDocsLLMBudget(t *testing.T) {
	t.Parallel()
	const doc = "../../docs/llm-budgets.md"
	llm := testkit.StartLLM(t)
	y := docBlocks(t, doc, "yaml")[0]
	for _, r := range [][2]string{{"http://127.0.0.1:8000/v1", llm.URL + "/v1"}, {"admin: 127.0.0.1:9090", `admin: "127.0.0.1:0"`}} {
		if !strings.Contains(y, r[0]) {
			t.Fatalf("%s: the configuration has no %q", doc, r[0])
		}
		y = strings.Replace(y, r[0], r[1], 1)
	}
	in := serveDoc(t, y)
	ran := 0
	for _, c := range docBlocks(t, doc, "console") {
		cmd, want, _ := strings.Cut(strings.TrimSuffix(c, "\n"), "\n")
		m := curlRE.FindStringSubmatch(cmd)
		if m == nil {
			t.Fatalf("%s: cannot read %q", doc, cmd)
		}
		req, err := http.NewRequest("POST", in.url(m[2]), strings.NewReader(m[4]))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range regexp.MustCompile(`-H '([^:]*): ([^']*)'`).FindAllStringSubmatch(m[3], -1) {
			req.Header.Set(h[1], h[2])
		}
		resp, body := testkit.DoHTTP(t, http.DefaultClient, req)
		head, wantBody, _ := strings.Cut(want, "\n\n")
		lines := strings.Split(head, "\n")
		got := []string{"HTTP/1.1 " + resp.Status}
		for _, l := range lines[1:] {
			name, _, _ := strings.Cut(l, ": ")
			got = append(got, name+": "+resp.Header.Get(name))
		}
		norm := func(s string) string { return timeRE.ReplaceAllString(s, "TIME") }
		if g, w := norm(strings.Join(got, "\n")), norm(head); g != w {
			t.Errorf("%s\ngot:\n%s\nthe page says:\n%s", cmd, g, w)
		}
		if !strings.Contains(m[1], "-o /dev/null") {
			if g, w := norm(strings.TrimSpace(body)), norm(strings.TrimSpace(wantBody)); g != w {
				t.Errorf("%s\ngot body:\n%s\nthe page says:\n%s", cmd, g, w)
			}
		}
		ran++
	}
	if ran != 4 {
		t.Errorf("ran %d curl commands of %s, want the 4 of the walk-through", ran, doc)
	}
	admin := &instance{http: in.admin}
	if _, _, e := admin.do(t, "GET", "/v1/explain?limit=team-tokens&key=t1", ""); !strings.Contains(e, `"current":1115,`) {
		t.Errorf("/v1/explain = %s, want the count the page gives, 1115", e)
	}
	for _, series := range []string{`sluice_usage_settled_total{limit="team-tokens"}`, `sluice_usage_units_total{limit="team-tokens"}`} {
		var want string
		for _, b := range docBlocks(t, doc, "text") {
			if v, ok := testkit.SeriesValue(b, series); ok {
				want = v
			}
		}
		if got := admin.metric(t, series); got == "" || got != want {
			t.Errorf("%s = %q, the page says %q", series, got, want)
		}
	}

	// The validate example: the configuration with the mistake it names.
	var wantProblem string
	for _, b := range docBlocks(t, doc, "text") {
		if p, ok := strings.CutPrefix(b, "sluice.yaml:"); ok {
			wantProblem = "sluice.yaml:" + strings.TrimSpace(p)
		}
	}
	bad := strings.Replace(docBlocks(t, doc, "yaml")[0], "usage: openai ", "usage: openai_prompt ", 1)
	file := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), bad)
	r := runSluice(t, nil, "validate", file)
	if got := strings.TrimPrefix(strings.TrimSpace(r.stderr), filepath.Dir(file)+"/"); r.code != 1 || got != wantProblem {
		t.Errorf("validate with usage: openai_prompt: exit %d\n%s\nthe page says\n%s", r.code, got, wantProblem)
	}
}
