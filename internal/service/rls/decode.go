package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxVisits bounds the YAML nodes one decode looks at, so that aliases
// cannot make a small file expand into an enormous one.
const maxVisits = 1 << 20

var tooLarge = fmt.Sprintf("the envoy section is too large: its aliases expand to more than %d nodes", maxVisits)

// Decode reads the envoy section from its YAML node, a sequence of domain
// documents, strictly: an unknown key, a key given twice, a value of the
// wrong type, a missing requests_per_unit or a unit_multiplier of 0 is a
// problem. It then validates the result as Validate does and returns
// every problem found, sorted by place, each with its line and column and
// its path below path (such as "envoy[0].descriptors[1].rate_limit.unit").
// A nil or null node is an empty section. The section's mapping form
// (options and domains) is read too; DecodeSection returns its options.
//
// The domains are returned even when there are problems, for messages;
// use them only when there are none.
func Decode(node *yaml.Node, path string) ([]Domain, []Problem) {
	s, ps := DecodeSection(node, path)
	return s.Domains, ps
}

// DecodeSection reads the envoy section as Decode does, in either of its
// forms: a list of domain documents, or a mapping of the service's
// options (response_headers) with the list under domains. Paths of the
// domains are path[i] in the first form and path.domains[i] in the
// second.
func DecodeSection(node *yaml.Node, path string) (Section, []Problem) {
	d := newDecoder()
	var s Section
	domainsPath := path
	if node != nil {
		node = d.content(node)
		switch {
		case isNull(node):
		case node.Kind == yaml.SequenceNode:
			s.Domains = d.domainList(node, path)
		case node.Kind == yaml.MappingNode && (hasKey(node, "domain") || hasKey(node, "descriptors")):
			d.at(node, path, "want a list of domains (each with domain and descriptors), got a mapping; a single domain document goes in a list (\"- domain: ...\"), or under domains")
		case node.Kind == yaml.MappingNode:
			domainsPath = path + ".domains"
			d.fields(node, path, []field{
				{"response_headers", func(val *yaml.Node, p string) {
					s.ResponseHeaders = d.str(val, p)
					if !validHeaderStyle(s.ResponseHeaders) {
						d.at(d.resolve(val), p, "unknown response_headers %q (want none, ietf or reference)", s.ResponseHeaders)
					}
				}},
				{"dynamic_metadata", d.flag(&s.DynamicMetadata)},
				{"domains", func(val *yaml.Node, p string) {
					if val = d.resolve(val); !isNull(val) && val.Kind != yaml.SequenceNode {
						d.at(val, p, "want a list of domains (each with domain and descriptors), got %s", kindName(val))
						return
					}
					s.Domains = d.domainList(val, p)
				}},
			})
		default:
			d.at(node, path, "want a list of domains (each with domain and descriptors), or a mapping with domains and response_headers, got %s", kindName(node))
		}
	}
	return s, d.finish(s.Domains, domainsPath)
}

// hasKey reports whether the mapping n has the key k.
func hasKey(n *yaml.Node, k string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return true
		}
	}
	return false
}

// domainList decodes a sequence of domain documents.
func (d *decoder) domainList(n *yaml.Node, path string) []Domain {
	if isNull(n) {
		return nil
	}
	var out []Domain
	d.v.lines[path] = pos{n.Line, n.Column}
	for i, item := range n.Content {
		out = append(out, d.domain(item, fmt.Sprintf("%s[%d]", path, i)))
	}
	return out
}

// Parse reads domain documents from YAML source: a list of domains, or a
// single domain document as envoyproxy/ratelimit's configuration files
// hold (several such documents may follow each other, separated by
// "---"). Paths start with path; problems are as Decode's.
func Parse(data []byte, path string) ([]Domain, []Problem) {
	d := newDecoder()
	var domains []Domain
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, []Problem{syntaxProblem(err, path)}
		}
		n := d.content(&doc)
		switch {
		case isNull(n):
		case n.Kind == yaml.SequenceNode:
			for _, item := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, len(domains))
				domains = append(domains, d.domain(item, p))
			}
		case n.Kind == yaml.MappingNode:
			domains = append(domains, d.domain(n, fmt.Sprintf("%s[%d]", path, len(domains))))
		default:
			d.at(n, path, "want a domain document or a list of them, got %s", kindName(n))
		}
	}
	return domains, d.finish(domains, path)
}

// syntaxProblem turns a YAML syntax error into a problem, with its line
// when the message has one ("yaml: line 3: ...").
func syntaxProblem(err error, path string) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Problem{Path: path}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				p.Line, msg = line, text
			}
		}
	}
	p.Message = "invalid YAML: " + msg
	return p
}

type decoder struct {
	v      validator
	visits int
	over   bool
}

// newDecoder returns a decoder with nothing decoded yet.
func newDecoder() *decoder {
	return &decoder{v: validator{lines: map[string]pos{}}}
}

