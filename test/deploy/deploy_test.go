package deploy

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// dockerOut is the path the Dockerfile's build stage writes the binary
// to; the tests write theirs elsewhere.
const dockerOut = "/out/sluice"

// dockerfile is what the tests read of the Dockerfile.
type dockerfile struct {
	stages     []string // the image of each FROM, in order
	build      string   // the RUN command that writes dockerOut
	user       string
	expose     []int
	entrypoint []string
	cmd        []string
	copies     []string // COPY sources of the final stage
}

// readDockerfile parses the instructions the tests check (continuation
// lines joined, comments dropped).
func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	var lines []string
	sc := bufio.NewScanner(f)
	cur := ""
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	for _, l := range lines {
		op, arg, _ := strings.Cut(l, " ")
		arg = strings.TrimSpace(arg)
		execForm := func() []string {
			var v []string
			if err := json.Unmarshal([]byte(arg), &v); err != nil {
				t.Errorf("Dockerfile: %s %s is not in exec form (a JSON array): the image has no shell to run it", op, arg)
			}
			return v
		}
		switch strings.ToUpper(op) {
		case "FROM":
			image, _, _ := strings.Cut(arg, " ")
			d.stages = append(d.stages, image)
			d.copies = nil
		case "RUN":
			if strings.Contains(arg, dockerOut) {
				d.build = arg
			}
		case "USER":
			d.user = arg
		case "EXPOSE":
			for p := range strings.FieldsSeq(arg) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("Dockerfile: EXPOSE %s: %v", p, err)
				}
				d.expose = append(d.expose, n)
			}
		case "ENTRYPOINT":
			d.entrypoint = execForm()
		case "CMD":
			d.cmd = execForm()
		case "COPY":
			fields := strings.Fields(arg)
			if len(fields) >= 2 && !strings.HasPrefix(fields[0], "--from") {
				d.copies = append(d.copies, fields[0])
			}
		}
	}
	return d
}

// dockerfileBuildCommand returns the Dockerfile's RUN command that builds
// the binary.
func dockerfileBuildCommand(t *testing.T, path string) string {
	t.Helper()
	d := readDockerfile(t, path)
	if d.build == "" {
		t.Fatalf("%s has no RUN command writing %s", path, dockerOut)
	}
	return d.build
}

// release is one release build of the committed HEAD.
type release struct {
	rev string // the commit built
	bin string // the binary
	src string // the checkout it was built in
}

var (
	releaseOnce  sync.Once
	releaseBuild release
)

// dockerBuild builds HEAD with the Dockerfile's build command, once per
// test process, in a fresh checkout, and returns it. Uncommitted changes
// are not in it: the tests check what a commit builds.
func dockerBuild(t *testing.T) release {
	t.Helper()
	root := repoRoot(t)
	releaseOnce.Do(func() {
		rev := git(t, root, "rev-parse", "HEAD")
		src := checkout(t, root, rev)
		cmd := dockerfileBuildCommand(t, filepath.Join(root, "Dockerfile"))
		out := filepath.Join(t.TempDir(), "sluice")
		runIn(t, src, buildTimeout, nil, "sh", "-c", strings.ReplaceAll(cmd, dockerOut, out))
		releaseBuild = release{rev: rev, bin: out, src: src}
	})
	if releaseBuild.bin == "" {
		t.Fatal("the release build failed (see the first test that built it)")
	}
	return releaseBuild
}

// manifests returns every document of deploy/kubernetes/*.yaml by kind
// and name ("Deployment/sluice").
func manifests(t *testing.T, root string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes (%v)", err)
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(fh)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%s: %v", f, err)
				}
				break
			}
			kind, _ := doc["kind"].(string)
			name, _ := get(doc, "metadata", "name").(string)
			if kind == "Kustomization" {
				continue
			}
			if kind == "" || name == "" {
				t.Errorf("%s: a document without kind or metadata.name", f)
			}
			out[kind+"/"+name] = doc
		}
		fh.Close()
	}
	return out
}

