// Package buildinfo says which build of sluice is running: the module
// version, the VCS revision and commit time the go command stamped into
// the binary, and the Go release that built it. `sluice version`, the
// sluice_build_info metric and GET /v1/status report the same Info.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is one build of sluice. A field the binary does not carry is
// empty: a build without VCS stamping (go build -buildvcs=false, or a
// tree without .git) has no Revision or Time.
type Info struct {
	// Version is the main module's version: a tag (v1.2.0), a
	// pseudo-version the go command derived from the VCS
	// (v0.0.0-20261203220853-e3183f5abcde, +dirty when Modified), or
	// "(devel)" without either.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from.
	Revision string `json:"revision,omitempty"`
	// Time is the commit time of Revision (RFC 3339), the only time a
	// release build carries: builds of one commit are byte for byte the
	// same whenever they run.
	Time string `json:"time,omitempty"`
	// Modified reports that the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the Go release that built the binary (go1.26.8).
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)", GoVersion: runtime.Version()}
	}
	return From(bi)
}

// From returns the Info that bi records.
func From(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String returns the lines `sluice version` prints.
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s\n", in.Version)
	rev := in.Revision
	if rev == "" {
		rev = "unknown (built without VCS information)"
	} else if in.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(&b, "revision: %s\n", rev)
	if in.Time != "" {
		fmt.Fprintf(&b, "time:     %s\n", in.Time)
	}
	fmt.Fprintf(&b, "go:       %s\n", in.GoVersion)
	return b.String()
}