// finish validates domains and returns every problem, sorted by place. A
// problem of validation is left out when decoding already found one at its
// path or around it (a unit of the wrong type is not also missing).
func (d *decoder) finish(domains []Domain, path string) []Problem {
	if d.over {
		// Aliases expanded too far: what was decoded is cut short, and
		// checking it would only repeat the aliases' problems.
		for _, p := range d.v.problems {
			if p.Message == tooLarge {
				return []Problem{p}
			}
		}
	}
	decoded := d.v.problems
	d.v.problems = nil
	d.v.domains(domains, path)
	checked := d.v.problems
	d.v.problems = decoded
	for _, p := range checked {
		covered := false
		for _, q := range decoded {
			if p.Path == q.Path || strings.HasPrefix(p.Path, q.Path+".") || strings.HasPrefix(p.Path, q.Path+"[") {
				covered = true
				break
			}
		}
		if !covered {
			d.v.problems = append(d.v.problems, p)
		}
	}
	sort.SliceStable(d.v.problems, func(i, j int) bool {
		a, b := d.v.problems[i], d.v.problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return d.v.problems
}

// resolve follows aliases and counts the visit against the budget.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	d.visits++
	return n
}

// content resolves n and, when n is a document of one node, that node:
// what a section or a file holds.
func (d *decoder) content(n *yaml.Node) *yaml.Node {
	n = d.resolve(n)
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = d.resolve(n.Content[0])
	}
	return n
}

// at records a problem located at node n.
func (d *decoder) at(n *yaml.Node, path, format string, args ...any) {
	d.v.problems = append(d.v.problems, Problem{Line: n.Line, Column: n.Column, Path: path, Message: fmt.Sprintf(format, args...)})
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// A field is a key that a mapping may have, and what decodes its value
// (at path).
type field struct {
	key    string
	decode func(val *yaml.Node, path string)
}

// text, flag and whole decode a field's value into *s, *b and *i.
func (d *decoder) text(s *string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) { *s = d.str(n, path) }
}

func (d *decoder) flag(b *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) { *b = d.boolean(n, path) }
}

func (d *decoder) whole(i *int64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) { *i = d.int64(n, path) }
}

// fields decodes each key of the mapping n with its field of fs, after
// checking that the key is one of theirs (messages list them in fs's
// order) and not repeated. It reports whether n is a mapping.
func (d *decoder) fields(n *yaml.Node, path string, fs []field) bool {
	n = d.resolve(n)
	if d.visits > maxVisits {
		if !d.over {
			d.over = true
			d.at(n, path, "%s", tooLarge)
		}
		return false
	}
	if n.Kind != yaml.MappingNode {
		d.at(n, path, "want a mapping, got %s", kindName(n))
		return false
	}
	known := make([]string, len(fs))
	for i, f := range fs {
		known[i] = f.key
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := d.resolve(n.Content[i]), n.Content[i+1]
		kp := path + "." + k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			d.at(k, path, "a key must be a plain name, got %s", kindName(k))
			continue
		case !slices.Contains(known, k.Value):
			d.at(k, kp, "unknown key %q (want one of %s)", k.Value, strings.Join(known, ", "))
			continue
		case seen[k.Value]:
			d.at(k, kp, "key %q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		d.v.lines[kp] = pos{k.Line, k.Column}
		fs[slices.Index(known, k.Value)].decode(val, kp)
	}
	return true
}

// list calls f for each item of the sequence n; null is an empty list.
func (d *decoder) list(n *yaml.Node, path string, f func(item *yaml.Node, path string)) bool {
	n = d.resolve(n)
	if isNull(n) {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		d.at(n, path, "want a list, got %s", kindName(n))
		return false
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		item = d.resolve(item)
		d.v.lines[p] = pos{item.Line, item.Column}
		f(item, p)
	}
	return true
}

// str decodes a scalar as text, as envoyproxy/ratelimit does: 500 and true
// are the strings "500" and "true", and null is "".
func (d *decoder) str(n *yaml.Node, path string) string {
	n = d.resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.at(n, path, "want a string, got %s", kindName(n))
		return ""
	}
	if isNull(n) {
		return ""
	}
	return n.Value
}

// boolean decodes true or false; like the YAML 1.1 decoder that
// envoyproxy/ratelimit uses, it also takes an unquoted yes, no, on or off.
func (d *decoder) boolean(n *yaml.Node, path string) bool {
	n = d.resolve(n)
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!bool" {
			var b bool
			if err := n.Decode(&b); err == nil {
				return b
			}
		}
		if n.Style == 0 {
			switch strings.ToLower(n.Value) {
			case "yes", "on":
				return true
			case "no", "off":
				return false
			}
		}
	}
	d.at(n, path, "want true or false, got %s", kindName(n))
	return false
}

// uint32 decodes a whole number from 0 to 4294967295.
func (d *decoder) uint32(n *yaml.Node, path string) (uint32, bool) {
	n = d.resolve(n)
	var u uint64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&u) != nil || u > 1<<32-1 {
		d.at(n, path, "want a whole number from 0 to 4294967295, got %s", kindName(n))
		return 0, false
	}
	return uint32(u), true
}

