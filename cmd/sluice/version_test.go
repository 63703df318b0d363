package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/service/buildinfo"
)

// TestVersion checks sluice version, its --json form and --version, and
// that sluice serve reports the same build as sluice_build_info and in
// GET /v1/status. (A test binary carries no VCS stamp: test/deploy checks
// the revision and time of a release build.)
func TestVersion(t *testing.T) {
	want := buildinfo.Read()
	text := runSluice(t, nil, "version")
	if text.code != 0 || text.stdout != want.String() || !strings.Contains(text.stdout, "go:       "+runtime.Version()+"\n") {
		t.Errorf("sluice version = %d %q, want 0 %q", text.code, text.stdout, want.String())
	}
	for _, flag := range []string{"--version", "-version"} {
		if r := runSluice(t, nil, flag); r.code != 0 || r.stdout != text.stdout {
			t.Errorf("sluice %s = %d %q, want what sluice version prints", flag, r.code, r.stdout)
		}
	}
	js := runSluice(t, nil, "version", "--json")
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(js.stdout), &got); err != nil || got != want {
		t.Errorf("sluice version --json = %q (%v), want %+v", js.stdout, err, want)
	}
	if r := runSluice(t, nil, "version", "extra"); r.code != 2 || !strings.Contains(r.stderr, `unexpected argument "extra"`) {
		t.Errorf("sluice version extra = %d %q, want status 2 naming the argument", r.code, r.stderr)
	}

	in := startServe(t, "--http", "127.0.0.1:0")
	series := fmt.Sprintf(`sluice_build_info{go_version=%q,modified=%q,revision=%q,vcs_time=%q,version=%q}`,
		want.GoVersion, fmt.Sprint(want.Modified), want.Revision, want.Time, want.Version)
	if v := in.metric(t, series); v != "1" {
		t.Errorf("%s = %q, want 1", series, v)
	}
	code, _, body := in.do(t, "GET", "/v1/status", "")
	var st struct {
		Build *buildinfo.Info `json:"build"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st.Build == nil || *st.Build != want {
		t.Errorf("GET /v1/status = %d, build %+v (%v), want %+v", code, st.Build, err, want)
	}
	if !strings.Contains(in.stderr.String(), "msg=starting version="+want.Version) {
		t.Errorf("the log does not name the version at startup:\n%s", in.stderr)
	}
}
