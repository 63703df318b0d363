package sluice_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// workRef matches a reference to a numbered item of the project's tracker
// or to a period of work on it, also when a line break splits it.
var workRef = regexp.MustCompile(`(?i)\bsessions?\s?[0-9]|this\s+session|\bissue\s?#?[0-9]+|results-?session|session[0-9]`)

// otherProject matches the end of a text that names another project's
// repository ("golang/go "), whose issues a reader can look up.
var otherProject = regexp.MustCompile(`[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\s$`)

// TestNoWorkReferences checks that no file of the repository refers to a
// numbered item of the project's tracker or to a period of work on the
// project: a reader cannot look them up, and git keeps the history they
// describe. CHANGELOG.md, which records that history, is exempt, and so is
// a reference to another project's issue that names the project.
func TestNoWorkReferences(t *testing.T) {
	skipExt := map[string]bool{".png": true, ".svg": true, ".jpg": true, ".gif": true, ".ico": true, ".pdf": true}
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == ".git" || path == filepath.Join("bench", "out") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || path == "CHANGELOG.md" || d.Name() == "go.sum" || skipExt[filepath.Ext(path)] {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b[:min(len(b), 8192)], 0) >= 0 {
			return nil // a binary, such as a built command
		}
		checked++
		text := string(b)
		for _, m := range workRef.FindAllStringIndex(text, -1) {
			if otherProject.MatchString(text[:m[0]]) {
				continue
			}
			line := 1 + strings.Count(text[:m[0]], "\n")
			t.Errorf("%s:%d: %q refers to the project's own work log; say what it means for the product", path, line, text[m[0]:m[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("checked %d files, want the repository's many", checked)
	}
}
