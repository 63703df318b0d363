package rls

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
)

// Domain is one domain document in envoyproxy/ratelimit's configuration
// format: a domain name and its descriptor tree. The envoy section of
// Sluice's configuration is a list of them.
type Domain struct {
	// Domain is the name Envoy sends in RateLimitRequest.domain. Required,
	// and unique within the envoy section.
	Domain string `yaml:"domain"`
	// Descriptors are the first level of the descriptor tree.
	Descriptors []Descriptor `yaml:"descriptors,omitempty"`
}

// Section is the whole envoy section of Sluice's configuration: the
// domain documents and the options of the rate limit service.
type Section struct {
	// Domains are the domain documents.
	Domains []Domain
	// ResponseHeaders selects the rate limit headers that each answer asks
	// Envoy to add to its response (response_headers_to_add):
	// ResponseHeadersNone (or "") adds none, ResponseHeadersIETF the
	// fields of draft-ietf-httpapi-ratelimit-headers-10 and
	// ResponseHeadersReference envoyproxy/ratelimit's own.
	ResponseHeaders string
	// HeaderNames, when set, rename the headers of ResponseHeadersReference
	// (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER
	// and LIMIT_RESET_HEADER); empty names keep the defaults.
	HeaderNames HeaderNames
	// CountRefused makes every descriptor count every hit, admitted or
	// not, as envoyproxy/ratelimit does unless its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is set: each request
	// descriptor is a usage report (Descriptor.Usage), charged whether or
	// not it fits, and OVER_LIMIT once its count is past the limit.
	CountRefused bool
	// ShadowAll is envoyproxy/ratelimit's global SHADOW_MODE: every
	// descriptor is decided, counted and reported as usual, but the
	// overall answer is OK even when a descriptor is OVER_LIMIT.
	ShadowAll bool
	// QuotaAll is envoyproxy/ratelimit's global QUOTA_MODE: every
	// descriptor of a request is in quota mode (Descriptor.QuotaMode),
	// and one that matches no limit counts as a quota descriptor that is
	// not over.
	QuotaAll bool
	// DynamicMetadata is envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA:
	// each answer carries dynamic metadata that Envoy stores under
	// envoy.filters.http.ratelimit: the request's domain, its descriptors
	// (entries as "key=value"), its hits_addend when set, and under
	// "metadata" the Metadata of its descriptors that are not over.
	DynamicMetadata bool
}

// HeaderNames are the names of the reference style's headers.
type HeaderNames struct {
	Limit, Remaining, Reset string
}

// Descriptor is one node of a domain's descriptor tree: it matches one
// entry (key, value) of a request's descriptor, and either limits the
// requests that stop here or refines the match with nested Descriptors.
type Descriptor struct {
	// Key must equal the entry's key. Required.
	Key string `yaml:"key"`
	// Value, when set, must equal the entry's value; a value with "*"
	// anywhere is a wildcard, each "*" standing for any run of characters
	// ("log*.txt" matches "log.txt" and "log-2024.txt"). An empty Value
	// matches any value, as a fallback for the values that no sibling
	// names. An exact value is preferred to a wildcard, and wildcards are
	// tried in the order of the configuration.
	Value string `yaml:"value,omitempty"`
	// RateLimit is the limit of a request descriptor that ends at this
	// node. At most one of RateLimit and RateLimits may be set.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`
	// RateLimits (a Sluice extension) are several limits that all apply,
	// all-or-nothing: 10 per second AND 10,000 per day.
	RateLimits []RateLimit `yaml:"rate_limits,omitempty"`
	// Algorithm (a Sluice extension) is the algorithm of this node's
	// limits, by its configuration name; empty means fixed_window, the
	// algorithm of envoyproxy/ratelimit. A RateLimit's own Algorithm
	// overrides it.
	Algorithm string `yaml:"algorithm,omitempty"`
	// ShadowMode makes this node's limits a dry run: they are decided and
	// counted, and reported, but never make the request OVER_LIMIT.
	ShadowMode bool `yaml:"shadow_mode,omitempty"`
	// QuotaMode is envoyproxy/ratelimit's quota mode: a descriptor that
	// ends here and is over its limit is reported OVER_LIMIT, but makes
	// the request OVER_LIMIT only when every quota-mode descriptor of the
	// request is over (the others stay available to route to). The
	// descriptors without it decide as usual.
	QuotaMode bool `yaml:"quota_mode,omitempty"`
	// Metadata is returned in the answer's dynamic metadata, merged with
	// that of the request's other descriptors, when a request descriptor
	// that ends here is not over its limit and the section's
	// DynamicMetadata is on (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA). Its values are those of JSON.
	Metadata map[string]any `yaml:"metadata,omitempty"`
	// Usage (a Sluice extension) makes every hits_addend of a request
	// descriptor that ends here a usage report: it is charged whether or
	// not it fits (the key may go into debt), and a hits_addend of 0 is a
	// check that charges nothing and is refused while nothing is left.
	// The answer is OVER_LIMIT whenever the key is over.
	Usage bool `yaml:"usage,omitempty"`
	// DetailedMetric reports this node's decisions to the metrics hook
	// under the request's own values rather than the configured key.
	DetailedMetric bool `yaml:"detailed_metric,omitempty"`
	// ValueToMetric is accepted for compatibility with envoyproxy/ratelimit
	// and changes nothing here: Sluice's metrics name configured keys.
	ValueToMetric bool `yaml:"value_to_metric,omitempty"`
	// ShareThreshold, on a node with a wildcard Value, makes every value
	// that the wildcard matches share one counter, instead of one counter
	// per value.
	ShareThreshold bool `yaml:"share_threshold,omitempty"`
	// Descriptors match the next entry of the request's descriptor.
	Descriptors []Descriptor `yaml:"descriptors,omitempty"`
}

