package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/sluicehq/sluice/internal/service/config"
)

const validateUsage = `Usage: sluice validate CONFIG...

Checks configuration files of sluice serve without starting anything. For
each valid file it prints "ok: FILE" on standard output; for each invalid
one it prints every problem on standard error, one per line:

  FILE:LINE: PATH: MESSAGE

such as "sluice.yaml:16: limits.api-key.burst: must be from 0 to
1000000000, got -1". A configuration that defines no limit (and no envoy
section) is valid but limits nothing: a "warning: " line says so. The
files a configuration names are checked too: listen.tls's certificate,
key and CA (they exist, parse, the key is the certificate's, the
certificate has not expired; a certificate that expires within 14 days is
a "warning: " line on standard error, and the file is still valid),
listen.tokens_file and the other secret files. A
CONFIG of - reads standard input. The exit status is 0 when every file is
valid, 1 when one is not (or cannot be read), and 2 for a wrong command
line.
`

// stdinName names standard input in validate's messages.
const stdinName = "<stdin>"

func runValidate(_ context.Context, s streams, args []string) error {
	fl := flag.NewFlagSet("validate", flag.ContinueOnError)
	if err := parseFlags(fl, "validate", "validate", validateUsage, args); err != nil {
		return err
	}
	if fl.NArg() == 0 {
		return usageErrorf("validate", "validate: name a configuration file")
	}
	bad := 0
	for _, path := range fl.Args() {
		if !validateOne(s, path) {
			bad++
		}
	}
	if bad > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// validateOne checks one file and reports it; it returns whether the file
// is valid.
func validateOne(s streams, path string) bool {
	name, data, err := path, []byte(nil), error(nil)
	if path == "-" {
		name = stdinName
		data, err = io.ReadAll(io.LimitReader(s.stdin, config.MaxFileSize+1))
	} else {
		_, data, err = readSource(path)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the name starts the line already
		}
		fmt.Fprintf(s.stderr, "%s: %v\n", name, err)
		return false
	}
	cfg, err := config.Parse(name, data, formats)
	if err == nil {
		_, err = buildEnvoy(cfg) // checked by formats: builds, as serve will
	}
	if err != nil {
		var ce *config.Error
		if !errors.As(err, &ce) {
			fmt.Fprintf(s.stderr, "%s: %v\n", name, err)
			return false
		}
		for _, p := range ce.Problems {
			fmt.Fprintln(s.stderr, p.String())
		}
		return false
	}
	for _, w := range cfg.Warnings(time.Now()) {
		fmt.Fprintf(s.stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(s.stdout, "ok: %s\n", name)
	return true
}
