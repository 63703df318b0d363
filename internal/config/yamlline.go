package config

import (
	"bytes"
	"errors"
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
				if tabIndented(data, line) {
					p.Message += " (a tab in the indentation: YAML indents with spaces only)"
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