// RateLimit is a limit in envoyproxy/ratelimit's terms: RequestsPerUnit
// per Unit (times UnitMultiplier), in fixed windows aligned to the Unix
// epoch unless an algorithm says otherwise.
type RateLimit struct {
	// Unit is second, minute, hour, day, week, month (30 days) or year
	// (365 days), in any case. Required unless Unlimited.
	Unit string `yaml:"unit,omitempty"`
	// RequestsPerUnit is the limit. Zero refuses every request. Required
	// unless Unlimited.
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	// UnitMultiplier makes the period several units long (30 seconds);
	// zero means 1.
	UnitMultiplier uint32 `yaml:"unit_multiplier,omitempty"`
	// Unlimited admits every request without counting it.
	Unlimited bool `yaml:"unlimited,omitempty"`
	// Name names the limit for Replaces and is reported to Envoy.
	Name string `yaml:"name,omitempty"`
	// Replaces lists the names of limits that this one replaces: when a
	// request matches both, the replaced limit is not applied.
	Replaces []Replace `yaml:"replaces,omitempty"`
	// Algorithm (a Sluice extension) overrides the descriptor's
	// Algorithm for this limit.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Burst (a Sluice extension) is the capacity of a token_bucket, gcra
	// or leaky_bucket limit; zero means RequestsPerUnit.
	Burst int64 `yaml:"burst,omitempty"`
	// Penalty (a Sluice extension) blocks a key that the limit refused,
	// longer for each repeat offence (sluice.Penalty).
	Penalty *Penalty `yaml:"penalty,omitempty"`
}

// Penalty is a limit's penalty as the envoy section writes it: durations
// in Go's syntax (1m, 24h).
type Penalty struct {
	BlockFor    string `yaml:"block_for"`
	Factor      int64  `yaml:"factor,omitempty"`
	MaxBlock    string `yaml:"max_block,omitempty"`
	ForgetAfter string `yaml:"forget_after,omitempty"`
}

