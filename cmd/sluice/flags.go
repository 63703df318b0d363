package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/service/config"
)

// helpRequest is the answer to -h, -help or --help: the command's usage,
// which run prints on standard output. It is flag.ErrHelp for errors.Is.
type helpRequest struct {
	usage string
}

func (h *helpRequest) Error() string        { return flag.ErrHelp.Error() }
func (h *helpRequest) Is(target error) bool { return target == flag.ErrHelp }

// parseFlags parses args into fs, the flags of command cmd (such as
// "serve" or "overrides set"; usageCmd is the command whose -h lists them).
// The flag package's own messages and usage are silenced: -h gives a
// *helpRequest carrying usage, and a flag that is unknown, lacks its value
// or has a bad one gives a one-line *usageError that names the flag as it
// was written, suggests the nearest flag for an unknown one and says what
// a value should look like.
func parseFlags(fs *flag.FlagSet, cmd, usageCmd, usage string, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &helpRequest{usage: usage}
	}
	return &usageError{err: fmt.Errorf("%s: %s", cmd, flagProblem(fs, args, err.Error())), cmd: usageCmd, brief: true}
}

// parseInterleaved parses args into fs as parseFlags does, with the
// flags anywhere among the other arguments, and returns those in order.
// After "--" every argument is one of them, so that one may start with
// '-'.
func parseInterleaved(fs *flag.FlagSet, cmd, usageCmd, usage string, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := parseFlags(fs, cmd, usageCmd, usage, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

// flagProblem rewrites one of the flag package's messages.
func flagProblem(fs *flag.FlagSet, args []string, msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		s := "unknown flag " + asWritten(args, name)
		if near := nearestFlag(fs, name); near != "" {
			return s + "; did you mean --" + near + "?"
		}
		return s
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return asWritten(args, name) + " needs a value"
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "5" for flag -watch: parse error
		if v, after, ok := cutQuoted(rest); ok {
			if nameAndWhy, ok := strings.CutPrefix(after, " for flag -"); ok {
				name, why, _ := strings.Cut(nameAndWhy, ": ")
				return fmt.Sprintf("%s %s: %s", asWritten(args, name), strconv.Quote(v), valueProblem(fs.Lookup(name), v, why))
			}
		}
	}
	return msg
}

// cutQuoted reads the Go-quoted string at the start of s.
func cutQuoted(s string) (value, rest string, ok bool) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", false
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err == nil
}

// valueProblem says what is wrong with the value v of flag fl, given the
// flag package's reason why.
func valueProblem(fl *flag.Flag, v, why string) string {
	if fl == nil {
		return why
	}
	g, _ := fl.Value.(flag.Getter)
	var got any
	if g != nil {
		got = g.Get()
	}
	switch got.(type) {
	case time.Duration:
		return durationProblem(v)
	case int, int64, uint, uint64:
		if why == "value out of range" {
			return "out of range"
		}
		return "not a whole number"
	case bool:
		return "not true or false"
	}
	return why
}

// durationProblem says why v is not a duration.
func durationProblem(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return fmt.Sprintf("a duration needs a unit, such as %[1]ss, %[1]sm or %[1]sms", v)
	}
	return "not a duration (Go syntax: 250ms, 1s, 1m, 24h)"
}

// asWritten returns flag name as the command line spelt it: -name or
// --name (--name when it cannot be found).
func asWritten(args []string, name string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		for _, dashes := range []string{"--", "-"} {
			rest, ok := strings.CutPrefix(a, dashes)
			if !ok {
				continue
			}
			if n, _, _ := strings.Cut(rest, "="); n == name {
				return dashes + name
			}
		}
	}
	return "--" + name
}

// nearestFlag returns the flag of fs closest to the unknown name, or "" if
// none is close: within two edits, or starting with name.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestDist := "", 3
	fs.VisitAll(func(fl *flag.Flag) {
		d := config.EditDistance(name, fl.Name)
		if len(name) >= 3 && strings.HasPrefix(fl.Name, name) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = fl.Name, d
		}
	})
	if bestDist >= len(name) {
		return ""
	}
	return best
}
