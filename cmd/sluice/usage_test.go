package main

import (
	"path/filepath"
	"strings"
	"testing"
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
