package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// syntaxSearchBudget bounds the bytes syntaxLine parses in all.
const syntaxSearchBudget = 8 << 20

// placeSyntax puts the YAML syntax errors among d's problems on the line
// syntaxLine finds in data, the file's text.
func (d *decoder) placeSyntax(data []byte) {
	for i := range d.problems {
		if p := &d.problems[i]; strings.HasPrefix(p.Message, "invalid YAML: ") {
			if line := syntaxLine(data); line > 0 {
				p.Line = line
				switch {
				case tabIndented(data, line):
					p.Message += " (a tab in the indentation: YAML indents with spaces only)"
				case indentationMessage(p.Message):
					here, above := indentations(data, line)
					p.Message += fmt.Sprintf(" (check the indentation: this line is indented by %d spaces, the line above by %d;"+
						" the keys of one mapping line up, and a nested mapping starts deeper, under a key that ends with ':')", here, above)
				}
			}
		}
	}
}

// syntaxLine returns the line (from 1) of data on which its YAML stops
// being valid: the line after the longest run of whole first lines that
// parses. It returns 0 when data parses, or when finding the line would
// parse more than syntaxSearchBudget bytes (a large file broken early).
//
// yaml.v3's own messages are not enough: for a parser error it gives the
// line, counted from 0, where the enclosing construct began (an unclosed
// "{" on line 2 is reported on line 1) and no line at all for one that
// began on the first line.
func syntaxLine(data []byte) int {
	// ends[i] is the length of the first i+1 lines.
	var ends []int
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	if parses(data) {
		return 0
	}
	spent := 0
	for n := len(ends) - 1; n > 0; n-- {
		prefix := data[:ends[n-1]]
		if spent += len(prefix); spent > syntaxSearchBudget {
			return 0
		}
		if parses(prefix) {
			return n + 1
		}
	}
	return 1
}

// parses reports whether data is a stream of valid YAML documents.
func parses(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// tabIndented reports whether line n (from 1) of data has a tab among its
// leading white space.
func tabIndented(data []byte, n int) bool {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return false
		}
		data = data[j+1:]
	}
	for _, b := range data {
		switch b {
		case '\t':
			return true
		case ' ':
			continue
		}
		return false
	}
	return false
}

// indentationMessage reports whether a syntax message of yaml.v3 is one
// that a line indented wrongly gives.
func indentationMessage(msg string) bool {
	for _, m := range []string{"did not find expected key", "mapping values are not allowed in this context",
		"did not find expected '-' indicator", "block sequence entries are not allowed in this context"} {
		if strings.HasSuffix(msg, m) {
			return true
		}
	}
	return false
}

// indentations returns the spaces that begin line n (from 1) of data and
// those of the nearest line above it that holds more than white space or
// a comment.
func indentations(data []byte, n int) (here, above int) {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return 0, 0
	}
	spaces := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	here = spaces(lines[n-1])
	for i := n - 2; i >= 0; i-- {
		if t := strings.TrimSpace(lines[i]); t != "" && !strings.HasPrefix(t, "#") {
			return here, spaces(lines[i])
		}
	}
	return here, 0
}
