package rls

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
)

// Config is a compiled envoy section: the descriptor tree of every domain,
// ready to match requests. It is immutable and safe for concurrent use;
// build one with Compile.
type Config struct {
	domains map[string]*node
	headers headerStyle
	names   HeaderNames
	// countRefused, shadowAll, quotaAll and dynamicMetadata are
	// Section's CountRefused, ShadowAll, QuotaAll and DynamicMetadata.
	countRefused, shadowAll, quotaAll, dynamicMetadata bool
	// policies are the policies of the configured limits, by name: the
	// limits that admin overrides may name (Limit).
	policies map[string]sluice.Policy
}

// node is a compiled Descriptor.
type node struct {
	// path names the node in metrics, as envoyproxy/ratelimit's stats do:
	// "database_users.op".
	path   string
	limits []limit
	// unlimited admits everything; replaces are then the replaces of its
	// unlimited rate limit.
	unlimited bool
	replaces  []string
	shadow    bool
	// quota is Descriptor.QuotaMode; metadata is Descriptor.Metadata, nil
	// when it has none.
	quota    bool
	metadata *structpb.Struct
	// usage makes the request descriptors that end here usage reports
	// (Descriptor.Usage).
	usage    bool
	detailed bool
	// share is set on a wildcard node whose matches share one counter;
	// pattern is then its configured value, such as "foo*".
	share   bool
	pattern string

	// exact holds the children by their configured value, wildcard
	// values included: as in envoyproxy/ratelimit, a request value equal
	// to a wildcard pattern ("foo*") finds that node before any pattern
	// is tried.
	exact    map[entry]*node
	wild     []wildChild // children with a wildcard value, in order
	fallback map[string]*node
}

type entry struct{ key, value string }

// wildChild is a child whose value holds "*": parts are the literal
// pieces between the stars ("log*.txt" is "log", ".txt").
type wildChild struct {
	key   string
	parts []string
	n     *node
}

// isWildcard reports whether a configured value is a wildcard: it holds
// "*" anywhere, as envoyproxy/ratelimit reads it.
func isWildcard(value string) bool {
	return strings.Contains(value, "*")
}

// globMatch reports whether value matches the wildcard whose literal
// pieces are parts (the pattern split at each "*"): each "*" stands for
// any run of characters, the empty one included. The first piece must
// start value and the last end it; the ones between are found leftmost
// first, which is enough for patterns of stars and literals.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// limit is one compiled rate limit.
type limit struct {
	// policy is unset (Limit 0) for a limit of zero requests, which
	// refuses everything without consulting the store.
	policy     sluice.Policy
	rpu        uint32
	unit       unitCode
	multiplier uint32
	name       string
	replaces   []string
}

// Compile builds a Config from domains, which must be valid: it returns a
// *ProblemsError listing Validate's problems (under the path "envoy")
// otherwise.
func Compile(domains []Domain) (*Config, error) {
	return CompileSection(Section{Domains: domains})
}

// CompileSection builds a Config from a whole envoy section, which must be
// valid, as Compile does.
func CompileSection(s Section) (*Config, error) {
	ps := Validate(s.Domains, "envoy")
	style, ok := parseHeaderStyle(s.ResponseHeaders)
	if !ok {
		ps = append(ps, Problem{Path: "envoy.response_headers", Message: "unknown response_headers " + strconv.Quote(s.ResponseHeaders) + " (want none, ietf or reference)"})
	}
	if len(ps) > 0 {
		return nil, &ProblemsError{Problems: ps}
	}
	c := &Config{domains: make(map[string]*node, len(s.Domains)), headers: style, policies: map[string]sluice.Policy{},
		names: s.HeaderNames, countRefused: s.CountRefused, shadowAll: s.ShadowAll, quotaAll: s.QuotaAll, dynamicMetadata: s.DynamicMetadata}
	if c.names.Limit == "" {
		c.names.Limit = "RateLimit-Limit"
	}
	if c.names.Remaining == "" {
		c.names.Remaining = "RateLimit-Remaining"
	}
	if c.names.Reset == "" {
		c.names.Reset = "RateLimit-Reset"
	}
	for _, d := range s.Domains {
		root := &node{}
		compileChildren(root, d.Domain, "", d.Descriptors)
		c.domains[d.Domain] = root
		root.addPolicies(c.policies)
	}
	return c, nil
}

