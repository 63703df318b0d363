package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// reloadV1 and reloadV2 differ in limits: keep is unchanged, gone is
// removed and added is new.
const (
	reloadV1 = `listen: {http: "127.0.0.1:0"}
limits:
  keep: {algorithm: fixed_window, limit: 3, period: 1h}
  gone: {algorithm: gcra, limit: 5, period: 1s}
`
	reloadV2 = `listen: {http: "127.0.0.1:0"}
limits:
  keep: {algorithm: fixed_window, limit: 3, period: 1h}
  added: {algorithm: sliding_log, limit: 2, period: 1h}
`
	// reloadBad has two problems, on lines 3 and 4.
	reloadBad = `listen: {http: "127.0.0.1:0"}
limits:
  keep: {algorithm: fixed_windows, limit: 3, period: 1h}
  added: {algorithm: sliding_log, limit: 2, period: 1h, burst: 2}
`
)

// known reports whether the service knows limit: a check of it is not 404.
func (in *instance) known(t *testing.T, limit string) bool {
	t.Helper()
	code, _ := in.check(t, limit, "probe")
	return code != 404
}

func TestReloadOnFileChange(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), reloadV1)
	in := startServe(t, "--config", path, "--watch", "20ms")
	for i := range 2 {
		if code, body := in.check(t, "keep", "k"); code != 200 || !strings.HasPrefix(body, `{"allowed":true`) {
			t.Fatalf("check %d of keep = %d %s, want allowed", i, code, body)
		}
	}

	writeConfig(t, path, reloadV2)
	testkit.WaitFor(t, waitTimeout, "limit added to be loaded", func() bool { return in.known(t, "added") })
	// keep's state carried over: 2 of 3 spent before the reload.
	if code, body := in.check(t, "keep", "k"); code != 200 || !strings.HasPrefix(body, `{"allowed":true,"limit":3,"remaining":0,`) {
		t.Errorf("keep after the reload = %d %s, want allowed with 0 remaining (its state kept)", code, body)
	}
	if code, body := in.check(t, "keep", "k"); code != 200 || !strings.HasPrefix(body, `{"allowed":false,`) {
		t.Errorf("keep spent = %d %s, want denied", code, body)
	}
	if in.known(t, "gone") {
		t.Errorf("limit gone is still served after the reload")
	}
	if got := in.metric(t, "sluice_config_reloads_total"); got != "1" {
		t.Errorf("sluice_config_reloads_total = %q, want 1", got)
	}

	writeConfig(t, path, reloadBad)
	testkit.WaitFor(t, waitTimeout, "the bad file to be refused", func() bool {
		return strings.Contains(in.stderr.String(), "problems=2")
	})
	log := in.stderr.String()
	testkit.WantAll(t, "log", log,
		`problem="`+path+`:3: limits.keep.algorithm: unknown algorithm \"fixed_windows\"`,
		`problem="`+path+`:4: limits.added.burst: `,
		`msg="reload refused; the running configuration stays" trigger="file changed" file=`+path+` problems=2`,
	)
	// The old configuration still serves, with its state.
	if code, body := in.check(t, "added", "a"); code != 200 || !strings.HasPrefix(body, `{"allowed":true,"limit":2,"remaining":1,`) {
		t.Errorf("added after the bad file = %d %s, want allowed, 1 remaining", code, body)
	}
	if code, body := in.check(t, "keep", "k"); !strings.HasPrefix(body, `{"allowed":false,`) {
		t.Errorf("keep after the bad file = %d %s, want still denied", code, body)
	}
	if got := in.metric(t, "sluice_config_reload_failures_total"); got != "1" {
		t.Errorf("sluice_config_reload_failures_total = %q, want 1", got)
	}

	// A listen address changes only with a restart: the rest applies, with
	// a warning.
	writeConfig(t, path, strings.Replace(reloadV1, "127.0.0.1:0", "127.0.0.1:1", 1))
	testkit.WaitFor(t, waitTimeout, "limit gone to come back", func() bool { return in.known(t, "gone") })
	if want := `msg="a changed setting needs a restart; it keeps its running value until then" trigger="file changed" file=` + path + ` setting=listen.http`; !strings.Contains(in.stderr.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, in.stderr)
	}
	if code, _ := in.check(t, "keep", "k"); code != 200 {
		t.Errorf("the service stopped answering on its address after a listen change")
	}
}

// TestReloadIgnoresTouch checks that a file whose time changes but whose
// content does not is not reloaded.
func TestReloadIgnoresTouch(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), reloadV1)
	in := startServe(t, "--config", path, "--watch", "10ms", "--log-level", "debug")
	// The same content again, with a new modification time (set, since
	// file times may be as coarse as a few milliseconds).
	testkit.WriteFileAt(t, path, reloadV1, time.Now().Add(time.Second))
	testkit.WaitFor(t, waitTimeout, "the rewrite to be seen", func() bool {
		return strings.Contains(in.stderr.String(), "rewritten with the same content")
	})
	// Then a real change, which must be the first reload.
	writeConfig(t, path, reloadV2)
	testkit.WaitFor(t, waitTimeout, "limit added to be loaded", func() bool { return in.known(t, "added") })
	if got := in.metric(t, "sluice_config_reloads_total"); got != "1" {
		t.Errorf("sluice_config_reloads_total = %q, want 1 (the rewrite of the same content is no reload)", got)
	}
}

