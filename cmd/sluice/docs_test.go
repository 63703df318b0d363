package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testkit"
)

// The markers a Markdown page puts on the line before a ```yaml block
// that is not a whole Sluice configuration. Every other ```yaml block of
// the docs is one, and TestValidateDocs checks it.
const (
	// markFragment marks a part of a Sluice configuration (one section,
	// an entry of a list), shown to explain it.
	markFragment = "<!-- fragment"
	// markOther marks another program's configuration (Traefik, Envoy,
	// Istio), as in "<!-- other: Envoy's bootstrap -->".
	markOther = "<!-- other:"
	// markFormat marks the description of a format, with placeholders
	// such as <a limit's name>: it need not even be YAML.
	markFormat = "<!-- format"
)

// docYAML is a YAML text of the docs or examples: a ```yaml block of a
// Markdown page, or a whole examples/*.yaml file.
type docYAML struct {
	where  string // file:line of its first line
	marker string // the marker on the line before the block, if any
	text   string
}

// docYAMLs returns the ```yaml blocks of the Markdown files of the
// repository's docs/, examples/ and README.md, and the YAML files of
// examples/.
func docYAMLs(t *testing.T) []docYAML {
	t.Helper()
	var out []docYAML
	md := []string{"../../README.md"}
	for _, root := range []string{"../../docs", "../../examples"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch filepath.Ext(path) {
			case ".md":
				md = append(md, path)
			case ".yaml", ".yml":
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				out = append(out, docYAML{where: path + ":1", text: string(b)})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range md {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, markdownYAML(path, string(b))...)
	}
	return out
}

// markdownYAML returns the ```yaml (or ```yml) blocks of the Markdown
// text md, read from path.
func markdownYAML(path, md string) []docYAML {
	var out []docYAML
	for _, f := range testkit.Blocks(md) {
		if f.Lang == "yaml" || f.Lang == "yml" {
			out = append(out, docYAML{where: path + ":" + strconv.Itoa(f.Line), marker: f.Marker, text: f.Text})
		}
	}
	return out
}

// fileRefRE finds the files a configuration names: NAME_file: PATH (a
// password, token, certificate or key) and file: PATH (a plan table).
var fileRefRE = regexp.MustCompile(`(?m)\b([a-z_]*file):\s*"?([A-Za-z0-9._/-]+)"?`)

// TestValidateDocs runs every YAML configuration shown in the docs
// (docs/, examples/, README.md) through `sluice validate`, as a reader
// who copies it into a file would: a block marked as a fragment or as
// another program's configuration is only checked to be YAML, and one
// marked as a format's description is not checked. The files a
// configuration names are made beside it: a secret for *_file keys,
// certificates and a key for TLS, and plan tables from examples/.
func TestValidateDocs(t *testing.T) {
	t.Parallel()
	pki := testkit.SelfSigned(t, "sluice docs test")
	checked := 0
	for _, y := range docYAMLs(t) {
		if strings.HasPrefix(y.marker, markFormat) {
			continue
		}
		var tree yaml.Node
		if err := yaml.Unmarshal([]byte(y.text), &tree); err != nil {
			t.Errorf("%s: not YAML: %v\n%s", y.where, err, y.text)
			continue
		}
		switch {
		case strings.HasPrefix(y.marker, markFragment), strings.HasPrefix(y.marker, markOther):
			continue
		case strings.HasPrefix(y.marker, "<!-- replay: "):
			// A whole configuration of the replay example (validated here,
			// run by TestDocsReplayExample).
		case y.marker != "":
			t.Errorf("%s: unknown marker %q before a YAML block (want %q, %q or %q)", y.where, y.marker, markFragment+" -->", markOther+" NAME -->", markFormat+" -->")
			continue
		}
		checked++
		dir := t.TempDir()
		for _, m := range fileRefRE.FindAllStringSubmatch(y.text, -1) {
			writeReferenced(t, dir, m[1], m[2], pki)
		}
		file := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(file, []byte(y.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := runSluice(t, nil, "validate", file); r.code != 0 {
			t.Errorf("%s: not a valid configuration (mark a fragment with %q, another program's with %q):\n%s\n%s",
				y.where, markFragment+" -->", markOther+" NAME -->", y.text, r.stderr)
		}
	}
	if checked < 10 {
		t.Errorf("checked %d configurations in the docs, want at least 10: are the ```yaml blocks still found?", checked)
	}
}

// writeReferenced makes the file a configuration names with key, at the
// relative path name in dir: a plan table is copied from examples/, a
// certificate or key comes from pki (a self-signed certificate, usable as
// CA, server and client certificate), anything else is a secret.
func writeReferenced(t *testing.T, dir, key, name string, pki *testkit.Issued) {
	t.Helper()
	if filepath.IsAbs(name) || strings.Contains(name, "..") {
		t.Fatalf("the docs name the file %q: use a path relative to the configuration", name)
	}
	var content []byte
	switch key {
	case "ca_file", "cert_file", "client_ca_file":
		content = pki.CertPEM
	case "key_file":
		content = pki.KeyPEM
	case "file":
		b, err := os.ReadFile(filepath.Join("../../examples", name))
		if err != nil {
			t.Fatalf("the docs name the table %q, which examples/ does not have: %v", name, err)
		}
		content = b
	default:
		content = []byte("0123456789abcdef0123456789abcdef\n")
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
}

// docBlocks returns the text of every fenced block of language lang in
// the Markdown file path, in order.
func docBlocks(t *testing.T, path, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range testkit.Blocks(string(b)) {
		if f.Lang == lang {
			out = append(out, f.Text)
		}
	}
	return out
}

// serveDoc runs sluice serve with a configuration of the docs, its
// listeners moved to free ports and the files it names made beside it.
func serveDoc(t *testing.T, y string) *instance {
	t.Helper()
	for _, addr := range []string{"http: 127.0.0.1:8080", "grpc: 127.0.0.1:8081"} {
		name, _, _ := strings.Cut(addr, ":")
		y = strings.Replace(y, addr, name+`: "127.0.0.1:0"`, 1)
	}
	dir := t.TempDir()
	for _, m := range fileRefRE.FindAllStringSubmatch(y, -1) {
		writeReferenced(t, dir, m[1], m[2], testkit.SelfSigned(t, "sluice docs test"))
	}
	return startServe(t, "--config", writeConfig(t, filepath.Join(dir, "sluice.yaml"), y))
}

// curlCheckRE finds the body of a documented `curl ... /v1/check -d '...'`.
var curlCheckRE = regexp.MustCompile(`curl -s (?:-X POST )?localhost:8080/v1/check -d '([^']*)'`)

// TestDocsCheckExamples sends the first POST /v1/check examples of
// docs/configuration.md and docs/plans.md to a service running the
// configuration each page shows, and compares the answers with the ones
// printed there.
func TestDocsCheckExamples(t *testing.T) {
	t.Parallel()
	t.Run("configuration.md", func(t *testing.T) {
		t.Parallel()
		const doc = "../../docs/configuration.md"
		in := serveDoc(t, docBlocks(t, doc, "yaml")[0]) // "A complete example"
		var req, want string
		for _, sh := range docBlocks(t, doc, "sh") {
			if m := curlCheckRE.FindStringSubmatch(sh); m != nil && strings.Contains(m[1], `"limit":"api-key"`) {
				req = m[1]
				break
			}
		}
		for _, js := range docBlocks(t, doc, "json") {
			if strings.HasPrefix(js, `{"allowed":true,"limit":10,`) {
				want = js
				break
			}
		}
		if req == "" || want == "" {
			t.Fatalf("%s: no /v1/check example of api-key with its answer", doc)
		}
		if code, _, got := in.do(t, "POST", "/v1/check", req); code != 200 || got != want {
			t.Errorf("POST /v1/check %s = %d %s, the page says %s", req, code, got, want)
		}
	})
	t.Run("plans.md", func(t *testing.T) {
		t.Parallel()
		const doc = "../../docs/plans.md"
		in := serveDoc(t, docBlocks(t, doc, "yaml")[0]) // "Plans"
		var req, want string
		for _, c := range docBlocks(t, doc, "console") {
			if m := curlCheckRE.FindStringSubmatch(c); m != nil {
				req = m[1]
				_, out, _ := strings.Cut(c, "\n")
				want = out
				break
			}
		}
		if req == "" {
			t.Fatalf("%s: no /v1/check example", doc)
		}
		code, _, got := in.do(t, "POST", "/v1/check", req)
		if code != 200 {
			t.Fatalf("POST /v1/check %s = %d %s", req, code, got)
		}
		// The sliding window's reset_after depends on where in the hour the
		// request falls (between one and two hours); the rest is exact.
		var g, w map[string]any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatalf("%s: the printed answer is not JSON: %v\n%s", doc, err, want)
		}
		for _, m := range []map[string]any{g, w} {
			res, _ := m["results"].([]any)
			if len(res) == 0 {
				t.Fatalf("no results in %v", m)
			}
			first := res[0].(map[string]any)
			if ra, _ := first["reset_after_ms"].(float64); ra <= 3_600_000 || ra > 7_200_000 {
				t.Errorf("results[0].reset_after_ms = %v, want within (1h, 2h]", first["reset_after_ms"])
			}
			first["reset_after_ms"] = "(1h, 2h]"
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("POST /v1/check %s = %s, the page says %s", req, got, want)
		}
	})
}

// rateLimitTRE finds the documented RateLimit field of a sliding window's
// first request, and the second of the minute it was sent at.
var (
	rateLimitTRE = regexp.MustCompile(`RateLimit: "per-ip";r=99;t=(\d+)`)
	intoMinuteRE = regexp.MustCompile(`(\d+) s into a minute`)
)

// TestDocsRateLimitT checks what docs/configuration.md says of the t of
// the RateLimit field for a sliding window of 60 s: its example is the
// first request's t at the second of the minute the page gives, above the
// window, and the service running the page's configuration answers a
// first request with that t for the second it is at.
func TestDocsRateLimitT(t *testing.T) {
	t.Parallel()
	const doc = "../../docs/configuration.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	m, into := rateLimitTRE.FindStringSubmatch(page), intoMinuteRE.FindStringSubmatch(page)
	if m == nil || into == nil {
		t.Fatalf("%s: no RateLimit example of per-ip's first request and the second it was sent at", doc)
	}
	docT, _ := strconv.Atoi(m[1])
	sec, _ := strconv.Atoi(into[1])
	// The window's count weighs until the end of the next window.
	if want := 60 - sec + 60; docT != want || docT <= 60 {
		t.Errorf("%s: per-ip's first request %d s into a minute reads t=%d, want t=%d (above w=60)", doc, sec, docT, want)
	}

	in := serveDoc(t, docBlocks(t, doc, "yaml")[0]) // "A complete example"
	tAt := func(now time.Time) int64 {
		end := now.Truncate(time.Minute).Add(2 * time.Minute)
		return int64((end.Sub(now) + time.Second - 1) / time.Second)
	}
	before := tAt(time.Now())
	code, h, body := in.do(t, "POST", "/v1/check", `{"limit":"per-ip","key":"first"}`)
	after := tAt(time.Now())
	if code != 200 {
		t.Fatalf("POST /v1/check = %d %s", code, body)
	}
	got := h.Get("RateLimit")
	var live int64
	if _, err := fmt.Sscanf(got, `"per-ip";r=99;t=%d`, &live); err != nil || (live != before && live != after) || live <= 60 {
		t.Errorf("RateLimit of a first request on per-ip = %q, want t=%d (or %d): the end of the next minute", got, before, after)
	}
}

// exitClaimRE finds a shell line of the docs that says what exit statuses
// its command gives, as in "# exit status 0 allowed, 1 denied, 2 error".
var exitClaimRE = regexp.MustCompile(`^(.*?)#\s*exit(?: status)? (\d) allowed, (\d) denied, (\d) error`)

// TestDocsExitStatus checks the command lines of the README and docs/
// that say which exit status means what: none runs through go run (which
// exits 1 for any failure of the program, whatever status it chose), the
// README builds the binary it runs, and each status is what sluice check
// gives against the built-in default: allowed, denied once the limit
// demo is spent, and an error for a service that cannot be reached.
func TestDocsExitStatus(t *testing.T) {
	t.Parallel()
	docs := []string{"../../README.md"}
	if more, err := filepath.Glob("../../docs/*.md"); err == nil {
		docs = append(docs, more...)
	}
	var claims [][]string
	for _, doc := range docs {
		for _, block := range docBlocks(t, doc, "sh") {
			built := false
			for line := range strings.SplitSeq(block, "\n") {
				line = strings.TrimSpace(line)
				built = built || line == "go build -o sluice ./cmd/sluice"
				m := exitClaimRE.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				switch cmd := strings.TrimSpace(m[1]); {
				case strings.HasPrefix(cmd, "go run"):
					t.Errorf("%s: %q says what exit statuses mean, but go run exits 1 for any failure: show the built binary", doc, line)
				case strings.HasPrefix(cmd, "./sluice ") && !built:
					t.Errorf("%s: %q runs ./sluice, which the block does not build (go build -o sluice ./cmd/sluice)", doc, line)
				case strings.HasPrefix(cmd, "./sluice check "):
					claims = append(claims, append([]string{doc}, m[1:]...))
				default:
					t.Errorf("%s: %q: an exit status claim of a command this test does not run", doc, line)
				}
			}
		}
	}
	if len(claims) == 0 {
		t.Fatal("no documented ./sluice check line with its exit statuses")
	}

	in := startServe(t, "--http", "127.0.0.1:0") // the built-in default: demo, 10 per minute
	for _, c := range claims {
		doc, args := c[0], strings.Fields(c[1])[1:]
		want := map[string]string{"allowed": c[2], "denied": c[3], "error": c[4]}
		run := func(server string) string {
			r := runSluice(t, nil, append(slices.Clip(args), "--server", server)...)
			return strconv.Itoa(r.code)
		}
		if got := run(in.http); got != want["allowed"] {
			t.Errorf("%s: sluice %s: exit status %s when allowed, the page says %s", doc, strings.Join(args, " "), got, want["allowed"])
		}
		for range 10 {
			run(in.http)
		}
		if got := run(in.http); got != want["denied"] {
			t.Errorf("%s: sluice %s: exit status %s when denied, the page says %s", doc, strings.Join(args, " "), got, want["denied"])
		}
		if got := run("127.0.0.1:1"); got != want["error"] {
			t.Errorf("%s: sluice %s: exit status %s for a service that cannot be reached, the page says %s", doc, strings.Join(args, " "), got, want["error"])
		}
	}
}