// penalty returns p as a sluice.Penalty; problems are reported to add
// with the path of the field (under path) that has them.
func (p *Penalty) penalty(path string, add func(path, format string, args ...any)) (sluice.Penalty, bool) {
	var out sluice.Penalty
	ok := true
	dur := func(s, field string, required bool) time.Duration {
		if s == "" {
			if required {
				add(path+"."+field, "%s is required: how long a refusal blocks the key, like 1m", field)
				ok = false
			}
			return 0
		}
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			add(path+"."+field, "%s: %q is not a duration like 30s, 1m or 24h", field, s)
			ok = false
		case d <= 0 || d > sluice.MaxPeriod || d%time.Microsecond != 0:
			add(path+"."+field, "%s must be positive, whole microseconds and at most 10 years, got %s", field, s)
			ok = false
		}
		return d
	}
	out.BlockFor = dur(p.BlockFor, "block_for", true)
	out.MaxBlock = dur(p.MaxBlock, "max_block", false)
	out.ForgetAfter = dur(p.ForgetAfter, "forget_after", false)
	out.Factor = p.Factor
	if ok {
		if err := (sluice.Policy{Algorithm: sluice.FixedWindowAlgorithm, Limit: 1, Period: time.Second, Penalty: out}).Validate(); err != nil {
			_, msg, _ := strings.Cut(err.Error(), "penalty: ")
			add(path, "%s", msg)
			ok = false
		}
	}
	return out, ok
}

// Replace names a limit that a RateLimit replaces.
type Replace struct {
	Name string `yaml:"name"`
}

// Problem is one thing wrong with an envoy section.
type Problem struct {
	// Line and Column locate the problem in the YAML source, counting
	// from 1; both are 0 when the configuration did not come from YAML.
	Line, Column int
	// Path is where the problem is, such as
	// "envoy[0].descriptors[1].rate_limit.unit".
	Path string
	// Message says what is wrong.
	Message string
}

// String returns the problem as "line:column: path: message", leaving out
// what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", p.Line, p.Column)
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ProblemsError is the error of a configuration that has problems.
type ProblemsError struct {
	Problems []Problem
}

// Error returns the problems, one per line.
func (e *ProblemsError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Units, as envoyproxy/ratelimit counts them: a month is 30 days and a
// year 365, whatever the calendar says.
var units = []struct {
	name   string
	period time.Duration
	unit   unitCode
}{
	{"second", time.Second, unitSecond},
	{"minute", time.Minute, unitMinute},
	{"hour", time.Hour, unitHour},
	{"day", 24 * time.Hour, unitDay},
	{"week", 7 * 24 * time.Hour, unitWeek},
	{"month", 30 * 24 * time.Hour, unitMonth},
	{"year", 365 * 24 * time.Hour, unitYear},
}

// unitCode mirrors the values of envoy.service.ratelimit.v3's
// RateLimitResponse.RateLimit.Unit.
type unitCode int32

const (
	unitSecond unitCode = 1
	unitMinute unitCode = 2
	unitHour   unitCode = 3
	unitDay    unitCode = 4
	unitMonth  unitCode = 5
	unitYear   unitCode = 6
	unitWeek   unitCode = 7
)

// parseUnit returns the unit named s, in any case.
func parseUnit(s string) (time.Duration, unitCode, bool) {
	for _, u := range units {
		if strings.EqualFold(s, u.name) {
			return u.period, u.unit, true
		}
	}
	return 0, 0, false
}

// unitPeriod returns the length of one unit.
func unitPeriod(c unitCode) (time.Duration, bool) {
	for _, u := range units {
		if u.unit == c {
			return u.period, true
		}
	}
	return 0, false
}

// maxDepth bounds the nesting of descriptors.
const maxDepth = 64

// Validate checks domains and returns every problem, each with its path
// below path (such as "envoy"; the first domain is path+"[0]"). The
// problems have no line numbers; Decode adds them for YAML input.
func Validate(domains []Domain, path string) []Problem {
	v := &validator{}
	v.domains(domains, path)
	return v.problems
}

// validator collects problems. lines, when set, maps paths to their place
// in the YAML source.
type validator struct {
	problems []Problem
	lines    map[string]pos
}

type pos struct{ line, col int }

// add records a problem at path; its place is that of path or, when path
// has none (a missing key), of the nearest enclosing path that has one.
func (v *validator) add(path, format string, args ...any) {
	p := Problem{Path: path, Message: fmt.Sprintf(format, args...)}
	for q := path; q != "" && v.lines != nil; q = parentPath(q) {
		if at, ok := v.lines[q]; ok {
			p.Line, p.Column = at.line, at.col
			break
		}
	}
	v.problems = append(v.problems, p)
}

// parentPath returns the path that encloses path: "a.b[2]" for
// "a.b[2].c", "a.b" for "a.b[2]".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func (v *validator) domains(domains []Domain, path string) {
	seen := map[string]string{}
	for i, d := range domains {
		p := fmt.Sprintf("%s[%d]", path, i)
		if d.Domain == "" {
			v.add(p+".domain", "domain is required")
		} else if first, dup := seen[d.Domain]; dup {
			v.add(p+".domain", "duplicate domain %q (first at %s)", d.Domain, first)
		} else {
			seen[d.Domain] = p
		}
		names := map[string]bool{}
		collectNames(d.Descriptors, names)
		v.descriptors(d.Descriptors, p+".descriptors", names, 1)
	}
}