// get walks v by map keys (string) and list indexes (int); nil when a
// step is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// listenPorts returns the ports of listen.http, listen.grpc and
// listen.admin of a sluice.yaml.
func listenPorts(t *testing.T, what string, data []byte) map[string]int {
	t.Helper()
	var c struct {
		Listen map[string]string `yaml:"listen"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	out := map[string]int{}
	for name, addr := range c.Listen {
		if name == "tls" {
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			t.Fatalf("%s: listen.%s = %q", what, name, addr)
		}
		if host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("%s: listen.%s = %q listens on %s alone: a container must listen on every interface", what, name, addr, host)
		}
		out[name] = n
	}
	return out
}

// TestDockerfile checks the image's shape: a build stage and a final
// stage on a static image without a shell, a non-root user, sluice serve
// as the entry point, the configuration it copies and the ports it
// listens on declared.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	d := readDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(d.stages) < 2 {
		t.Errorf("Dockerfile has %d stages, want a build stage and the image", len(d.stages))
	}
	final := d.stages[len(d.stages)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("the image is built FROM %s, want distroless static (no shell, CA certificates and time zones)", final)
	}
	if d.user == "" || d.user == "root" || strings.HasPrefix(d.user, "0:") || d.user == "0" {
		t.Errorf("USER %q, want a non-root user", d.user)
	}
	if !slices.Equal(d.entrypoint, []string{"/usr/local/bin/sluice", "serve"}) {
		t.Errorf("ENTRYPOINT %q, want sluice serve", d.entrypoint)
	}
	if !strings.Contains(d.build, "scripts/release.sh") {
		t.Errorf("the build command %q does not use scripts/release.sh, the reproducible release build", d.build)
	}
	i := slices.Index(d.cmd, "--config")
	if i < 0 || i+1 >= len(d.cmd) {
		t.Fatalf("CMD %q gives no --config", d.cmd)
	}
	if !slices.Contains(d.copies, "deploy/sluice.yaml") {
		t.Errorf("the image does not copy deploy/sluice.yaml (COPY sources %q)", d.copies)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, p := range listenPorts(t, "deploy/sluice.yaml", data) {
		want = append(want, p)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(d.expose))
	if !slices.Equal(got, want) {
		t.Errorf("EXPOSE %v, want the ports deploy/sluice.yaml listens on, %v", got, want)
	}
}

// deployment returns the Deployment's pod spec and its sluice container.
func deployment(t *testing.T, ms map[string]map[string]any) (pod, ctr map[string]any) {
	t.Helper()
	d := ms["Deployment/sluice"]
	if d == nil {
		t.Fatal("no Deployment sluice in deploy/kubernetes")
	}
	pod, _ = get(d, "spec", "template", "spec").(map[string]any)
	ctr, _ = get(pod, "containers", 0).(map[string]any)
	if ctr == nil {
		t.Fatal("the Deployment has no container")
	}
	return pod, ctr
}

// configMapFile returns the sluice.yaml of the ConfigMap.
func configMapFile(t *testing.T, ms map[string]map[string]any) []byte {
	t.Helper()
	s, _ := get(ms["ConfigMap/sluice"], "data", "sluice.yaml").(string)
	if s == "" {
		t.Fatal("no ConfigMap sluice with a sluice.yaml")
	}
	return []byte(s)
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestManifests checks the Kubernetes manifests against each other and
// against the configuration they mount: ports, probes, the mount of the
// ConfigMap (a directory, so that its updates arrive), the security
// context, resources, the Service and the PodDisruptionBudget.
func TestManifests(t *testing.T) {
	root := repoRoot(t)
	ms := manifests(t, root)
	pod, ctr := deployment(t, ms)
	ports := listenPorts(t, "the ConfigMap's sluice.yaml", configMapFile(t, ms))

	named := map[string]int{}
	for _, p := range get(ctr, "ports").([]any) {
		named[get(p, "name").(string)] = get(p, "containerPort").(int)
	}
	for name, port := range ports {
		if named[name] != port {
			t.Errorf("container port %q = %d, want %d (listen.%s)", name, named[name], port, name)
		}
	}
	for _, probe := range []struct{ field, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		hg := get(ctr, probe.field, "httpGet")
		if get(hg, "path") != probe.path || get(hg, "port") != "http" {
			t.Errorf("%s = %v, want GET %s on port http", probe.field, hg, probe.path)
		}
	}

	args := strs(get(ctr, "args"))
	cfgPath, ok := flagValue(args, "config")
	if !ok {
		t.Fatalf("args %q give no --config", args)
	}
	var mounted bool
	for _, m := range get(ctr, "volumeMounts").([]any) {
		if get(m, "mountPath") == filepath.Dir(cfgPath) {
			mounted = true
			if get(m, "subPath") != nil {
				t.Errorf("the configuration is mounted with subPath: Kubernetes never updates such a mount, so it would not reload")
			}
			vol := get(m, "name")
			for _, v := range get(pod, "volumes").([]any) {
				if get(v, "name") == vol && get(v, "configMap", "name") != "sluice" {
					t.Errorf("volume %v is not the ConfigMap sluice", vol)
				}
			}
		}
	}
	if !mounted || filepath.Base(cfgPath) != "sluice.yaml" {
		t.Errorf("--config %s is not sluice.yaml in a mounted directory", cfgPath)
	}

	sc := get(ctr, "securityContext")
	if get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false ||
		!slices.Equal(strs(get(sc, "capabilities", "drop")), []string{"ALL"}) {
		t.Errorf("container securityContext = %v, want a read-only root file system, no privilege escalation, ALL capabilities dropped", sc)
	}
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("the pod does not require a non-root user")
	}
	for _, r := range []string{"cpu", "memory"} {
		if get(ctr, "resources", "requests", r) == nil {
			t.Errorf("no %s request", r)
		}
	}

	// The grace period covers the drain delay, the shutdown timeout and
	// the 6 s for cut requests to release their leases.
	var need time.Duration = 6 * time.Second
	for _, f := range []string{"drain-delay", "shutdown-timeout"} {
		v, ok := flagValue(args, f)
		d, err := time.ParseDuration(v)
		if !ok || err != nil {
			t.Errorf("args give no --%s (%v)", f, err)
		}
		need += d
	}
	if g, _ := get(pod, "terminationGracePeriodSeconds").(int); time.Duration(g)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d, want more than %v", g, need)
	}
	dd, _ := flagValue(args, "drain-delay")
	drain, _ := time.ParseDuration(dd)
	period, _ := get(ctr, "readinessProbe", "periodSeconds").(int)
	fails, _ := get(ctr, "readinessProbe", "failureThreshold").(int)
	if time.Duration(period*fails)*time.Second >= drain {
		t.Errorf("readiness fails after %d × %ds, not within --drain-delay %v: the pod would stop accepting before it leaves the endpoints", fails, period, drain)
	}

	labels := get(ms["Deployment/sluice"], "spec", "template", "metadata", "labels").(map[string]any)
	matches := func(sel any) bool {
		m, ok := sel.(map[string]any)
		if !ok || len(m) == 0 {
			return false
		}
		for k, v := range m {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	svc := ms["Service/sluice"]
	if !matches(get(svc, "spec", "selector")) {
		t.Errorf("the Service's selector does not select the Deployment's pods")
	}
	seen := map[string]bool{}
	for _, p := range get(svc, "spec", "ports").([]any) {
		target, _ := get(p, "targetPort").(string)
		if _, ok := named[target]; !ok {
			t.Errorf("Service port %v targets %q, which the container does not name", get(p, "name"), target)
		}
		seen[target] = true
	}
	for name := range ports {
		if !seen[name] {
			t.Errorf("the Service has no port for listen.%s", name)
		}
	}
	pdb := ms["PodDisruptionBudget/sluice"]
	if !matches(get(pdb, "spec", "selector", "matchLabels")) {
		t.Errorf("the PodDisruptionBudget does not select the Deployment's pods")
	}
	if r, _ := get(ms["Deployment/sluice"], "spec", "replicas").(int); r < 2 {
		t.Errorf("replicas %d: a PodDisruptionBudget of one replica blocks every drain", r)
	}
}

// TestImageBinary builds the binary with the Dockerfile's build command,
// checks that it is static, and runs it as the Deployment does: with the
// ConfigMap's sluice.yaml (its Redis at a private server, its listeners
// on free loopback ports) and the Deployment's arguments. It must pass
// the readiness and liveness probes, and on SIGTERM turn /readyz to 503
// and exit 0.
func TestImageBinary(t *testing.T) {
	root := repoRoot(t)
	rel := dockerBuild(t)

	f, err := elf.Open(rel.bin)
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := f.ImportedLibraries()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is not static", p.Type)
		}
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	f.Close()

	// The image's own configuration is valid.
	if out, err := exec.Command(rel.bin, "validate", filepath.Join(root, "deploy", "sluice.yaml")).CombinedOutput(); err != nil {
		t.Errorf("sluice validate deploy/sluice.yaml: %v\n%s", err, out)
	}

	ms := manifests(t, root)
	_, ctr := deployment(t, ms)
	srv := testkit.StartRedis(t)
	cfg := strings.ReplaceAll(string(configMapFile(t, ms)), `"redis:6379"`, `"`+srv.Addr+`"`)
	if !strings.Contains(cfg, srv.Addr) {
		t.Fatal(`the ConfigMap's Redis is not at "redis:6379"`)
	}
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "sluice.yaml"), cfg)
	if out, err := exec.Command(rel.bin, "validate", filepath.Join(dir, "sluice.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("sluice validate of the ConfigMap's sluice.yaml: %v\n%s", err, out)
	}
	var args []string
	for _, a := range strs(get(ctr, "args")) {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			a = "--config=" + filepath.Join(dir, filepath.Base(v))
		}
		args = append(args, a)
	}
	readyFile := filepath.Join(dir, "ready.json")
	args = append(append([]string{"serve"}, args...), "--http=127.0.0.1:0", "--grpc=127.0.0.1:0", "--admin=127.0.0.1:0", "--ready-file="+readyFile)
	log := &testkit.Log{}
	cmd := exec.Command(rel.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	p := testkit.StartProc(t, "sluice", cmd)
	p.StopWhenDone(t, time.Minute, log)
	ready := testkit.WaitReady(t, "sluice", readyFile, time.Minute, p.Ended, log)
	if ready.GRPC == "" || ready.Admin == "" {
		t.Errorf("listeners %+v, want HTTP, gRPC and admin", ready)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		path := get(ctr, probe, "httpGet", "path").(string)
		resp, err := http.Get("http://" + ready.HTTP + path)
		if err != nil {
			t.Fatalf("%s %s: %v", probe, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s GET %s = %d, want 200", probe, path, resp.StatusCode)
		}
	}
	if !strings.Contains(log.String(), `"msg":"starting"`) || !strings.Contains(log.String(), `"revision":"`+rel.rev+`"`) {
		t.Errorf("the log does not name the build's version and revision %s:\n%s", rel.rev, log)
	}

	p.Signal(syscall.SIGTERM)
	testkit.WaitFor(t, time.Minute, "/readyz to answer 503 after SIGTERM", func() bool {
		resp, err := http.Get("http://" + ready.HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	if !p.Wait(time.Minute) {
		t.Fatal("sluice did not stop within a minute of SIGTERM")
	}
	if err := p.Err(); err != nil {
		t.Errorf("sluice exited with %v after SIGTERM, want status 0\n%s", err, log)
	}
}