// TestReloadOnSIGHUP sends SIGHUP to the test process, which the service
// running in it catches. It is not parallel: every service running in the
// process would reload.
func TestReloadOnSIGHUP(t *testing.T) {
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), reloadV1)
	in := startServe(t, "--config", path, "--watch", "0")
	if code, _ := in.check(t, "keep", "k"); code != 200 {
		t.Fatalf("check keep = %d, want 200", code)
	}
	writeConfig(t, path, reloadV2)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "limit added to be loaded after SIGHUP", func() bool { return in.known(t, "added") })
	if code, body := in.check(t, "keep", "k"); !strings.HasPrefix(body, `{"allowed":true,"limit":3,"remaining":1,`) {
		t.Errorf("keep after SIGHUP = %d %s, want its state kept: 1 remaining", code, body)
	}

	writeConfig(t, path, reloadBad)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "the bad file to be refused", func() bool {
		return strings.Contains(in.stderr.String(), `msg="reload refused; the running configuration stays" trigger=SIGHUP`)
	})
	if !in.known(t, "added") {
		t.Errorf("the bad file replaced the running configuration")
	}
}

// TestSIGHUPWithoutFile checks that the built-in default ignores SIGHUP
// and says why. Not parallel: see TestReloadOnSIGHUP.
func TestSIGHUPWithoutFile(t *testing.T) {
	in := startServe(t, "--http", "127.0.0.1:0")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "the SIGHUP to be logged", func() bool {
		return strings.Contains(in.stderr.String(), "SIGHUP: nothing to reload: the service runs the built-in default configuration")
	})
	if code, _ := in.check(t, "demo", "x"); code != 200 {
		t.Errorf("check after SIGHUP = %d, want 200", code)
	}
}

// TestReloadUnderLoad reloads the file ten times while clients keep
// asking for decisions: every request is answered, none fails.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, filepath.Join(t.TempDir(), "sluice.yaml"), reloadV1)
	in := startServe(t, "--config", path, "--watch", "5ms")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered, failed atomic.Int64
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(in.url("/v1/check"), "application/json",
					strings.NewReader(fmt.Sprintf(`{"limit":"keep","key":"w%d-%d"}`, w, i)))
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					continue
				}
				answered.Add(1)
			}
		})
	}
	const reloads = 10
	for i := range reloads {
		content := reloadV2
		if i%2 == 1 {
			content = reloadV1
		}
		writeConfig(t, path, content)
		want := strconv.Itoa(i + 1)
		testkit.WaitFor(t, waitTimeout, "reload "+want, func() bool { return in.metric(t, "sluice_config_reloads_total") == want })
	}
	close(stop)
	wg.Wait()
	t.Logf("%d decisions answered during %d reloads", answered.Load(), reloads)
	if failed.Load() != 0 || answered.Load() == 0 {
		t.Errorf("%d requests failed and %d were answered during the reloads, want none failed", failed.Load(), answered.Load())
	}
}

// swapConfigMap writes content as the kubelet updates a mounted
// ConfigMap: into a new timestamped directory, then points the ..data
// symlink at it by renaming a new symlink over it (one atomic step), and
// removes the old directory. dir/sluice.yaml is a symlink to
// ..data/sluice.yaml throughout. mod is the file's modification time.
func swapConfigMap(t *testing.T, dir, version, content string, mod time.Time) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_12_03_"+version)
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFileAt(t, filepath.Join(ts, "sluice.yaml"), content, mod)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sluice.yaml")); err != nil {
		if err := os.Symlink(filepath.Join("..data", "sluice.yaml"), filepath.Join(dir, "sluice.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadConfigMapSwap reloads a configuration mounted as Kubernetes
// mounts a ConfigMap, through its symlinks. The new file has the size
// and modification time of the old one: only the file it resolves to
// differs, and the watcher must see that.
func TestReloadConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mod := time.Date(2026, 12, 3, 22, 0, 0, 0, time.UTC)
	swapConfigMap(t, dir, "1", reloadV1, mod)
	path := filepath.Join(dir, "sluice.yaml")
	in := startServe(t, "--config", path, "--watch", "20ms")
	if !in.known(t, "gone") {
		t.Fatal("limit gone is not served at start")
	}
	v2 := strings.Replace(reloadV1, "gone", "news", 1) // the same size
	swapConfigMap(t, dir, "2", v2, mod)
	testkit.WaitFor(t, waitTimeout, "the swapped ConfigMap to be loaded", func() bool { return in.known(t, "news") })
	if in.known(t, "gone") {
		t.Errorf("limit gone is still served after the swap")
	}
	swapConfigMap(t, dir, "3", reloadV1, mod)
	testkit.WaitFor(t, waitTimeout, "the second swap to be loaded", func() bool { return in.known(t, "gone") })
	if got := in.metric(t, "sluice_config_reloads_total"); got != "2" {
		t.Errorf("sluice_config_reloads_total = %q, want 2", got)
	}
}