// collectNames adds the name of every rate limit in ds to names.
func collectNames(ds []Descriptor, names map[string]bool) {
	for _, d := range ds {
		if d.RateLimit != nil && d.RateLimit.Name != "" {
			names[d.RateLimit.Name] = true
		}
		for _, r := range d.RateLimits {
			if r.Name != "" {
				names[r.Name] = true
			}
		}
		collectNames(d.Descriptors, names)
	}
}

func (v *validator) descriptors(ds []Descriptor, path string, names map[string]bool, depth int) {
	if depth > maxDepth {
		v.add(path, "descriptors are nested more than %d deep", maxDepth)
		return
	}
	seen := map[[2]string]string{}
	for i, d := range ds {
		p := fmt.Sprintf("%s[%d]", path, i)
		if d.Key == "" {
			v.add(p+".key", "key is required")
		}
		id := [2]string{d.Key, d.Value}
		if first, dup := seen[id]; dup && d.Key != "" {
			if d.Value == "" {
				v.add(p, "duplicate descriptor key %q without a value (first at %s)", d.Key, first)
			} else {
				v.add(p, "duplicate descriptor key %q with value %q (first at %s)", d.Key, d.Value, first)
			}
		} else {
			seen[id] = p
		}
		if d.ShareThreshold && !isWildcard(d.Value) {
			v.add(p+".share_threshold", "share_threshold needs a wildcard value (one with \"*\"), got value %q", d.Value)
		}
		var descAlgo sluice.Algorithm = sluice.FixedWindowAlgorithm
		if d.Algorithm != "" {
			a, err := sluice.ParseAlgorithm(d.Algorithm)
			switch {
			case err != nil:
				v.add(p+".algorithm", "%s", unknownAlgorithm(d.Algorithm))
			case a == sluice.ConcurrencyAlgorithm:
				v.add(p+".algorithm", "%s", noConcurrency)
			default:
				descAlgo = a
			}
		}
		switch {
		case d.RateLimit != nil && d.RateLimits != nil:
			v.add(p, "rate_limit and rate_limits are both set; use rate_limits for several limits")
		case d.RateLimit != nil:
			v.rateLimit(*d.RateLimit, p+".rate_limit", descAlgo, names)
		case d.RateLimits != nil:
			if len(d.RateLimits) == 0 {
				v.add(p+".rate_limits", "rate_limits is empty")
			}
			for j, r := range d.RateLimits {
				rp := fmt.Sprintf("%s.rate_limits[%d]", p, j)
				if r.Unlimited && len(d.RateLimits) > 1 {
					v.add(rp+".unlimited", "an unlimited limit cannot be combined with other limits")
					continue
				}
				v.rateLimit(r, rp, descAlgo, names)
			}
		}
		if d.Algorithm != "" && d.RateLimit == nil && len(d.RateLimits) == 0 {
			v.add(p+".algorithm", "algorithm is set but the descriptor has no rate_limit")
		}
		if d.Usage {
			switch {
			case d.RateLimit == nil && len(d.RateLimits) == 0:
				v.add(p+".usage", "usage is set but the descriptor has no rate_limit to charge")
			case d.RateLimit != nil && d.RateLimit.Unlimited, len(d.RateLimits) == 1 && d.RateLimits[0].Unlimited:
				v.add(p+".usage", "usage needs a limit that counts; an unlimited limit counts nothing")
			}
		}
		counts := (d.RateLimit != nil && !d.RateLimit.Unlimited) || (len(d.RateLimits) > 0 && !(len(d.RateLimits) == 1 && d.RateLimits[0].Unlimited))
		if d.QuotaMode && !counts {
			v.add(p+".quota_mode", "quota_mode is set but the descriptor has no rate_limit that counts")
		}
		if d.Metadata != nil {
			if !counts {
				v.add(p+".metadata", "metadata is returned with a descriptor's limit, and the descriptor has no rate_limit that counts")
			}
			if _, err := structpb.NewStruct(d.Metadata); err != nil {
				v.add(p+".metadata", "metadata must hold only what JSON can: %v", err)
			}
		}
		v.descriptors(d.Descriptors, p+".descriptors", names, depth+1)
	}
}

