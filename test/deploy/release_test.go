package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildTimeout bounds one release build (a cold build cache compiles
// every dependency without cgo and with -trimpath).
const buildTimeout = 8 * time.Minute

// git runs git in dir and returns its output, trimmed.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// repoRoot returns the root of the work tree the tests run in.
func repoRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to read the repository with")
	}
	return git(t, ".", "rev-parse", "--show-toplevel")
}

// checkout clones the repository at root into a new directory and checks
// out rev there: a tree of the commit alone, with a .git directory of its
// own, as CI and a Docker build context have it.
func checkout(t *testing.T, root, rev string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	git(t, ".", "clone", "-q", "--no-checkout", root, dir)
	git(t, dir, "checkout", "-q", "--detach", rev)
	return dir
}

// runIn runs name with args in dir, failing t with its output on error.
func runIn(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

// TestReleaseBuildIsReproducible builds the committed HEAD twice with
// scripts/release.sh, in two checkouts at different paths, and requires
// the same bytes; the binary reports the commit it was built from.
func TestReleaseBuildIsReproducible(t *testing.T) {
	root := repoRoot(t)
	rev := git(t, root, "rev-parse", "HEAD")
	var bins [2][]byte
	for i := range bins {
		src := checkout(t, root, rev)
		out := filepath.Join(t.TempDir(), "sluice")
		runIn(t, src, buildTimeout, nil, "bash", "scripts/release.sh", out)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		bins[i] = b
		if i == 0 {
			checkVersion(t, out, rev, git(t, src, "show", "-s", "--format=%cI", rev))
		}
	}
	if !bytes.Equal(bins[0], bins[1]) {
		n := 0
		for n < min(len(bins[0]), len(bins[1])) && bins[0][n] == bins[1][n] {
			n++
		}
		t.Errorf("two release builds of %s differ: %d and %d bytes, first difference at byte %d", rev, len(bins[0]), len(bins[1]), n)
	}
}

// checkVersion runs bin version --json and checks that it names rev and
// its commit time, and an unmodified tree.
func checkVersion(t *testing.T, bin, rev, commitTime string) {
	t.Helper()
	out := runIn(t, ".", time.Minute, nil, bin, "version", "--json")
	var got struct {
		Version, Revision, Time string
		Modified                bool
		GoVersion               string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sluice version --json = %q: %v", out, err)
	}
	want, err := time.Parse(time.RFC3339, commitTime)
	if err != nil {
		t.Fatal(err)
	}
	stamped, err := time.Parse(time.RFC3339, got.Time)
	if got.Revision != rev || err != nil || !stamped.Equal(want) || got.Modified {
		t.Errorf("sluice version --json = %s, want revision %s, time %s, not modified", out, rev, commitTime)
	}
	if !strings.Contains(got.Version, rev[:12]) && !strings.HasPrefix(got.Version, "v") {
		t.Errorf("version %q names neither a tag nor the commit", got.Version)
	}
	text := string(runIn(t, ".", time.Minute, nil, bin, "--version"))
	if !strings.Contains(text, "revision: "+rev+"\n") || !strings.Contains(text, "go:       go1.") {
		t.Errorf("sluice --version = %q, want the revision and the Go release", text)
	}
}
