package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestDecisionLogSection(t *testing.T) {
	c, err := Parse("t.yaml", []byte("limits: {}\n"), testFormats)
	if err != nil || c.DecisionLog() != nil {
		t.Fatalf("no section: DecisionLog() = %v (%v), want nil", c.DecisionLog(), err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "log.key"), []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sluice.yaml")
	src := "limits: {}\ndecision_log:\n  path: decisions.jsonl\n  sample: 0.25\n  key_file: log.key\n  max_size_mib: 10\n  files: 3\n"
	c, err = Parse(file, []byte(src), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	l := c.DecisionLog()
	want := DecisionLog{Path: filepath.Join(dir, "decisions.jsonl"), Sample: 0.25, KeyFile: filepath.Join(dir, "log.key"), MaxSizeMiB: 10, Files: 3}
	if l == nil || l.Path != want.Path || l.Sample != want.Sample || l.KeyFile != want.KeyFile || l.MaxSizeMiB != want.MaxSizeMiB || l.Files != want.Files ||
		!bytes.Equal(l.Key, []byte("0123456789abcdef0123")) {
		t.Fatalf("DecisionLog() = %+v, want %+v with the secret, trimmed", l, want)
	}
	c2, err := Parse("t.yaml", []byte("limits: {}\ndecision_log: {path: /var/log/d.jsonl}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if l := c2.DecisionLog(); l == nil || l.Path != "/var/log/d.jsonl" || l.Sample != 0 || l.KeyFile != "" || l.Key != nil || l.MaxSizeMiB != 0 || l.Files != 0 {
		t.Errorf("path alone = %+v, want the path and nothing else set", l)
	}
	if got := RestartRequired(c, c2); len(got) != 1 || got[0] != "decision_log" {
		t.Errorf("RestartRequired after a decision_log change = %v, want [decision_log]", got)
	}
	if got := RestartRequired(c, c); len(got) != 0 {
		t.Errorf("RestartRequired of the same file = %v, want nothing", got)
	}

	if err := os.WriteFile(filepath.Join(dir, "short.key"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Parse(file, []byte("limits: {}\ndecision_log: {path: d.jsonl, key_file: short.key}\n"), testFormats)
	wantProblem := file + ":2: decision_log.key_file: the secret in " + filepath.Join(dir, "short.key") + " is 5 bytes, want at least 16"
	if got := problems(err); len(got) != 1 || got[0] != wantProblem {
		t.Errorf("a short secret: %v, want %q", got, wantProblem)
	}
}