func (v *validator) rateLimit(r RateLimit, path string, descAlgo sluice.Algorithm, names map[string]bool) {
	for j, rep := range r.Replaces {
		rp := fmt.Sprintf("%s.replaces[%d].name", path, j)
		switch {
		case rep.Name == "":
			v.add(rp, "replaces entry needs a name")
		case rep.Name == r.Name:
			v.add(rp, "a limit cannot replace itself (%q)", rep.Name)
		case !names[rep.Name]:
			v.add(rp, "no rate limit in this domain is named %q", rep.Name)
		}
	}
	if r.Unlimited {
		if r.Unit != "" {
			v.add(path+".unit", "unit must not be set when unlimited is true")
		}
		if r.Algorithm != "" {
			v.add(path+".algorithm", "algorithm must not be set when unlimited is true")
		}
		if r.Burst != 0 {
			v.add(path+".burst", "burst must not be set when unlimited is true")
		}
		if r.Penalty != nil {
			v.add(path+".penalty", "penalty must not be set when unlimited is true: nothing is ever refused")
		}
		return
	}
	if r.Penalty != nil {
		if _, ok := r.Penalty.penalty(path+".penalty", v.add); !ok {
			return
		}
	}
	unitLen, _, ok := parseUnit(r.Unit)
	if !ok {
		if r.Unit == "" {
			v.add(path+".unit", "unit is required (second, minute, hour, day, week, month or year), or set unlimited: true")
		} else {
			v.add(path+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", r.Unit)
		}
	}
	algo := descAlgo
	if r.Algorithm != "" {
		a, err := sluice.ParseAlgorithm(r.Algorithm)
		if err != nil {
			v.add(path+".algorithm", "%s", unknownAlgorithm(r.Algorithm))
			return
		}
		if a == sluice.ConcurrencyAlgorithm {
			v.add(path+".algorithm", "%s", noConcurrency)
			return
		}
		algo = a
	}
	if r.RequestsPerUnit > sluice.MaxLimit {
		v.add(path+".requests_per_unit", "requests_per_unit must be at most %d, got %d", sluice.MaxLimit, r.RequestsPerUnit)
		return
	}
	switch {
	case r.Burst < 0:
		v.add(path+".burst", "burst must not be negative, got %d", r.Burst)
		return
	case r.Burst > sluice.MaxLimit:
		v.add(path+".burst", "burst must be at most %d, got %d", sluice.MaxLimit, r.Burst)
		return
	case r.Burst != 0 && !algo.HasBurst():
		v.add(path+".burst", "%s has no burst; remove burst or use token_bucket, gcra or leaky_bucket", algo)
		return
	}
	if !ok {
		return
	}
	mult := max(int64(r.UnitMultiplier), 1)
	if time.Duration(mult) > sluice.MaxPeriod/unitLen {
		v.add(path+".unit_multiplier", "the period, unit_multiplier %d × %s, is longer than 10 years", mult, strings.ToLower(r.Unit))
		return
	}
	if r.RequestsPerUnit == 0 {
		return // refuses everything; no policy to check
	}
	p := sluice.Policy{Algorithm: algo, Limit: int64(r.RequestsPerUnit), Period: time.Duration(mult) * unitLen, Burst: r.Burst}
	if err := p.Validate(); err != nil {
		v.add(path, "%v", err)
	}
}

// noConcurrency says why the envoy section takes no concurrency algorithm.
const noConcurrency = "concurrency is not available for Envoy: its rate limit protocol never says when a request ends, so a slot taken could not be released before its lease ran out; use a rate algorithm, or limit concurrency with Envoy's own circuit breakers (max_requests)"

// unknownAlgorithm says that name is no algorithm the envoy section takes.
func unknownAlgorithm(name string) string {
	return fmt.Sprintf("unknown algorithm %q (want one of token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window)", name)
}