// int64 decodes a whole number.
func (d *decoder) int64(n *yaml.Node, path string) int64 {
	n = d.resolve(n)
	var i int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		d.at(n, path, "want a whole number, got %s", kindName(n))
		return 0
	}
	return i
}

func (d *decoder) domain(n *yaml.Node, path string) Domain {
	var dom Domain
	n = d.resolve(n)
	d.v.lines[path] = pos{n.Line, n.Column}
	d.fields(n, path, []field{
		{"domain", d.text(&dom.Domain)},
		{"descriptors", func(val *yaml.Node, p string) { dom.Descriptors = d.descriptors(val, p, 1) }},
	})
	return dom
}

func (d *decoder) descriptors(n *yaml.Node, path string, depth int) []Descriptor {
	if depth > maxDepth {
		d.at(d.resolve(n), path, "descriptors are nested more than %d deep", maxDepth)
		return nil
	}
	var out []Descriptor
	d.list(n, path, func(item *yaml.Node, p string) {
		out = append(out, d.descriptor(item, p, depth))
	})
	return out
}

func (d *decoder) descriptor(n *yaml.Node, path string, depth int) Descriptor {
	var desc Descriptor
	d.fields(n, path, []field{
		{"key", d.text(&desc.Key)},
		{"value", d.text(&desc.Value)},
		{"rate_limit", func(val *yaml.Node, p string) {
			if r, ok := d.rateLimit(val, p); ok {
				desc.RateLimit = &r
			}
		}},
		{"rate_limits", func(val *yaml.Node, p string) {
			desc.RateLimits = []RateLimit{}
			d.list(val, p, func(item *yaml.Node, ip string) {
				r, _ := d.rateLimit(item, ip)
				desc.RateLimits = append(desc.RateLimits, r)
			})
		}},
		{"algorithm", d.text(&desc.Algorithm)},
		{"shadow_mode", d.flag(&desc.ShadowMode)},
		{"quota_mode", d.flag(&desc.QuotaMode)},
		{"metadata", func(val *yaml.Node, p string) { desc.Metadata = d.metadata(val, p) }},
		{"usage", d.flag(&desc.Usage)},
		{"detailed_metric", d.flag(&desc.DetailedMetric)},
		{"value_to_metric", d.flag(&desc.ValueToMetric)},
		{"share_threshold", d.flag(&desc.ShareThreshold)},
		{"descriptors", func(val *yaml.Node, p string) { desc.Descriptors = d.descriptors(val, p, depth+1) }},
	})
	return desc
}

// metadata decodes a descriptor's metadata: a mapping of names to JSON's
// values (text, numbers, true or false, null, lists and mappings).
func (d *decoder) metadata(n *yaml.Node, path string) map[string]any {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		d.at(n, path, "want a mapping, got %s", kindName(n))
		return nil
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		d.at(n, path, "metadata: %v", err)
		return nil
	}
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// rateLimit decodes a rate limit; it reports false for a null one, which
// envoyproxy/ratelimit reads as no limit at all.
func (d *decoder) rateLimit(n *yaml.Node, path string) (RateLimit, bool) {
	var r RateLimit
	if isNull(d.resolve(n)) {
		return r, false
	}
	hasRPU := false
	ok := d.fields(n, path, []field{
		{"unit", d.text(&r.Unit)},
		{"requests_per_unit", func(val *yaml.Node, p string) {
			r.RequestsPerUnit, _ = d.uint32(val, p)
			hasRPU = true
		}},
		{"unit_multiplier", func(val *yaml.Node, p string) {
			m, ok := d.uint32(val, p)
			if ok && m == 0 {
				d.at(d.resolve(val), p, "unit_multiplier must be at least 1 (leave it out for 1)")
			}
			r.UnitMultiplier = m
		}},
		{"unlimited", d.flag(&r.Unlimited)},
		{"name", d.text(&r.Name)},
		{"replaces", func(val *yaml.Node, p string) {
			d.list(val, p, func(item *yaml.Node, ip string) {
				var rep Replace
				d.fields(item, ip, []field{{"name", d.text(&rep.Name)}})
				r.Replaces = append(r.Replaces, rep)
			})
		}},
		{"algorithm", d.text(&r.Algorithm)},
		{"burst", d.whole(&r.Burst)},
		{"penalty", func(val *yaml.Node, p string) {
			var pen Penalty
			d.fields(val, p, []field{
				{"block_for", d.text(&pen.BlockFor)},
				{"factor", d.whole(&pen.Factor)},
				{"max_block", d.text(&pen.MaxBlock)},
				{"forget_after", d.text(&pen.ForgetAfter)},
			})
			r.Penalty = &pen
		}},
	})
	if ok && !hasRPU && !r.Unlimited {
		d.at(d.resolve(n), path+".requests_per_unit", "requests_per_unit is required (0 refuses every request), or set unlimited: true")
	}
	return r, true
}
