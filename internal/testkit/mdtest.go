// This file reads the fenced code blocks of Markdown pages, for the
// tests that run what the docs show (configurations, gateway snippets,
// commands), so a page cannot drift from what was tested.

package testkit

import "strings"

// Block is one fenced code block of a Markdown text.
type Block struct {
	Lang   string // the fence's info string, trimmed
	Line   int    // the line of the block's first line of text, from 1
	Marker string // the HTML comment on the line before the fence, if any
	Text   string // the block's content, each line ending with a newline
}

// Blocks returns the fenced code blocks of md, in order. A fence is a line
// that starts with three backticks; a block runs to the next such line or
// to the end of md.
func Blocks(md string) []Block {
	var out []Block
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		b := Block{Lang: strings.TrimSpace(info), Line: i + 2}
		if i > 0 && strings.HasPrefix(lines[i-1], "<!--") {
			b.Marker = strings.TrimSpace(lines[i-1])
		}
		var text strings.Builder
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			text.WriteString(lines[i])
			text.WriteByte('\n')
		}
		b.Text = text.String()
		out = append(out, b)
	}
	return out
}
