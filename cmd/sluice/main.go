// Command sluice is Sluice's command-line tool. Run `sluice help` for its
// commands and `sluice <command> -h` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	// The time zones of calendar limits (time_zone: Europe/Berlin) load
	// from the system's database, else from this copy built into the
	// binary, so sluice works on machines without one (docs/configuration.md
	// says which release of the tz database it is).
	_ "time/tzdata"
)

func main() {
	sigctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first SIGINT or SIGTERM cancels ctx (sluice serve then shuts down
	// gracefully). The default handling is restored before ctx is
	// cancelled, so that a second signal, however soon, ends the process
	// at once.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigctx.Done()
		stop()
		cancel()
	}()
	err := run(ctx, commandLine(os.Args[0], os.Args[1:]), os.Stdin, os.Stdout, os.Stderr)
	stop()
	cancel()
	os.Exit(exitCode(err, os.Stderr))
}

// ratelimitName is the name of envoyproxy/ratelimit's binary, which the
// deployments of Envoy Gateway run as /bin/ratelimit.
const ratelimitName = "ratelimit"

// commandLine returns the arguments of run for a process started as
// argv0 with args: sluice's own, or, for a binary installed as
// envoyproxy/ratelimit's /bin/ratelimit (the image's copy), `serve
// --envoy-env` followed by args, so that a container spec that runs
// /bin/ratelimit starts Sluice configured as the reference.
func commandLine(argv0 string, args []string) []string {
	if filepath.Base(argv0) == ratelimitName {
		return append([]string{"serve", "--envoy-env"}, args...)
	}
	return args
}

// streams are the standard streams a command reads and writes.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// command is one subcommand of sluice.
type command struct {
	name    string
	summary string // one line for `sluice help`
	usage   string // the text of `sluice <name> -h`
	run     func(ctx context.Context, s streams, args []string) error
}

// commands returns sluice's subcommands, in the order `sluice help` lists
// them. Adding a command is adding a line here.
func commands() []command {
	return []command{
		{"serve", "run the rate limit service: decision API, forward-auth, proxy, Envoy RLS", serveUsage, runServe},
		{"validate", "check configuration files without starting anything", validateUsage, runValidate},
		{"check", "ask a running service for a decision (a client for scripts)", checkUsage, runCheck},
		{"overrides", "list, set and remove a running service's per-key overrides", overridesUsage, runOverrides},
		{"simulate", "replay a trace of requests through the rate-limiting algorithms", simulateUsage, runSimulate},
		{"version", "print the version, VCS revision and time, and Go release of this build", versionUsage, runVersion},
	}
}

// run runs sluice with the given arguments (without the program name). It
// returns flag.ErrHelp when help was asked for and printed (on stdout), and a
// *usageError for a command line that is wrong.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	s := streams{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		writeUsage(stderr)
		return &usageError{err: errors.New("no command given"), shown: true}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			c, ok := lookup(rest[0])
			if !ok {
				return &usageError{err: fmt.Errorf("help: unknown command %q", rest[0])}
			}
			_, err := io.WriteString(stdout, c.usage)
			return err
		}
		writeUsage(stdout)
		return nil
	case "-version", "--version":
		name = "version"
	}
	c, ok := lookup(name)
	if !ok {
		return &usageError{err: fmt.Errorf("unknown command %q", name)}
	}
	err := c.run(ctx, s, rest)
	var h *helpRequest
	if errors.As(err, &h) {
		if _, werr := io.WriteString(stdout, h.usage); werr != nil {
			return werr
		}
	}
	return err
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, "sluice is the command-line tool of Sluice, an exact rate limiter.\n\n"+
		"Usage:\n  sluice <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "  help       show this text, or a command's: sluice help <command>\n\n"+
		"Run 'sluice <command> -h' for a command's flags.\n")
}

// usageError is a command line that is wrong: an unknown command, a bad
// flag, an invalid policy. sluice exits with status 2 for it.
type usageError struct {
	err error
	// shown reports that the message was already written to stderr (the
	// flag package does so for the flags it cannot parse).
	shown bool
	// cmd is the command whose flags are wrong, if any.
	cmd string
	// brief reports a message that stands on one line, without the hint
	// to run the command's -h.
	brief bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf returns a *usageError of command cmd with a formatted
// message.
func usageErrorf(cmd, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), cmd: cmd}
}

// exitError is a failure with its own exit status, such as a denial
// reported by sluice check (1) or a failure to reach the service (2).
type exitError struct {
	code int
	// err is reported on stderr; nil means the command already said what
	// happened.
	err error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode reports err on stderr and returns sluice's exit status: 0 for
// success or help, 2 for a wrong command line, an *exitError's own code,
// and 1 for any other failure.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "sluice: %v\n", ee.err)
		}
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		switch {
		case ue.shown:
		case ue.brief:
			fmt.Fprintf(stderr, "sluice: %v\n", err)
		default:
			hint := "sluice help"
			if ue.cmd != "" {
				hint = "sluice " + ue.cmd + " -h"
			}
			fmt.Fprintf(stderr, "sluice: %v\nRun '%s' for usage.\n", err, hint)
		}
		return 2
	}
	fmt.Fprintf(stderr, "sluice: %v\n", err)
	return 1
}
