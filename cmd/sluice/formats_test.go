package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/service/config"
)

// TestValidateConfigFixtures parses every fixture of package config's
// testdata/bad with the formats validate, serve and reload use, and
// compares the problems with the fixture's "# want:" lines: the checks of
// key sources, envoy sections, plan tables and Redis prefixes, which
// package config leaves to this one, report exactly what its tests expect.
func TestValidateConfigFixtures(t *testing.T) {
	t.Chdir("../../internal/service/config") // the fixtures name table files from there
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) < 50 {
		t.Fatalf("found %d fixtures (%v), want package config's", len(files), err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
				want = append(want, w)
			}
		}
		name := filepath.Base(file)
		_, err = config.Parse(name, data, formats)
		var ce *config.Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: Parse error %v, want problems", name, err)
			continue
		}
		got := make([]string, len(ce.Problems))
		for i, p := range ce.Problems {
			got[i] = p.String()
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: problems\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestBuildEnvoy: the envoy section that formats accepted builds the
// descriptor trees of the rate limit service; a file without one builds
// none.
func TestBuildEnvoy(t *testing.T) {
	cfg, err := config.Parse("e.yaml", []byte(envoyConfig("1000")), formats)
	if err != nil {
		t.Fatal(err)
	}
	envoy, err := buildEnvoy(cfg)
	if err != nil || envoy == nil || !slices.Equal(envoy.Domains(), []string{"edge"}) {
		t.Fatalf("buildEnvoy = %v, %v; want the domain edge", envoy, err)
	}
	cfg, err = config.Parse("none.yaml", []byte("limits: {}\n"), formats)
	if err != nil {
		t.Fatal(err)
	}
	if envoy, err := buildEnvoy(cfg); envoy != nil || err != nil {
		t.Errorf("buildEnvoy without an envoy section = %v, %v; want nil, nil", envoy, err)
	}
}
