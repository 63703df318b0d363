package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"

	"github.com/sluicehq/sluice/internal/service/buildinfo"
)

const versionUsage = `Usage: sluice version [--json]
       sluice --version

Prints which build of sluice this is: the module version (a release tag,
or a pseudo-version derived from the commit), the VCS revision and its
commit time, whether the work tree had uncommitted changes, and the Go
release that built it. sluice serve reports the same as the
sluice_build_info metric and in GET /v1/status. A binary built without
VCS information (go build -buildvcs=false) has no revision or time.

Flags:
  --json   print one JSON object instead of lines
`

func runVersion(_ context.Context, s streams, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, "version", "version", versionUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("version", "version: unexpected argument %q", fs.Arg(0))
	}
	in := buildinfo.Read()
	if *asJSON {
		return json.NewEncoder(s.stdout).Encode(in)
	}
	_, err := io.WriteString(s.stdout, in.String())
	return err
}
