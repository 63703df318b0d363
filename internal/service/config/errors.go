package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration file.
type Problem struct {
	// File is the name the configuration was loaded from.
	File string
	// Line and Column locate the problem in the file, counting from 1; they
	// are 0 when the problem has no place (an empty file, say).
	Line, Column int
	// Path is where in the document the problem is, such as
	// "limits.api-key.burst" or "proxy.rules[1].limits[0].key"; empty for
	// the document as a whole.
	Path string
	// Message says what is wrong.
	Message string
}

// String returns the problem as "file:line: path: message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is returned by Load and Parse for a configuration that is not
// valid. It lists every problem found, in the order of the file.
type Error struct {
	Problems []Problem
}

// Error returns the problems, one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}