// addPolicies adds the policies of the limits of n and of the nodes below
// it to m.
func (n *node) addPolicies(m map[string]sluice.Policy) {
	for _, l := range n.limits {
		if l.policy.Name != "" {
			m[l.policy.Name] = l.policy
		}
	}
	for _, c := range n.exact {
		c.addPolicies(m)
	}
	for _, c := range n.fallback {
		c.addPolicies(m)
	}
}

// Limit returns the policy of the configured limit named name, the name
// that admin overrides give it (docs/envoy.md, "Admin overrides"):
// "envoy:" and the domain and descriptor path, "envoy:edge.api_key", with
// "#0", "#1"... after it for each of a descriptor's rate_limits. Limits
// of zero requests_per_unit have none.
func (c *Config) Limit(name string) (sluice.Policy, bool) {
	if c == nil {
		return sluice.Policy{}, false
	}
	p, ok := c.policies[name]
	return p, ok
}

// Policies returns the policies of the configured limits (those Limit
// names), sorted by name.
func (c *Config) Policies() []sluice.Policy {
	if c == nil {
		return nil
	}
	out := make([]sluice.Policy, 0, len(c.policies))
	for _, p := range c.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b sluice.Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Domains returns the names of the configured domains.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	return out
}

func compileChildren(parent *node, domain, path string, ds []Descriptor) {
	for i := range ds {
		d := &ds[i]
		n := &node{shadow: d.ShadowMode, quota: d.QuotaMode, usage: d.Usage, detailed: d.DetailedMetric}
		if d.Metadata != nil {
			n.metadata, _ = structpb.NewStruct(d.Metadata) // checked by Validate
		}
		seg := d.Key
		if d.Value != "" {
			seg += "_" + d.Value
		}
		if path == "" {
			n.path = seg
		} else {
			n.path = path + "." + seg
		}
		descAlgo := sluice.FixedWindowAlgorithm
		if d.Algorithm != "" {
			descAlgo, _ = sluice.ParseAlgorithm(d.Algorithm)
		}
		rls := d.RateLimits
		if d.RateLimit != nil {
			rls = []RateLimit{*d.RateLimit}
		}
		for j, r := range rls {
			if r.Unlimited {
				n.unlimited = true
				n.replaces = replaceNames(r.Replaces)
				continue
			}
			name := "envoy:" + domain + "." + n.path
			if len(rls) > 1 {
				name += "#" + strconv.Itoa(j)
			}
			n.limits = append(n.limits, compileLimit(r, descAlgo, name))
		}
		if isWildcard(d.Value) {
			n.share = d.ShareThreshold
			n.pattern = d.Value
			parent.wild = append(parent.wild, wildChild{key: d.Key, parts: strings.Split(d.Value, "*"), n: n})
		}
		switch {
		case d.Value != "":
			if parent.exact == nil {
				parent.exact = map[entry]*node{}
			}
			parent.exact[entry{d.Key, d.Value}] = n
		default:
			if parent.fallback == nil {
				parent.fallback = map[string]*node{}
			}
			parent.fallback[d.Key] = n
		}
		compileChildren(n, domain, n.path, d.Descriptors)
	}
}

func replaceNames(rs []Replace) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// compileLimit turns a valid, limited RateLimit into a limit whose policy
// is named name.
func compileLimit(r RateLimit, descAlgo sluice.Algorithm, name string) limit {
	unitLen, code, _ := parseUnit(r.Unit)
	mult := max(r.UnitMultiplier, 1)
	l := limit{rpu: r.RequestsPerUnit, unit: code, multiplier: mult, name: r.Name, replaces: replaceNames(r.Replaces)}
	if r.RequestsPerUnit > 0 {
		a := descAlgo
		if r.Algorithm != "" {
			a, _ = sluice.ParseAlgorithm(r.Algorithm)
		}
		l.policy = sluice.Policy{
			Name:      name,
			Algorithm: a,
			Limit:     int64(r.RequestsPerUnit),
			Period:    time.Duration(mult) * unitLen,
			Burst:     r.Burst,
		}
		if r.Penalty != nil {
			l.policy.Penalty, _ = r.Penalty.penalty("", func(string, string, ...any) {})
		}
	}
	return l
}

// overrideLimit returns the limit of Envoy's RateLimitOverride, a fixed
// window of rpu requests per multiplier units, and false when the unit is
// unknown or the period too long.
func overrideLimit(rpu uint32, unit unitCode, multiplier uint32, domain string) (limit, bool) {
	unitLen, ok := unitPeriod(unit)
	if !ok || time.Duration(multiplier) > sluice.MaxPeriod/unitLen || rpu > sluice.MaxLimit {
		return limit{}, false
	}
	l := limit{rpu: rpu, unit: unit, multiplier: multiplier}
	if rpu > 0 {
		l.policy = sluice.Policy{
			Name:      "envoy-override:" + domain,
			Algorithm: sluice.FixedWindowAlgorithm,
			Limit:     int64(rpu),
			Period:    time.Duration(multiplier) * unitLen,
		}
	}
	return l, true
}

