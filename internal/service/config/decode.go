package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// maxVisits bounds the nodes a decoder visits, counting each visit of an
// aliased node again, so that a small file full of aliases cannot make
// validation take long.
const maxVisits = 200_000

// maxNameLen is the longest limit or rule name.
const maxNameLen = 64

// decoder walks a YAML document and collects every problem it finds.
type decoder struct {
	file     string
	formats  Formats
	problems []Problem
	budget   int
	// merging holds the mappings whose merge keys are being expanded, to
	// refuse a mapping that merges itself.
	merging map[*yaml.Node]bool
	// declared holds every limit name written in the limits section, valid
	// or not, so that a rule naming an invalid limit is not reported twice.
	declared map[string]bool
	// limits, plans and tables are the decoded limits, plans and plan
	// tables, for the rules (plans.go); declaredPlans and declaredTables
	// hold every name written, valid or not, as declared does.
	limitsByName                  map[string]Limit
	plans                         map[string]Plan
	tables                        map[string]PlanTable
	declaredPlans, declaredTables map[string]bool
	// upstream reports that the proxy section names an upstream, so that
	// its rules' requests run behind Sluice: only then can a rule hold a
	// concurrency limit's lease for as long as its request runs.
	upstream bool
}

// field is one key and its value in a mapping.
type field struct {
	key, val *yaml.Node
}

// maxProblems is the most problems reported for one file; past it the
// walk stops, so that a file cannot make an error message of any size.
const maxProblems = 50

// add records a problem at node n (which may be nil).
func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	if len(d.problems) >= maxProblems {
		if len(d.problems) == maxProblems {
			d.problems = append(d.problems, Problem{File: d.file, Line: 1 << 30, Message: fmt.Sprintf("stopped after %d problems", maxProblems)})
		}
		d.budget = 0 // stop walking
		return
	}
	p := Problem{File: d.file, Path: path, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
}

