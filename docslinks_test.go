package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks checks every relative link of the repository's Markdown
// files: the file it names exists, and so does the heading its #anchor
// names (as GitHub makes anchors from headings).
func TestDocLinks(t *testing.T) {
	var pages []string
	for _, pattern := range []string{"*.md", "docs/*.md", "examples/*.md", "examples/*/*.md", "deploy/*/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		b, err := os.ReadFile(page)
		if err != nil {
			return nil
		}
		anchors[page] = headingAnchors(string(b))
		return anchors[page]
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for n, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if inFence {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", page, n+1, target)
						continue
					}
				}
				checked++
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsOf(dest)[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading with the anchor #%s", page, n+1, target, dest, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links, want the docs' many", checked)
	}
}

// headingAnchors returns the anchors GitHub gives the headings of md: the
// heading's text in lower case, without punctuation but '-' and '_',
// spaces made '-'; a repeated anchor gets -1, -2, ...
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = b.String() + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	return out
}

// metricName matches a metric name written in Go source.
var metricName = regexp.MustCompile(`"(sluice_[a-z_]*[a-z])"`)

// TestMetricsDocumented checks that every metric the module's code names
// has a row in configuration.md's /metrics table, the one reference of
// them.
func TestMetricsDocumented(t *testing.T) {
	md, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(md), "### `/metrics`\n")
	table, _, _ = strings.Cut(table, "\n#")
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 {
			for _, m := range regexp.MustCompile("`(sluice_[a-z_]+)`").FindAllStringSubmatch(cells[1], -1) {
				documented[m[1]] = true
			}
		}
	}
	found := 0
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
			name := m[1]
			if strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum") {
				continue
			}
			found++
			if !documented[name] {
				t.Errorf("%s names the metric %s, which configuration.md's /metrics table lacks", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 15 {
		t.Errorf("found %d metric names in the code, want the service's many", found)
	}
}