// match walks the tree of a domain with the entries of one request
// descriptor, as envoyproxy/ratelimit does: at each level the entry's key
// and value are looked up first, then the wildcard values of that key in
// the order of the configuration ("*" anywhere in them), then the key
// alone. The descriptor has
// the limits of the node where the walk ends only if it ends on its last
// entry; a node with no nested descriptors ends the walk. It returns nil
// when no limit applies. When patterns is not nil, patterns[i] receives
// the configured value of a node with share_threshold that entry i matched
// through its wildcard.
func (root *node) match(entries []entry, patterns []string) *node {
	level := root
	for i, e := range entries {
		next := level.exact[e]
		if next == nil {
			for _, w := range level.wild {
				if w.key == e.key && globMatch(w.parts, e.value) {
					next = w.n
					break
				}
			}
			if next != nil && next.share && patterns != nil {
				patterns[i] = next.pattern
			}
		}
		if next == nil {
			next = level.fallback[e.key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			if len(next.limits) == 0 && !next.unlimited {
				return nil
			}
			return next
		}
		if next.exact == nil && next.wild == nil && next.fallback == nil {
			return nil
		}
		level = next
	}
	return nil
}

// storeKey returns the key under which a request descriptor is counted:
// the domain and every entry, each value prefixed by its length so that
// no choice of values can make two descriptors share a key. An entry
// matched through a shared wildcard is counted under the wildcard's
// pattern instead of its value.
func storeKey(domain string, entries []entry, patterns []string) string {
	var b strings.Builder
	b.Grow(len(domain) + 16*len(entries))
	b.WriteString(domain)
	for i, e := range entries {
		v := e.value
		if patterns != nil && patterns[i] != "" {
			v = patterns[i]
		}
		b.WriteByte('|')
		b.WriteString(e.key)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String()
}

// overrideKey returns the key under which admin overrides find a request
// descriptor: the values of its entries, in order, joined by "|", with a
// backslash written before each "|" and backslash within a value (so
// that no two descriptors of one limit share a key). An entry matched
// through a shared wildcard counts under the wildcard's pattern, as in
// storeKey. (database, users), (op, get) is "users|get".
func overrideKey(entries []entry, patterns []string) string {
	if len(entries) == 1 {
		// One entry with nothing to escape is its own key: no allocation
		// on the commonest descriptor.
		v := entries[0].value
		if patterns != nil && patterns[0] != "" {
			v = patterns[0]
		}
		if !strings.ContainsAny(v, `|\`) {
			return v
		}
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		v := e.value
		if patterns != nil && patterns[i] != "" {
			v = patterns[i]
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '|' || v[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	return b.String()
}

// overridden returns l with the policy p of an admin override, reported
// to Envoy in its terms: p's limit per the largest unit (times a
// multiplier) that divides its period; a period that no unit divides, or
// a calendar one, is reported in the unit of its calendar or, failing
// that, of l.
func overridden(l limit, p sluice.Policy) limit {
	l.policy = p
	l.rpu = uint32(min(max(p.Limit, 0), math.MaxUint32))
	l.unit, l.multiplier = unitOf(p, l.unit, l.multiplier)
	return l
}

// unitOf returns the Envoy unit and multiplier of p's period, or unit and
// mult when none fits.
func unitOf(p sluice.Policy, unit unitCode, mult uint32) (unitCode, uint32) {
	switch p.Calendar.Unit {
	case sluice.CalendarDay:
		return unitDay, 1
	case sluice.CalendarWeek:
		return unitWeek, 1
	case sluice.CalendarMonth:
		return unitMonth, 1
	case sluice.CalendarYear:
		return unitYear, 1
	}
	for i := len(units) - 1; i >= 0; i-- {
		u := units[i]
		if p.Period > 0 && p.Period%u.period == 0 && p.Period/u.period <= math.MaxUint32 {
			return u.unit, uint32(p.Period / u.period)
		}
	}
	return unit, mult
}

// detailedPath returns the metrics name of a request descriptor under
// detailed_metric: its keys and values, "database_users.op_get".
func detailedPath(entries []entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.key)
		if e.value != "" {
			b.WriteByte('_')
			b.WriteString(e.value)
		}
	}
	return b.String()
}
