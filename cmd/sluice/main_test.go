package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// result is the outcome of one in-process run of sluice.
type result struct {
	err            error
	code           int
	stdout, stderr string
}

// runSluice runs sluice in-process with the given standard input and
// returns what it wrote and the exit status main would use.
func runSluice(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, stdin, &stdout, &stderr)
	code := exitCode(err, &stderr)
	return result{err: err, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// runOK runs sluice as runSluice does and fails t unless it exits 0.
func runOK(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	r := runSluice(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("sluice %s: exit %d, error %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.err, r.stdout, r.stderr)
	}
	return r
}

// runQuiet runs sluice as runOK does and fails t unless it also writes
// nothing to standard error.
func runQuiet(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	r := runOK(t, stdin, args...)
	if r.stderr != "" {
		t.Fatalf("sluice %s: stderr %q, want nothing", strings.Join(args, " "), r.stderr)
	}
	return r
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runSluice(t, nil, args...)
			if r.code != 0 || r.err != nil {
				t.Fatalf("sluice %v: exit %d, error %v; want 0, nil", args, r.code, r.err)
			}
			testkit.WantAll(t, fmt.Sprintf("sluice %v: stdout", args), r.stdout, "Usage:\n  sluice <command> [flags]", "  simulate   replay a trace", "  help ")
			if r.stderr != "" {
				t.Errorf("sluice %v: stderr = %q, want nothing", args, r.stderr)
			}
		})
	}
}

func TestHelpCommand(t *testing.T) {
	r := runSluice(t, nil, "help", "simulate")
	if r.code != 0 || r.stdout != simulateUsage {
		t.Errorf("sluice help simulate: exit %d, stdout %q; want 0 and the usage of simulate", r.code, r.stdout)
	}
	r = runSluice(t, nil, "simulate", "-h")
	if r.code != 0 || !errors.Is(r.err, flag.ErrHelp) || r.stdout != simulateUsage || r.stderr != "" {
		t.Errorf("sluice simulate -h: exit %d, error %v, stdout %q, stderr %q; want 0, flag.ErrHelp and the usage on stdout", r.code, r.err, r.stdout, r.stderr)
	}
}

func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stderr []string // substrings of stderr
	}{
		{"no command", nil, []string{"Usage:\n  sluice <command>"}},
		{"unknown command", []string{"simulat"}, []string{"sluice: unknown command \"simulat\"\nRun 'sluice help' for usage.\n"}},
		{"unknown flag before command", []string{"--limit", "5"}, []string{`sluice: unknown command "--limit"`}},
		{"help for unknown command", []string{"help", "serve2"}, []string{`sluice: help: unknown command "serve2"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runSluice(t, nil, tt.args...)
			var ue *usageError
			if r.code != 2 || !errors.As(r.err, &ue) {
				t.Fatalf("sluice %q: exit %d, error %v; want 2 and a usage error", tt.args, r.code, r.err)
			}
			testkit.WantAll(t, fmt.Sprintf("sluice %q: stderr", tt.args), r.stderr, tt.stderr...)
			if r.stdout != "" {
				t.Errorf("sluice %q: stdout = %q, want nothing", tt.args, r.stdout)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		want   int
		stderr string
	}{
		{"success", nil, 0, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"failure", errors.New("simulate: trace x: line 3: boom"), 1, "sluice: simulate: trace x: line 3: boom\n"},
		{"usage", usageErrorf("simulate", "simulate: --limit is required"), 2, "sluice: simulate: --limit is required\nRun 'sluice simulate -h' for usage.\n"},
		{"usage already shown", &usageError{err: errors.New("bad flag"), shown: true}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := exitCode(tt.err, &stderr); got != tt.want || stderr.String() != tt.stderr {
				t.Errorf("exitCode(%v) = %d and stderr %q, want %d and %q", tt.err, got, stderr.String(), tt.want, tt.stderr)
			}
		})
	}
}

// TestCommandsHaveUsage checks that every command can print its usage and
// that names are unique, so adding a command stays one line.
func TestCommandsHaveUsage(t *testing.T) {
	seen := make(map[string]bool)
	for _, c := range commands() {
		if c.name == "" || c.summary == "" || c.usage == "" || c.run == nil {
			t.Errorf("command %q is incomplete", c.name)
		}
		if seen[c.name] || c.name == "help" {
			t.Errorf("command name %q is taken", c.name)
		}
		seen[c.name] = true
	}
}

// TestEmbedsTZData checks that main imports time/tzdata, so that the
// time zones of calendar limits load on machines without a system time
// zone database.
func TestEmbedsTZData(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if imp.Path.Value == `"time/tzdata"` {
			return
		}
	}
	t.Error("main.go does not import time/tzdata")
}
