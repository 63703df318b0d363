package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want Info
		text []string
	}{
		{
			name: "stamped",
			bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
				{Key: "-trimpath", Value: "true"},
				{Key: "vcs.revision", Value: "e3183f5abcde"},
				{Key: "vcs.time", Value: "2026-12-03T22:08:53Z"},
				{Key: "vcs.modified", Value: "false"},
			}},
			want: Info{Version: "v1.4.0", Revision: "e3183f5abcde", Time: "2026-12-03T22:08:53Z", GoVersion: "go1.26.8"},
			text: []string{"sluice v1.4.0\n", "revision: e3183f5abcde\n", "time:     2026-12-03T22:08:53Z\n", "go:       go1.26.8\n"},
		},
		{
			name: "modified",
			bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261203220853-e3183f5abcde+dirty"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "e3183f5abcde"},
				{Key: "vcs.modified", Value: "true"},
			}},
			want: Info{Version: "v0.0.0-20261203220853-e3183f5abcde+dirty", Revision: "e3183f5abcde", Modified: true, GoVersion: "go1.26.8"},
			text: []string{"revision: e3183f5abcde (modified)\n"},
		},
		{
			name: "no VCS",
			bi:   debug.BuildInfo{GoVersion: "go1.26.8"},
			want: Info{Version: "(devel)", GoVersion: "go1.26.8"},
			text: []string{"sluice (devel)\n", "revision: unknown"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(&tc.bi)
			if got != tc.want {
				t.Errorf("From = %+v, want %+v", got, tc.want)
			}
			s := got.String()
			testkit.WantAll(t, "String()", s, tc.text...)
			if tc.want.Time == "" && strings.Contains(s, "time:") {
				t.Errorf("String() = %q shows a time the build does not carry", s)
			}
		})
	}
}

func TestReadNamesTheGoRelease(t *testing.T) {
	if got := Read(); !strings.HasPrefix(got.GoVersion, "go") || got.Version == "" {
		t.Errorf("Read() = %+v, want a version and a Go release", got)
	}
}
