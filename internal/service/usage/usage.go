// Package usage reads what a proxied request cost from its upstream's
// response: the tokens an LLM API reports having spent, for limits
// whose cost is known only after the response (the `usage` of a rule's
// limit in sluice serve's configuration, docs/llm-budgets.md).
//
// A Spec says where the response reports its usage: a header field
// (header:NAME, or the trailer field of that name when the header has
// none), or a count of the usage object of an OpenAI-compatible response
// (openai, openai:prompt, openai:completion), in a JSON body or in the
// last event that carries it of a server-sent event stream
// (text/event-stream, as `stream: true` answers).
//
// A Meter watches one response. It takes the response's body and passes
// every byte through as it is read, unchanged and unbuffered, looking at
// it on the way: its memory does not grow with the body. It inspects at
// most MaxJSONBytes of a JSON body and MaxEventBytes of the data of one
// event; what lies beyond passes through unread. A response it cannot
// read (not JSON, compressed, cut off) is never broken by it: it only
// reports why no usage was found.
package usage

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Spec says where a response reports its usage. The zero Spec is
// openai (usage.total_tokens).
type Spec struct {
	// header is the canonical name of the header field, for header:NAME;
	// empty for a count of the usage object, field.
	header string
	field  Field
}

// The spellings of the body specs, by Field.
var bodySpecs = [numFields]string{"openai", "openai:prompt", "openai:completion"}

// Specs lists the forms a Spec is written in, for messages.
const Specs = "header:NAME, openai (usage.total_tokens), openai:prompt (usage.prompt_tokens) or openai:completion (usage.completion_tokens)"

// Parse parses a spec as a configuration writes it:
//
//	header:NAME        the response header field NAME (or the trailer
//	                   field NAME when the header has none): a
//	                   non-negative decimal integer
//	openai             usage.total_tokens of an OpenAI-compatible response
//	openai:prompt      usage.prompt_tokens
//	openai:completion  usage.completion_tokens
func Parse(s string) (Spec, error) {
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		if !httpguts.ValidHeaderFieldName(name) {
			return Spec{}, fmt.Errorf("usage %q: %q is not a header field name", s, name)
		}
		return Spec{header: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	for f, b := range bodySpecs {
		if s == b {
			return Spec{field: Field(f)}, nil
		}
	}
	hint := ""
	for _, b := range bodySpecs {
		if strings.EqualFold(strings.ReplaceAll(s, "_", ":"), b) || strings.EqualFold(s, b) {
			hint = fmt.Sprintf("; did you mean %s?", b)
		}
	}
	return Spec{}, fmt.Errorf("unknown usage %q (want %s)%s", s, Specs, hint)
}

// MustParse is Parse for specs known to be good; it panics on an error.
func MustParse(s string) Spec {
	sp, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sp
}

// String returns the spec as Parse reads it.
func (s Spec) String() string {
	if s.header != "" {
		return "header:" + s.header
	}
	return bodySpecs[s.field]
}

// Header returns the name of the header field the spec reads, or "" for
// a spec that reads the body.
func (s Spec) Header() string { return s.header }

// ReadsBody reports whether the spec reads a JSON body or an event
// stream (a header spec reads the trailer, after the body, but not the
// body itself).
func (s Spec) ReadsBody() bool { return s.header == "" }

// parseCount reads a field's values as a count: exactly one value, a
// non-negative decimal integer that fits an int64, with optional
// surrounding whitespace.
func parseCount(vals []string) (int64, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	v := strings.Trim(vals[0], " \t")
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
