package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"go.yaml.in/yaml/v3"
)

// Formats checks the values of a configuration whose format belongs to
// another package: key sources (package httplimit), the envoy section
// (package rls), plan table files (package plans), the Redis key prefix
// (package redisstore) and where a response reports its usage (package
// usage). Parse calls them as it walks the file, so that a
// value they refuse is a Problem at its place, reported with every other
// problem of the file; the Config keeps the values as written, and the
// packages that use them build from them (key functions, descriptor
// trees, plan tables, the store).
//
// cmd/sluice passes the real checks (its formats.go). A nil field accepts
// every value, for the tests of packages that need none of them.
type Formats struct {
	// KeySource checks a key source, such as "ip+header:X-API-Key", as
	// httplimit.ParseKey parses it with the body sources (form:NAME,
	// json:NAME).
	KeySource func(spec string) error
	// Envoy checks the envoy section, the YAML node of its value, and
	// returns its problems, each with its line, column and its path below
	// path (such as "envoy[0].descriptors[1].rate_limit.unit"); File is
	// filled in. A problem without a line is put on the envoy key's.
	Envoy func(section *yaml.Node, path string) []Problem
	// PlanTable checks the content of a plan table file, which may name
	// only the plans listed; data is at most MaxTableFileSize bytes. Its
	// error should name the file and the line.
	PlanTable func(file string, data []byte, plans []string) error
	// RedisPrefix checks store.redis.prefix; the error completes the
	// sentence `"PREFIX" ...`.
	RedisPrefix func(prefix string) error
	// Usage checks where a response reports its usage, a rule limit's
	// usage (package usage: header:NAME, openai, openai:prompt,
	// openai:completion).
	Usage func(spec string) error
}

// MaxTableFileSize is the largest plan table file Parse reads, as package
// plans does (plans.MaxFileSize).
const MaxTableFileSize = 64 << 20

// checked checks spec with check, one of the Formats (nil accepts every
// value), recording its error as a problem at n; it reports whether spec
// is good.
func (d *decoder) checked(check func(spec string) error, n *yaml.Node, path, spec string) bool {
	if check == nil {
		return true
	}
	if err := check(spec); err != nil {
		d.add(deref(n), path, "%v", err)
		return false
	}
	return true
}

// keyField decodes a key source: a non-empty string that
// Formats.KeySource accepts.
func (d *decoder) keyField(n *yaml.Node, path string) (string, bool) {
	s, ok := d.nonEmpty(n, path)
	if !ok || !d.checked(d.formats.KeySource, n, path, s) {
		return "", false
	}
	return s, true
}

// envoySection checks the envoy section, the value n of the key at, with
// Formats.Envoy. It reports whether the section is good.
func (d *decoder) envoySection(at, n *yaml.Node) bool {
	if d.formats.Envoy == nil {
		return true
	}
	problems := d.formats.Envoy(n, "envoy")
	for _, p := range problems {
		place := &yaml.Node{Line: p.Line, Column: p.Column}
		if p.Line == 0 {
			place = at
		}
		d.add(place, p.Path, "%s", p.Message)
	}
	return len(problems) == 0
}

// checkTableFile reads a plan table file and checks it with
// Formats.PlanTable, returning what is wrong with it, or "".
func (d *decoder) checkTableFile(path string, known []string) string {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "cannot read " + path + ": no such file"
		}
		return "cannot read the table: " + err.Error()
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTableFileSize+1))
	switch {
	case err != nil:
		return "cannot read the table: " + err.Error()
	case len(data) > MaxTableFileSize:
		return fmt.Sprintf("%s is larger than %d bytes", path, MaxTableFileSize)
	}
	if d.formats.PlanTable == nil {
		return ""
	}
	if err := d.formats.PlanTable(path, data, known); err != nil {
		return err.Error()
	}
	return ""
}

// redisPrefix checks store.redis.prefix with Formats.RedisPrefix,
// returning what is wrong, or nil.
func (d *decoder) redisPrefix(prefix string) error {
	if d.formats.RedisPrefix == nil {
		return nil
	}
	return d.formats.RedisPrefix(prefix)
}
