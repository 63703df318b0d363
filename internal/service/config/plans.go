package config

import (
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// This file holds the plans, plan_tables and proxy.body sections, a
// rule's plan, and a rule limit's charge_on (docs/plans.md).

// Plan is a named set of limits that apply together to each client on the
// plan. A plan without limits is unlimited.
type Plan struct {
	// Name is the plan's name.
	Name string
	// Limits name entries of the limits section; empty means unlimited.
	Limits []string
	// Usage holds, by limit name, the limits of the plan charged what the
	// upstream's response reports (a token budget) rather than the rule's
	// plan cost; nil when there are none.
	Usage map[string]PlanUsage
}

// PlanUsage is how a plan's limit is charged by the usage the upstream's
// response reports, as a rule limit's usage is (RuleLimit.Usage).
type PlanUsage struct {
	// Spec is where the usage is read, as a rule limit's usage.
	Spec string
	// Cost is the estimate charged when the request is decided: 0 (by
	// default) admits while the budget has a unit left.
	Cost int64
	// SettleWithin is how long after the decision the usage may settle
	// the estimate: settle_within, else the limit's.
	SettleWithin time.Duration
}

// Unlimited reports whether the plan has no limits.
func (p Plan) Unlimited() bool { return len(p.Limits) == 0 }

// Defaults of a plan table's cache.
const (
	// DefaultPlanCacheTTL is plan_tables.NAME.cache_ttl's default, that
	// of package plans (plans.DefaultCacheTTL).
	DefaultPlanCacheTTL = 5 * time.Second
	// DefaultPlanCacheSize is plan_tables.NAME.cache_size's default, that
	// of package plans (plans.DefaultCacheSize).
	DefaultPlanCacheSize = 100_000
)

// PlanTable is a table of client keys and their plans: a file, or a Redis
// hash shared by every instance.
type PlanTable struct {
	// Name is the table's name.
	Name string
	// File, when set, is the path of a CSV or YAML file of key,plan
	// (resolved against the configuration file's directory).
	File string
	// RedisHash, when set, is the key of a Redis hash of key -> plan, on
	// the store's Redis.
	RedisHash string
	// Default is the plan of keys the table does not hold; empty means
	// the rule's default.
	Default string
	// CacheTTL and CacheSize bound how long and how many answers of a
	// Redis hash each instance remembers.
	CacheTTL  time.Duration
	CacheSize int
}

// RulePlan makes a rule apply, on top of its own limits, the limits of the
// plan of each request's client.
type RulePlan struct {
	// Key is the key source that identifies the client, such as
	// "header:X-API-Key"; the plan's limits count under it.
	Key string
	// From, when set, is a key source whose value names the plan, such as
	// "header:X-Plan".
	From string
	// Table, when set, names the plan table in which the client's key is
	// looked up.
	Table string
	// Default is the plan of clients for whom nothing names a known plan:
	// the rule's default, else the table's; empty with RefuseUnknown.
	Default string
	// RefuseUnknown (unknown: refuse) refuses, with 403, the requests of
	// clients for whom nothing names a known plan, instead of giving
	// them the default plan.
	RefuseUnknown bool
	// Cost is what one request costs under the plan's limits.
	Cost int64
}

// Body bounds how the body key sources (form:NAME, json:NAME) read a
// request body.
type Body struct {
	// MaxBytes is the most of a body read for a key; a longer body gives
	// no key.
	MaxBytes int64
	// Timeout bounds the time the body takes to arrive before the
	// decision; a client that sends it slower gets 408.
	Timeout time.Duration
}

// Defaults of the proxy.body section.
const (
	// DefaultBodyMaxBytes is proxy.body.max_bytes' default, that of
	// package httplimit (httplimit.DefaultMaxBodyBytes).
	DefaultBodyMaxBytes = 64 << 10
	// DefaultBodyTimeout is proxy.body.timeout's default.
	DefaultBodyTimeout = 10 * time.Second
	// maxBodyMaxBytes bounds proxy.body.max_bytes: 16 MiB.
	maxBodyMaxBytes = 16 << 20
)

// Plan returns the plan with the given name.
func (c *Config) Plan(name string) (Plan, bool) {
	p, ok := c.plans[name]
	p.Limits, p.Usage = slices.Clone(p.Limits), maps.Clone(p.Usage)
	return p, ok
}

// Plans returns every plan, sorted by name.
func (c *Config) Plans() []Plan {
	out := make([]Plan, 0, len(c.plans))
	for _, p := range c.plans {
		p.Limits, p.Usage = slices.Clone(p.Limits), maps.Clone(p.Usage)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Plan) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PlanTable returns the plan table with the given name.
func (c *Config) PlanTable(name string) (PlanTable, bool) {
	t, ok := c.planTables[name]
	return t, ok
}

// PlanTables returns every plan table, sorted by name.
func (c *Config) PlanTables() []PlanTable {
	out := make([]PlanTable, 0, len(c.planTables))
	for _, t := range c.planTables {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b PlanTable) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// unlimited is the value that makes a plan unlimited.
const unlimited = "unlimited"

// plansSection decodes the plans section: NAME: [LIMIT, ...] or
// NAME: unlimited, where each LIMIT is a limit's name or {limit: NAME},
// with usage (and then cost and settle_within) for a limit charged what
// the upstream's response reports.
func (d *decoder) plansSection(top object, limits map[string]Limit) map[string]Plan {
	out := make(map[string]Plan)
	for _, e := range d.entries(top, "plans", "a plan name", d.declaredPlans) {
		if !e.valid {
			continue
		}
		if p, ok := d.plan(e.val, e.path, e.name, limits); ok {
			out[e.name] = p
		}
	}
	return out
}

func (d *decoder) plan(n *yaml.Node, path, name string, limits map[string]Limit) (Plan, bool) {
	p := Plan{Name: name}
	v := deref(n)
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == unlimited {
		return p, true
	}
	if !d.nonEmptyList(v, path, "must be a list of limits, like [{limit: free-hourly}], or unlimited; got", "lists no limit; list at least one, or write unlimited") {
		return p, false
	}
	good := true
	seen := make(map[string]int)
	for i, e := range v.Content {
		if !d.visit(e) {
			return p, false
		}
		ep := index(path, i)
		var lv *yaml.Node
		var o object
		entry := ep
		if ee := deref(e); ee.Kind == yaml.MappingNode {
			var ok bool
			if o, ok = d.mapping(ee, ee, ep, "limit", "usage", "cost", "settle_within"); !ok {
				good = false
				continue
			}
			if lv = o.get("limit"); lv == nil {
				d.add(ee, join(ep, "limit"), "missing: the name of a limit in the limits section")
				good = false
				continue
			}
			ep = join(ep, "limit")
		} else {
			lv = e
		}
		s, ok := d.nonEmpty(lv, ep)
		if !ok {
			good = false
			continue
		}
		_, known := limits[s]
		switch {
		case !known && d.declared[s]:
			good = false // the limit's own problems are reported
		case !known:
			d.add(deref(lv), ep, "no limit named %q in the limits section%s", s, suggest(s, sortedKeys(limits)))
			good = false
		default:
			if j, dup := seen[s]; dup {
				d.add(deref(lv), ep, "limit %q is already in this plan (%s)", s, index(path, j))
				good = false
				continue
			}
			seen[s] = i
			p.Limits = append(p.Limits, s)
			if o.fields == nil {
				continue
			}
			if u, set, ok := d.planUsage(o, entry, limits[s]); !ok {
				good = false
			} else if set {
				if p.Usage == nil {
					p.Usage = make(map[string]PlanUsage)
				}
				p.Usage[s] = u
			}
		}
	}
	return p, good
}

// planUsage decodes the usage, cost and settle_within of a plan's entry o
// at path, for limit l, and reports whether usage is set.
func (d *decoder) planUsage(o object, path string, l Limit) (u PlanUsage, set, ok bool) {
	uv := o.get("usage")
	if uv == nil {
		for _, k := range []string{"cost", "settle_within"} {
			if o.get(k) != nil {
				d.add(o.fields[k].key, join(path, k), "applies only with usage: a plan's limits are charged the rule's plan cost (plan.cost) or the request's cost, a limit with usage the estimate cost and then what the response reports")
				return u, false, false
			}
		}
		return u, false, true
	}
	up, at := join(path, "usage"), o.fields["usage"].key
	s, good := d.nonEmpty(uv, up)
	if !good || !d.checked(d.formats.Usage, uv, up, s) {
		return u, true, false
	}
	switch {
	case l.Policy.Algorithm == sluice.ConcurrencyAlgorithm:
		d.add(at, up, "limit %q is a concurrency limit: it holds a slot while the request runs and charges nothing to settle; remove usage", l.Name())
		return u, true, false
	case l.Shadow:
		d.add(at, up, "limit %q is a dry run (shadow: true), which is charged apart from the request and not settled; remove usage or shadow", l.Name())
		return u, true, false
	}
	u = PlanUsage{Spec: s, SettleWithin: l.Settle()}
	if v := o.get("cost"); v != nil {
		cp := join(path, "cost")
		c, ok := d.integer(v, cp, 0, sluice.MaxLimit)
		if !ok {
			return u, true, false
		}
		if c > l.Policy.Capacity() {
			d.add(deref(v), cp, "%d exceeds the capacity of limit %q (%d): no request could ever pass", c, l.Name(), l.Policy.Capacity())
			return u, true, false
		}
		u.Cost = c
	}
	if v := o.get("settle_within"); v != nil {
		x, ok := d.duration(v, join(path, "settle_within"), MaxSettleWithin)
		if !ok {
			return u, true, false
		}
		u.SettleWithin = x
	}
	return u, true, true
}

// planTables decodes the plan_tables section. A table file is read now,
// so that a missing or malformed file is a problem of the configuration.
func (d *decoder) planTables(top object, plansByName map[string]Plan, store Store) map[string]PlanTable {
	out := make(map[string]PlanTable)
	known := sortedKeys(plansByName)
	for _, e := range d.entries(top, "plan_tables", "a table name", d.declaredTables) {
		if !e.valid {
			continue
		}
		o, ok := d.mapping(e.key, e.val, e.path, "file", "redis_hash", "default", "cache_ttl", "cache_size")
		if !ok {
			continue
		}
		t := PlanTable{Name: e.name, CacheTTL: DefaultPlanCacheTTL, CacheSize: DefaultPlanCacheSize}
		good := d.tableSource(e.key, o, e.path, known, store, &t)
		good = d.tableOptions(e.key, o, e.path, plansByName, &t) && good
		if good {
			out[e.name] = t
		}
	}
	return out
}

// either returns the values of o's keys a and b, exactly one of which
// must be set: else it adds a problem, saying why for both ("cannot be
// combined with a; " then why) or what is needed for neither ("needs "
// then needs), and returns false. at is o's key.
func (d *decoder) either(at *yaml.Node, o object, path, a, b, why, needs string) (av, bv *yaml.Node, ok bool) {
	av, bv = o.get(a), o.get(b)
	switch {
	case av != nil && bv != nil:
		d.add(o.fields[b].key, join(path, b), "cannot be combined with %s; %s", a, why)
		return nil, nil, false
	case av == nil && bv == nil:
		d.add(at, path, "needs %s", needs)
		return nil, nil, false
	}
	return av, bv, true
}

// tableSource decodes where a plan table is, file or redis_hash, into t;
// at is the table's key.
func (d *decoder) tableSource(at *yaml.Node, o object, path string, known []string, store Store, t *PlanTable) bool {
	fv, rv, ok := d.either(at, o, path, "file", "redis_hash",
		"a table is a file or a Redis hash", "file (a CSV or YAML file of key,plan) or redis_hash (a Redis hash of key -> plan)")
	if !ok {
		return false
	}
	if rv != nil {
		h, ok := d.nonEmpty(rv, join(path, "redis_hash"))
		if !ok {
			return false
		}
		t.RedisHash = h
		if store.Backend != RedisBackend {
			d.add(deref(rv), join(path, "redis_hash"), "needs store.backend: redis (the table is read from store.redis)")
			return false
		}
		return true
	}
	fp, ok := d.nonEmpty(fv, join(path, "file"))
	if !ok {
		return false
	}
	t.File = d.relative(fp)
	if msg := d.checkTableFile(t.File, known); msg != "" {
		d.add(deref(fv), join(path, "file"), "%s", msg)
		return false
	}
	return true
}

// tableOptions decodes a plan table's default, cache_ttl and cache_size
// into t, whose source is decoded; at is the table's key.
func (d *decoder) tableOptions(at *yaml.Node, o object, path string, plansByName map[string]Plan, t *PlanTable) bool {
	good := true
	if v := o.get("default"); v != nil {
		if s, ok := d.planName(v, join(path, "default"), plansByName); ok {
			t.Default = s
		} else {
			good = false
		}
	}
	if v := o.get("cache_ttl"); v != nil {
		if x, ok := d.duration(v, join(path, "cache_ttl"), time.Hour); ok {
			t.CacheTTL = x
		} else {
			good = false
		}
	}
	if v := o.get("cache_size"); v != nil {
		if x, ok := d.integer(v, join(path, "cache_size"), 2, 100_000_000); ok {
			t.CacheSize = int(x)
		} else {
			good = false
		}
	}
	if (o.get("cache_ttl") != nil || o.get("cache_size") != nil) && t.File != "" {
		d.add(at, path, "cache_ttl and cache_size apply to redis_hash tables; a file is held in memory whole")
		good = false
	}
	return good
}

// planName decodes the name of a plan of the plans section.
func (d *decoder) planName(n *yaml.Node, path string, plansByName map[string]Plan) (string, bool) {
	s, ok := d.nonEmpty(n, path)
	if !ok {
		return "", false
	}
	if _, known := plansByName[s]; !known {
		if !d.declaredPlans[s] {
			d.add(deref(n), path, "no plan named %q in the plans section%s", s, suggest(s, sortedKeys(plansByName)))
		}
		return "", false
	}
	return s, true
}

// sortedKeys returns the names of m in order, for messages.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// rulePlan decodes a rule's plan: {key, from | table, default | unknown,
// cost}.
func (d *decoder) rulePlan(at, n *yaml.Node, path string) (*RulePlan, bool) {
	o, ok := d.mapping(at, n, path, "key", "from", "table", "default", "unknown", "cost")
	if !ok {
		return nil, false
	}
	if len(d.plans) == 0 && len(d.declaredPlans) == 0 {
		d.add(at, path, "there is no plans section to pick a plan from")
		return nil, false
	}
	p := &RulePlan{Cost: 1}
	good := true
	if v := o.get("key"); v == nil {
		d.add(at, join(path, "key"), "missing: the key source that identifies the client, like header:X-API-Key; the plan's limits count under it")
		good = false
	} else if s, ok := d.keyField(v, join(path, "key")); ok {
		p.Key = s
	} else {
		good = false
	}
	good = d.planSource(at, o, path, p) && good
	if v := o.get("unknown"); v != nil {
		s, ok := d.nonEmpty(v, join(path, "unknown"))
		switch {
		case !ok:
			good = false
		case s == "refuse":
			p.RefuseUnknown, p.Default = true, ""
			if o.get("default") != nil {
				d.add(deref(v), join(path, "unknown"), "refuse cannot be combined with default: a client for whom nothing names a known plan is either refused or given the default plan")
				good = false
			}
		case s != "default":
			d.add(deref(v), join(path, "unknown"), "must be refuse (answer 403 to a client for whom nothing names a known plan) or default (give it the default plan), got %q", s)
			good = false
		}
	}
	if p.RefuseUnknown {
		// No default plan is needed.
	} else if v := o.get("default"); v != nil {
		if s, ok := d.planName(v, join(path, "default"), d.plans); ok {
			p.Default = s
		} else {
			good = false
		}
	} else if good && p.Default == "" {
		d.add(at, join(path, "default"), "missing: the plan of clients for whom nothing names a known plan, like free")
		good = false
	}
	if v := o.get("cost"); v != nil {
		c, ok := d.integer(v, join(path, "cost"), 1, sluice.MaxLimit)
		if ok {
			p.Cost = c
		}
		good = good && ok
	}
	return p, good && d.planCostFits(at, path, p.Cost)
}

// planSource decodes where a rule's plan comes from, a key source (from)
// or a plan table (table), into p; a table brings its default.
func (d *decoder) planSource(at *yaml.Node, o object, path string, p *RulePlan) bool {
	fv, tv, ok := d.either(at, o, path, "from", "table",
		"the plan comes from a key source or a table", "from (a key source naming the plan, like header:X-Plan) or table (a plan table to look the key up in)")
	switch {
	case !ok:
		return false
	case fv != nil:
		s, ok := d.keyField(fv, join(path, "from"))
		p.From = s
		return ok
	}
	s, ok := d.nonEmpty(tv, join(path, "table"))
	if !ok {
		return false
	}
	t, known := d.tables[s]
	if !known {
		if !d.declaredTables[s] {
			names := slices.Sorted(maps.Keys(d.tables))
			d.add(deref(tv), join(path, "table"), "no table named %q in the plan_tables section%s", s, suggest(s, names))
		}
		return false
	}
	p.Table, p.Default = s, t.Default
	return true
}

// planCostFits reports whether a rule's plan cost fits every plan's
// limits, recording a problem for each limit it exceeds.
func (d *decoder) planCostFits(at *yaml.Node, path string, cost int64) bool {
	good := true
	for _, name := range sortedKeys(d.plans) {
		for _, ln := range d.plans[name].Limits {
			if _, byUsage := d.plans[name].Usage[ln]; byUsage {
				continue // charged its own estimate
			}
			if l := d.limitsByName[ln]; cost > l.Policy.Capacity() {
				d.add(at, join(path, "cost"), "%d exceeds the capacity of limit %q (%d) of plan %q: no request on that plan could pass", cost, ln, l.Policy.Capacity(), name)
				good = false
			}
		}
	}
	return good
}

// chargeOn decodes a rule limit's charge_on: a list of HTTP statuses.
func (d *decoder) chargeOn(n *yaml.Node, path string) ([]int, bool) {
	v := deref(n)
	if !d.nonEmptyList(v, path, "must be a list of HTTP statuses, like [401, 403], got", "is empty; remove it to charge every request") {
		return nil, false
	}
	var out []int
	good := true
	for i, e := range v.Content {
		if !d.visit(e) {
			return nil, false
		}
		s, ok := d.integer(e, index(path, i), 100, 599)
		if !ok {
			good = false
			continue
		}
		if slices.Contains(out, int(s)) {
			d.add(deref(e), index(path, i), "status %d is listed twice", s)
			good = false
			continue
		}
		out = append(out, int(s))
	}
	return out, good
}

// body decodes proxy.body.
func (d *decoder) body(at, n *yaml.Node) Body {
	b := Body{MaxBytes: DefaultBodyMaxBytes, Timeout: DefaultBodyTimeout}
	o, ok := d.mapping(at, n, "proxy.body", "max_bytes", "timeout")
	if !ok {
		return b
	}
	if v := o.get("max_bytes"); v != nil {
		if x, ok := d.integer(v, "proxy.body.max_bytes", 1, maxBodyMaxBytes); ok {
			b.MaxBytes = x
		}
	}
	if v := o.get("timeout"); v != nil {
		if x, ok := d.duration(v, "proxy.body.timeout", time.Hour); ok {
			b.Timeout = x
		}
	}
	return b
}
