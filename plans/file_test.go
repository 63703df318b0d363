package plans_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/plans"
)

func TestParseTable(t *testing.T) {
	known := []string{"free", "pro"}
	tests := []struct {
		name, file, data string
		want             map[string]string
		err              string
	}{
		{"csv with header", "t.csv", "key,plan\nk1,pro\n# a comment\nk2, free\n", map[string]string{"k1": "pro", "k2": "free"}, ""},
		{"csv without header", "t.csv", "k1,pro\n", map[string]string{"k1": "pro"}, ""},
		{"csv quoted key", "t.csv", "\"a,b\",pro\n", map[string]string{"a,b": "pro"}, ""},
		{"csv empty", "t.csv", "", map[string]string{}, ""},
		{"csv other extension", "t.txt", "k1,pro\n", map[string]string{"k1": "pro"}, ""},
		{"yaml", "t.yaml", "k1: pro\n\"k:2\": free\n", map[string]string{"k1": "pro", "k:2": "free"}, ""},
		{"yml empty", "t.yml", "", map[string]string{}, ""},
		{"csv three columns", "t.csv", "k1,pro,x\n", nil, "t.csv:1: wrong number of fields (want two columns: key,plan)"},
		{"csv unknown plan", "t.csv", "key,plan\nk1,por\n", nil, `t.csv:2: key "k1": no plan named "por" (want one of free, pro)`},
		{"csv duplicate", "t.csv", "k1,pro\nk2,pro\nk1,free\n", nil, `t.csv:3: key "k1" is already given a plan on line 1`},
		{"csv empty key", "t.csv", ",pro\n", nil, "t.csv:1: the key is empty"},
		{"csv empty plan", "t.csv", "k1,\n", nil, `t.csv:1: key "k1" has no plan`},
		{"csv bad quote", "t.csv", "\"k1,pro\n", nil, "t.csv:1:"},
		{"yaml list", "t.yaml", "- k1\n", nil, "t.yaml:1: want a mapping"},
		{"yaml nested", "t.yaml", "k1: {a: b}\n", nil, "t.yaml:1: want key: plan"},
		{"yaml unknown plan", "t.yaml", "k1: pro\nk2: gold\n", nil, `t.yaml:2: key "k2": no plan named "gold"`},
		{"yaml duplicate", "t.yaml", "k1: pro\nk1: free\n", nil, `t.yaml:2: key "k1" is already given a plan on line 1`},
		{"yaml syntax", "t.yaml", "k1: [\n", nil, "t.yaml: invalid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := plans.ParseTable(tt.file, []byte(tt.data), known)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseTable = %v, %v, want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("ParseTable = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("ParseTable[%q] = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestFileReload: with CheckEvery set, a changed file applies at the first
// lookup after the interval; a broken file is refused and the old table
// stays.
func TestFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "customers.csv")
	write := func(s string, mod time.Time) { testkit.WriteFileAt(t, path, s, mod) }
	mod := time.Unix(1_700_000_000, 0)
	write("k1,pro\n", mod)
	now := time.Unix(1_800_000_000, 0)
	var reloads []string
	f, err := plans.OpenFile(path, plans.FileOptions{
		CheckEvery: time.Second,
		Plans:      []string{"free", "pro"},
		Now:        func() time.Time { return now },
		OnReload: func(n int, err error) {
			if err != nil {
				reloads = append(reloads, "error")
			} else {
				reloads = append(reloads, "ok")
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plan := func(key string) string {
		p, _, err := f.Plan(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := plan("k1"); got != "pro" {
		t.Fatalf("k1 = %q, want pro", got)
	}
	write("k1,free\nk2,pro\n", mod.Add(time.Second))
	if got := plan("k1"); got != "pro" {
		t.Errorf("before the interval k1 = %q, want pro (not yet looked at)", got)
	}
	now = now.Add(time.Second)
	if got := plan("k1"); got != "free" || plan("k2") != "pro" || f.Len() != 2 {
		t.Errorf("after the interval k1 = %q, k2 = %q, want free, pro", got, plan("k2"))
	}
	// A file naming an unknown plan is refused.
	write("k1,gold\n", mod.Add(2*time.Second))
	now = now.Add(time.Second)
	if got := plan("k1"); got != "free" {
		t.Errorf("after a bad file k1 = %q, want free (the old table)", got)
	}
	// Unchanged since: not read again.
	now = now.Add(time.Second)
	plan("k1")
	if got := strings.Join(reloads, ","); got != "ok,error" {
		t.Errorf("reloads = %s, want ok,error", got)
	}
	// Removing the file keeps the table too.
	os.Remove(path)
	if changed, err := f.Reload(); changed || err == nil {
		t.Errorf("Reload of a removed file = %v, %v, want an error", changed, err)
	}
	if got := plan("k2"); got != "pro" {
		t.Errorf("after removal k2 = %q, want pro", got)
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := plans.OpenFile(filepath.Join(dir, "missing.csv"), plans.FileOptions{}); err == nil {
		t.Error("OpenFile of a missing file succeeded")
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("k1: [a]\n"), 0o644)
	if _, err := plans.OpenFile(bad, plans.FileOptions{}); err == nil || !strings.Contains(err.Error(), "bad.yaml:1") {
		t.Errorf("OpenFile(bad.yaml) = %v, want an error naming the line", err)
	}
}