// sort orders the problems by their place in the file; the note that the
// walk stopped comes last, and loses its placeholder line.
func (d *decoder) sort() {
	defer func() {
		if n := len(d.problems); n > maxProblems {
			d.problems[n-1].Line = 0
		}
	}()
	slices.SortStableFunc(d.problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}

// visit spends one unit of the budget and reports whether any was left.
func (d *decoder) visit(n *yaml.Node) bool {
	if d.budget == 0 {
		return false
	}
	d.budget--
	if d.budget == 0 {
		d.add(n, "", "the document is too complex (more than %d nodes to check, counting aliases each time they are used)", maxVisits)
		return false
	}
	return true
}

// deref follows aliases to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// describe names the kind of a node's value for messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing (null)"
		case "!!bool":
			return "a boolean (" + n.Value + ")"
		case "!!int":
			return "an integer (" + n.Value + ")"
		case "!!float":
			return "a number (" + n.Value + ")"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

// join returns the path of key inside path: path.key, or path["key"] for
// a key that is not a plain name.
func join(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func plainKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validName reports whether s can name a limit or a rule: letters, digits,
// '_' and '-', starting with a letter or digit, at most maxNameLen bytes.
func validName(s string) bool {
	return plainKey(s) && len(s) <= maxNameLen && s[0] != '_' && s[0] != '-'
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// pairs returns the fields of a mapping in order, with merge keys (<<)
// expanded: keys written in the mapping win over merged ones, and of
// several merged mappings the first wins. Duplicate keys are problems. ok
// is false when n is not a mapping.
func (d *decoder) pairs(n *yaml.Node, path string) (out []field, ok bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "must be a mapping, got %s", describe(n))
		return nil, false
	}
	if d.merging[n] {
		d.add(n, path, "a merge key (<<) brings in the mapping that holds it")
		return nil, false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	var merged []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.visit(k) {
			return nil, false
		}
		if isMerge(k) {
			if d.merging == nil {
				d.merging = make(map[*yaml.Node]bool)
			}
			d.merging[n] = true
			merged = append(merged, d.merge(v, path)...)
			delete(d.merging, n)
			continue
		}
		kk := deref(k)
		if kk.Kind != yaml.ScalarNode || kk.ShortTag() == "!!null" {
			d.add(k, path, "a key must be a string, got %s", describe(kk))
			continue
		}
		if seen[kk.Value] {
			d.add(k, join(path, kk.Value), "duplicate key")
			continue
		}
		seen[kk.Value] = true
		out = append(out, field{kk, v})
	}
	for _, f := range merged {
		if !seen[f.key.Value] {
			seen[f.key.Value] = true
			out = append(out, f)
		}
	}
	return out, true
}

// merge returns the fields a merge key's value brings in.
func (d *decoder) merge(v *yaml.Node, path string) []field {
	v = deref(v)
	switch v.Kind {
	case yaml.MappingNode:
		fs, _ := d.pairs(v, path)
		return fs
	case yaml.SequenceNode:
		var out []field
		for _, e := range v.Content {
			if e = deref(e); e.Kind != yaml.MappingNode {
				d.add(e, path, "<< must merge a mapping or a list of mappings, got %s", describe(e))
				continue
			}
			fs, _ := d.pairs(e, path)
			out = append(out, fs...)
		}
		return out
	}
	d.add(v, path, "<< must merge a mapping or a list of mappings, got %s", describe(v))
	return nil
}

// object is a mapping with a fixed set of keys, decoded by name.
type object struct {
	at     *yaml.Node // where to report missing keys
	path   string
	fields map[string]field
}

// get returns the value of key, or nil when the key is absent.
func (o object) get(key string) *yaml.Node {
	if f, ok := o.fields[key]; ok {
		return f.val
	}
	return nil
}

// mapping decodes n as a mapping whose keys must be among known; unknown
// keys are problems. at locates problems about missing keys (the key that
// names this mapping, or the mapping itself). ok is false when n is not a
// mapping.
func (d *decoder) mapping(at, n *yaml.Node, path string, known ...string) (object, bool) {
	fs, ok := d.pairs(n, path)
	if !ok {
		return object{}, false
	}
	o := object{at: at, path: path, fields: make(map[string]field, len(fs))}
	for _, f := range fs {
		if !slices.Contains(known, f.key.Value) {
			d.add(f.key, join(path, f.key.Value), "unknown key (want %s)%s", list(known), suggest(f.key.Value, known))
			continue
		}
		o.fields[f.key.Value] = f
	}
	return o, true
}

// list joins words for messages: "a, b or c".
func list(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// suggest returns `; did you mean "k"?` for the known word nearest to s,
// when one is close enough to be a likely typo, and "" otherwise.
func suggest(s string, known []string) string {
	if len(s) < 3 {
		return ""
	}
	best, bestDist := "", 3
	for _, k := range known {
		if d := EditDistance(strings.ToLower(s), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		// A known name that begins with s, such as leaky_bucket for
		// leaky, or several (sliding for sliding_log or sliding_window).
		var starts []string
		for _, k := range known {
			if strings.HasPrefix(k, strings.ToLower(s)) {
				starts = append(starts, strconv.Quote(k))
			}
		}
		if len(starts) == 0 || len(starts) > 3 {
			return ""
		}
		return "; did you mean " + strings.Join(starts, " or ") + "?"
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// EditDistance is the Levenshtein distance between a and b, in bytes, or a
// large number when either is longer than 64 bytes (no key of the schema,
// and no flag of cmd/sluice, is that long). It serves the "did you mean"
// hints of the configuration and of the command line.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// entry is one NAME: value of a section of named entries (limits, plans,
// plan_tables): its field, its name, its path and whether the name is
// valid.
type entry struct {
	field
	name, path string
	valid      bool
}

// entries returns the NAME: value entries of top's section, in the file's
// order, and marks each name in declared. A name that is not valid gets a
// problem that calls it what ("a limit name").
func (d *decoder) entries(top object, section, what string, declared map[string]bool) []entry {
	n := top.get(section)
	if n == nil {
		return nil
	}
	fs, ok := d.pairs(n, section)
	if !ok {
		return nil
	}
	out := make([]entry, len(fs))
	for i, f := range fs {
		e := entry{field: f, name: f.key.Value, path: join(section, f.key.Value), valid: validName(f.key.Value)}
		declared[e.name] = true
		if !e.valid {
			d.add(f.key, e.path, "%s must be 1 to %d letters, digits, '_' or '-', starting with a letter or digit", what, maxNameLen)
		}
		out[i] = e
	}
	return out
}

// nonEmptyList reports whether v, dereferenced, is a list with at least
// one item. Else it adds a problem at path: notList followed by what v is,
// or empty for an empty list.
func (d *decoder) nonEmptyList(v *yaml.Node, path, notList, empty string) bool {
	switch {
	case v.Kind != yaml.SequenceNode:
		d.add(v, path, "%s %s", notList, describe(v))
		return false
	case len(v.Content) == 0:
		d.add(v, path, "%s", empty)
		return false
	}
	return true
}

// filePath decodes the optional file name o[key], found at path.key, as a
// path relative to the configuration file's folder: "" and true when the
// key is absent, false (with a problem added) when its value is not a
// non-empty string.
func (d *decoder) filePath(o object, path, key string) (string, bool) {
	fv := o.get(key)
	if fv == nil {
		return "", true
	}
	s, ok := d.nonEmpty(fv, path+"."+key)
	if !ok {
		return "", false
	}
	return d.relative(s), true
}

// str decodes a string scalar. Numbers and booleans are taken as written
// (a prefix of 123 is "123"); mappings, lists and null are problems.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		d.add(n, path, "must be a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// nonEmpty decodes a string scalar that must not be empty.
func (d *decoder) nonEmpty(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.add(deref(n), path, "must not be empty")
		return "", false
	}
	return s, ok
}

// integer decodes an integer scalar within [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.add(n, path, "must be a whole number from %d to %d, got %s", lo, hi, describe(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		d.add(n, path, "must be a whole number from %d to %d, got %s", lo, hi, n.Value)
		return 0, false
	}
	if v < lo || v > hi {
		d.add(n, path, "must be from %d to %d, got %d", lo, hi, v)
		return 0, false
	}
	return v, true
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.add(n, path, "must be true or false, got %s", describe(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		d.add(n, path, "must be true or false, got %s", n.Value)
		return false, false
	}
	return v, true
}

// duration decodes a positive duration within max.
func (d *decoder) duration(n *yaml.Node, path string, max time.Duration) (time.Duration, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	n = deref(n)
	v, err := ParseDuration(s)
	switch {
	case err != nil:
		d.add(n, path, "%v", err)
		return 0, false
	case v <= 0:
		d.add(n, path, "must be positive, got %s", s)
		return 0, false
	case v%time.Microsecond != 0:
		d.add(n, path, "must be a whole number of microseconds, got %s", s)
		return 0, false
	case v > max:
		limit := formatDuration(max)
		if max == sluice.MaxPeriod {
			limit = "3652d12h (10 years)"
		}
		d.add(n, path, "must be at most %s, got %s", limit, s)
		return 0, false
	}
	return v, true
}

// formatDuration writes a duration in the largest whole unit that fits:
// 87660h rather than 87660h0m0s.
func formatDuration(v time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if v >= u.d && v%u.d == 0 {
			return strconv.FormatInt(int64(v/u.d), 10) + u.name
		}
	}
	return v.String()
}

// ParseDuration parses a duration as written in a configuration file: Go's
// notation (500ms, 10s, 1m30s, 2h) or a whole number of days (1d, 7d).
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && days[0] >= '0' && days[0] <= '9' {
		n, err := strconv.ParseInt(days, 10, 64)
		if err == nil {
			if n > int64(math.MaxInt64/(24*time.Hour)) {
				return 0, fmt.Errorf("duration %q is too long", s)
			}
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want a number and a unit, like 500ms, 10s, 1m, 1h or 1d)", s)
	}
	return v, nil
}

// strs decodes a list of strings; each element is checked by check, which
// returns a message for a bad one.
func (d *decoder) strs(n *yaml.Node, path string, example string, check func(string) string) ([]string, bool) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "must be a list, like %s, got %s", example, describe(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	good := true
	for i, e := range n.Content {
		if !d.visit(e) {
			return nil, false
		}
		s, ok := d.nonEmpty(e, index(path, i))
		if ok {
			if msg := check(s); msg != "" {
				d.add(deref(e), index(path, i), "%s", msg)
				ok = false
			}
		}
		good = good && ok
		out = append(out, s)
	}
	return out, good
}
