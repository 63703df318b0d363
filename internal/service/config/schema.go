package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// document decodes a whole configuration file.
func (d *decoder) document(r io.Reader) *Config {
	dec := yaml.NewDecoder(r)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(nil, "", "the file is empty (see docs/configuration.md)")
		} else {
			d.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(&extra, "", "a second YAML document (---); a configuration file holds one")
	} else if !errors.Is(err, io.EOF) {
		d.syntax(err)
	}
	if len(doc.Content) != 1 {
		d.add(&doc, "", "the file holds no YAML document")
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		d.add(root, "", "the file is empty (see docs/configuration.md)")
		return nil
	}
	top, ok := d.mapping(root, root, "", "listen", "store", "limits", "plans", "plan_tables", "proxy", "envoy", "admin", "tracing", "decision_log")
	if !ok {
		return nil
	}
	c := &Config{
		listen: d.listen(top),
		store:  d.store(top),
		limits: d.limits(top),
	}
	c.names = make([]string, 0, len(c.limits))
	for name := range c.limits {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	d.limitsByName = c.limits
	d.declaredPlans, d.declaredTables = make(map[string]bool), make(map[string]bool)
	c.plans = d.plansSection(top, c.limits)
	d.plans = c.plans
	c.planTables = d.planTables(top, c.plans, c.store)
	d.tables = c.planTables
	if n := top.get("proxy"); n != nil {
		c.proxy = d.proxy(top.fields["proxy"].key, n, c.limits)
	}
	if n := top.get("envoy"); n != nil {
		c.envoy = d.envoy(top.fields["envoy"].key, n, c.listen)
	}
	if n := top.get("admin"); n != nil {
		c.admin = d.admin(top.fields["admin"].key, n)
	}
	if n := top.get("tracing"); n != nil {
		c.tracing = d.tracingSection(top.fields["tracing"].key, n)
	}
	if n := top.get("decision_log"); n != nil {
		c.decisionLog = d.decisionLogSection(top.fields["decision_log"].key, n)
	}
	return c
}

// envoy checks the envoy section with Formats.Envoy (package rls owns its
// format, envoyproxy/ratelimit's domain documents) and returns its value,
// or nil when it has problems.
func (d *decoder) envoy(at, n *yaml.Node, listen Listen) *yaml.Node {
	if listen.GRPC == "" {
		d.add(at, "envoy", "is set but listen.grpc is not, so Envoy's rate limit service would be off; set listen.grpc, like 127.0.0.1:8081")
	}
	if !d.envoySection(at, n) {
		return nil
	}
	return n
}

// syntax records a YAML syntax error, with its line when the message has
// one ("yaml: line 3: ...").
func (d *decoder) syntax(err error) {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	p := Problem{File: d.file}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				p.Line, msg = line, text
			}
		}
	}
	p.Message = "invalid YAML: " + msg
	d.problems = append(d.problems, p)
}

func (d *decoder) listen(top object) Listen {
	l := Listen{HTTP: DefaultHTTPAddr}
	n := top.get("listen")
	if n == nil {
		return l
	}
	o, ok := d.mapping(top.fields["listen"].key, n, "listen", "http", "grpc", "admin", "tls", "tokens_file")
	if !ok {
		return l
	}
	if v := o.get("http"); v != nil {
		if s, ok := d.addr(v, "listen.http"); ok {
			l.HTTP = s
		}
	}
	if v := o.get("grpc"); v != nil {
		if s, ok := d.addr(v, "listen.grpc"); ok {
			l.GRPC = s
			if s == l.HTTP && !strings.HasSuffix(s, ":0") {
				d.add(deref(v), "listen.grpc", "must differ from listen.http (%s)", l.HTTP)
			}
		}
	}
	if v := o.get("admin"); v != nil {
		d.listenAdmin(v, &l)
	}
	d.listenSecurity(o, &l) // listentls.go
	return l
}

// addr decodes a host:port address.
func (d *decoder) addr(n *yaml.Node, path string) (string, bool) {
	s, ok := d.nonEmpty(n, path)
	if !ok {
		return "", false
	}
	if msg := checkAddr(s); msg != "" {
		d.add(deref(n), path, "%s", msg)
		return "", false
	}
	return s, true
}

// checkAddr returns what is wrong with a host:port address, or "".
func checkAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not an address host:port, like 127.0.0.1:8080 or :8080", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || (port[0] == '0' && p != 0) {
		return fmt.Sprintf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !tlsauth.ValidDNSName(host) {
		return fmt.Sprintf("%q: %q is neither an IP address nor a host name", s, host)
	}
	return ""
}

var (
	backends = []string{string(MemoryBackend), string(RedisBackend)}
	onErrors = []string{string(OnErrorAllow), string(OnErrorDeny), string(OnErrorLocal), string(OnErrorFail)}
)

func (d *decoder) store(top object) Store {
	s := Store{Backend: MemoryBackend, Timeout: DefaultTimeout, OnError: DefaultOnError}
	n := top.get("store")
	if n == nil {
		return s
	}
	o, ok := d.mapping(top.fields["store"].key, n, "store", "backend", "redis", "timeout", "on_error")
	if !ok {
		return s
	}
	backendKnown := true
	if v := o.get("backend"); v != nil {
		b, ok := d.oneOf(v, "store.backend", "backend", backends)
		if ok {
			s.Backend = Backend(b)
		}
		backendKnown = ok
	}
	if v := o.get("timeout"); v != nil {
		if t, ok := d.duration(v, "store.timeout", time.Minute); ok {
			s.Timeout = t
		}
	}
	if v := o.get("on_error"); v != nil {
		if e, ok := d.oneOf(v, "store.on_error", "failure policy", onErrors); ok {
			s.OnError = OnError(e)
		}
	}
	rv := o.get("redis")
	switch {
	case rv == nil && s.Backend == RedisBackend:
		d.add(o.fields["backend"].key, "store.redis", "missing: the redis backend needs store.redis.addrs")
	case rv == nil:
	default:
		if s.Backend != RedisBackend && backendKnown {
			d.add(o.fields["redis"].key, "store.redis", "is set but store.backend is %q; set backend: redis, or remove this section", s.Backend)
		}
		d.redis(o.fields["redis"].key, rv, &s.Redis)
	}
	return s
}

// oneOf decodes a string that must be one of known; what names the kind
// of value in the message.
func (d *decoder) oneOf(n *yaml.Node, path, what string, known []string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(known, s) {
		d.add(deref(n), path, "unknown %s %q (want %s)%s", what, s, list(known), suggest(s, known))
		return "", false
	}
	return s, true
}

// redis decodes store.redis, the value n of the key at, into r.
func (d *decoder) redis(at, n *yaml.Node, r *Redis) {
	ro, ok := d.mapping(at, n, "store.redis", "addrs", "prefix", "max_batch", "username", "password", "password_file", "tls", "sentinel", "local_refusals")
	if !ok {
		return
	}
	d.redisAuth(ro, r)
	if v := ro.get("local_refusals"); v != nil {
		r.LocalRefusals = d.localRefusals(ro.fields["local_refusals"].key, v)
	}
	if v := ro.get("max_batch"); v != nil {
		if n, ok := d.integer(v, "store.redis.max_batch", 1, 1024); ok {
			r.MaxBatch = int(n)
		}
	}
	r.Prefix = DefaultRedisPrefix
	if v := ro.get("prefix"); v != nil {
		if p, ok := d.str(v, "store.redis.prefix"); ok {
			switch err := d.redisPrefix(p); {
			case p == "":
				d.add(deref(v), "store.redis.prefix", "must not be empty; leave it out for the default %q", DefaultRedisPrefix)
			case err != nil:
				d.add(deref(v), "store.redis.prefix", "%q %v", p, err)
			default:
				r.Prefix = p
			}
		}
	}
	av := ro.get("addrs")
	if av == nil {
		d.add(ro.at, "store.redis.addrs", "missing: list the Redis addresses, like [127.0.0.1:6379]")
		return
	}
	if addrs, ok := d.strs(av, "store.redis.addrs", "[127.0.0.1:6379]", checkAddr); ok {
		if len(addrs) == 0 {
			d.add(deref(av), "store.redis.addrs", "must list at least one address")
		}
		r.Addrs = addrs
	}
}

// localRefusals decodes store.redis.local_refusals: enabled (default
// true), max_entries and max_bytes.
func (d *decoder) localRefusals(at, v *yaml.Node) LocalRefusals {
	const path = "store.redis.local_refusals"
	var lr LocalRefusals
	o, ok := d.mapping(at, v, path, "enabled", "max_entries", "max_bytes")
	if !ok {
		return lr
	}
	if v := o.get("enabled"); v != nil {
		if on, ok := d.boolean(v, path+".enabled"); ok {
			lr.Off = !on
		}
	}
	if v := o.get("max_entries"); v != nil {
		if n, ok := d.integer(v, path+".max_entries", 1, 100_000_000); ok {
			lr.MaxEntries = int(n)
		}
	}
	if v := o.get("max_bytes"); v != nil {
		if n, ok := d.integer(v, path+".max_bytes", 4096, 1<<40); ok {
			lr.MaxBytes = n
		}
	}
	return lr
}

var limitKeys = []string{"algorithm", "limit", "period", "lease", "time_zone", "week_starts", "burst", "shadow", "settle_within", "penalty"}

// penalty decodes a limit's penalty (sluice.Penalty): block_for, and
// optionally factor, max_block and forget_after.
func (d *decoder) penalty(at, n *yaml.Node, path string) (sluice.Penalty, bool) {
	var p sluice.Penalty
	o, ok := d.mapping(at, n, path, "block_for", "factor", "max_block", "forget_after")
	if !ok {
		return p, false
	}
	good := true
	if v := o.get("block_for"); v == nil {
		d.add(at, join(path, "block_for"), "missing: how long a refusal blocks the key, like 1m")
		good = false
	} else if x, ok := d.duration(v, join(path, "block_for"), sluice.MaxPeriod); ok {
		p.BlockFor = x
	} else {
		good = false
	}
	if v := o.get("factor"); v != nil {
		if x, ok := d.integer(v, join(path, "factor"), 1, sluice.MaxFactor); ok {
			p.Factor = x
		} else {
			good = false
		}
	}
	if v := o.get("max_block"); v != nil {
		if x, ok := d.duration(v, join(path, "max_block"), sluice.MaxPeriod); !ok {
			good = false
		} else if x < p.BlockFor {
			d.add(deref(v), join(path, "max_block"), "must be at least block_for (%s), got %s", formatDuration(p.BlockFor), formatDuration(x))
			good = false
		} else {
			p.MaxBlock = x
		}
	}
	if v := o.get("forget_after"); v != nil {
		if x, ok := d.duration(v, join(path, "forget_after"), sluice.MaxPeriod); ok {
			p.ForgetAfter = x
		} else {
			good = false
		}
	}
	if good && p.Factor > 1 && p.ForgetAfter == 0 {
		d.add(o.fields["factor"].key, join(path, "factor"), "a factor above 1 needs forget_after: without it every offence is forgotten when its block ends, and no block grows")
		good = false
	}
	return p, good
}

func algorithmNames() []string {
	var names []string
	for _, a := range sluice.Algorithms() {
		names = append(names, a.String())
	}
	return append(names, sluice.ConcurrencyAlgorithm.String())
}

// lease decodes a concurrency limit's lease into p.Period: how long an
// admitted request holds its slot if it is never released. A concurrency
// limit has no period, calendar or burst.
func (d *decoder) lease(at *yaml.Node, o object, path string, p *sluice.Policy) bool {
	good := true
	for _, k := range []string{"period", "time_zone", "week_starts"} {
		if kv := o.get(k); kv != nil {
			d.add(o.fields[k].key, join(path, k), "a concurrency limit counts what is in flight, not a rate: it has no %s; give its lease instead (how long a slot is held if never released, like 30s)", k)
			good = false
		}
	}
	v := o.get("lease")
	if v == nil {
		d.add(at, join(path, "lease"), "missing: how long an admitted request holds its slot if it is never released, like 30s (longer than your slowest request)")
		return false
	}
	x, ok := d.duration(v, join(path, "lease"), sluice.MaxPeriod)
	p.Period = x
	return good && ok
}

func (d *decoder) limits(top object) map[string]Limit {
	out := make(map[string]Limit)
	for _, e := range d.entries(top, "limits", "a limit name", d.declared) {
		// An entry with a bad name is decoded too, for its problems.
		l, ok := d.limit(e.key, e.val, e.path, e.name)
		if ok && e.valid {
			out[e.name] = l
		}
	}
	return out
}

func (d *decoder) limit(at, n *yaml.Node, path, name string) (Limit, bool) {
	o, ok := d.mapping(at, n, path, limitKeys...)
	if !ok {
		return Limit{}, false
	}
	p := sluice.Policy{Name: name}
	good, algOK := true, false
	var settle time.Duration
	if v := o.get("algorithm"); v == nil {
		d.add(at, join(path, "algorithm"), "missing (want %s)", list(algorithmNames()))
		good = false
	} else if s, ok := d.str(v, join(path, "algorithm")); !ok {
		good = false
	} else if a, err := sluice.ParseAlgorithm(s); err != nil {
		d.add(deref(v), join(path, "algorithm"), "unknown algorithm %q (want %s)%s", s, list(algorithmNames()), suggest(s, algorithmNames()))
		good = false
	} else {
		p.Algorithm = a
		algOK = true
	}
	if v := o.get("limit"); v == nil {
		d.add(at, join(path, "limit"), "missing: how many cost units each key may spend per period")
		good = false
	} else if x, ok := d.integer(v, join(path, "limit"), 1, sluice.MaxLimit); ok {
		p.Limit = x
	} else {
		good = false
	}
	if algOK && p.Algorithm == sluice.ConcurrencyAlgorithm {
		if !d.lease(at, o, path, &p) {
			good = false
		}
		if v := o.get("settle_within"); v != nil {
			d.add(o.fields["settle_within"].key, join(path, "settle_within"), "a concurrency limit holds units while a request runs and charges no cost to settle; its lease says how long")
			good = false
		}
	} else {
		if v := o.get("lease"); v != nil && algOK {
			d.add(o.fields["lease"].key, join(path, "lease"), "applies only to algorithm concurrency (how long a slot is held if never released); %s counts a rate over its period (settle_within says how long its costs may be settled)", p.Algorithm)
			good = false
		}
		if v := o.get("settle_within"); v != nil {
			// How long a check's cost may be settled with the usage
			// the client reports after it.
			if x, ok := d.duration(v, join(path, "settle_within"), MaxSettleWithin); ok {
				settle = x
			} else {
				good = false
			}
		}
		if !d.period(at, o, path, &p, algOK) {
			good = false
		}
	}
	if v := o.get("burst"); v != nil {
		bp := join(path, "burst")
		vv := deref(v)
		switch {
		case good && !p.Algorithm.HasBurst():
			d.add(vv, bp, "%s has no burst: its capacity is its limit; remove burst, or use token_bucket, gcra or leaky_bucket", p.Algorithm)
			good = false
		default:
			// 0 means the limit, as in sluice.TokenBucket(limit, period, 0)
			// and the overrides API: one rule everywhere.
			if x, ok := d.integer(v, bp, 0, sluice.MaxLimit); ok {
				p.Burst = x
			} else {
				good = false
			}
		}
	}
	var shadow bool
	if v := o.get("shadow"); v != nil {
		shadow, ok = d.boolean(v, join(path, "shadow"))
		good = good && ok
		if shadow && algOK && p.Algorithm == sluice.ConcurrencyAlgorithm {
			d.add(o.fields["shadow"].key, join(path, "shadow"), "a concurrency limit cannot be a dry run: a dry run is charged apart from the request and would hold a slot that nothing releases; remove shadow")
			good = false
		}
		if shadow && settle > 0 {
			d.add(o.fields["settle_within"].key, join(path, "settle_within"), "a dry run's cost is never settled: it is charged apart from the request, as estimated; remove settle_within or shadow")
			good = false
		}
	}
	if v := o.get("penalty"); v != nil {
		pp := join(path, "penalty")
		switch {
		case algOK && p.Algorithm == sluice.ConcurrencyAlgorithm:
			d.add(o.fields["penalty"].key, pp, "a concurrency limit refuses what is in flight, not a rate: it takes no penalty")
			good = false
		case settle > 0:
			d.add(o.fields["penalty"].key, pp, "a limit whose costs are settled afterwards (settle_within) takes no penalty; remove one of them")
			good = false
		default:
			pen, ok := d.penalty(o.fields["penalty"].key, v, pp)
			p.Penalty = pen
			good = good && ok
		}
	}
	if !good {
		return Limit{}, false
	}
	if err := p.Validate(); err != nil {
		// The field checks above leave only the combined bound.
		d.add(at, path, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("%v: policy %q: ", sluice.ErrInvalidPolicy, name)))
		return Limit{}, false
	}
	return Limit{Policy: p, Shadow: shadow, SettleWithin: settle}, true
}

func (d *decoder) proxy(at, n *yaml.Node, limits map[string]Limit) *Proxy {
	o, ok := d.mapping(at, n, "proxy", "upstream", "trusted_proxies", "rules", "body")
	if !ok {
		return nil
	}
	p := &Proxy{Body: Body{MaxBytes: DefaultBodyMaxBytes, Timeout: DefaultBodyTimeout}}
	if v := o.get("body"); v != nil {
		p.Body = d.body(o.fields["body"].key, v)
	}
	if v := o.get("upstream"); v != nil {
		if s, ok := d.nonEmpty(v, "proxy.upstream"); ok {
			u, msg := parseUpstream(s)
			if msg != "" {
				d.add(deref(v), "proxy.upstream", "%s", msg)
			}
			p.Upstream = u
		}
	}
	if v := o.get("trusted_proxies"); v != nil {
		d.strs(v, "proxy.trusted_proxies", "[127.0.0.1/32, 10.0.0.0/8]", func(s string) string {
			pfx, ok := parsePrefix(s)
			if !ok {
				return fmt.Sprintf("%q is not an IP address or a CIDR prefix, like 10.0.0.0/8 or 127.0.0.1", s)
			}
			p.TrustedProxies = append(p.TrustedProxies, pfx)
			return ""
		})
	}
	if v := o.get("rules"); v != nil {
		d.upstream = p.Upstream != nil
		p.Rules = d.rules(v, limits)
	}
	return p
}

// parsePrefix parses a CIDR prefix ("10.0.0.0/8") or a single address
// ("127.0.0.1", meaning /32 or /128) of proxy.trusted_proxies, as
// httplimit.ParseTrustedProxies does: an IPv4-mapped IPv6 address or
// prefix becomes IPv4, and the prefix is masked.
func parsePrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), true
}

// parseUpstream parses an upstream URL, returning what is wrong with it.
func parseUpstream(s string) (*url.URL, string) {
	if !strings.Contains(s, "://") {
		return nil, fmt.Sprintf("%q is not a URL with a scheme, like http://127.0.0.1:9000", s)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("%q is not a URL: %v", s, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Sprintf("%q: the scheme must be http or https, like http://127.0.0.1:9000", s)
	case u.Host == "":
		return nil, fmt.Sprintf("%q has no host, like http://127.0.0.1:9000", s)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Sprintf("%q: an upstream URL has no query or fragment", s)
	case u.User != nil:
		return nil, fmt.Sprintf("%q: an upstream URL has no user information", s)
	}
	if msg := checkAddr(hostPort(u)); msg != "" {
		return nil, fmt.Sprintf("%q: %s", s, msg)
	}
	return u, ""
}

// hostPort returns the URL's host with its port, the scheme's default
// port when it has none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func (d *decoder) rules(n *yaml.Node, limits map[string]Limit) []Rule {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		d.add(n, "proxy.rules", "must be a list of rules, got %s", describe(n))
		return nil
	}
	var out []Rule
	names := make(map[string]int) // rule name -> line
	for i, e := range n.Content {
		if !d.visit(e) {
			return nil
		}
		path := index("proxy.rules", i)
		r, ok := d.rule(deref(e), path, limits)
		if r.Name != "" {
			if line, dup := names[r.Name]; dup {
				d.add(deref(e), join(path, "name"), "duplicate rule name %q (first used on line %d)", r.Name, line)
				ok = false
			} else {
				names[r.Name] = deref(e).Line
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

func (d *decoder) rule(n *yaml.Node, path string, limits map[string]Limit) (Rule, bool) {
	o, ok := d.mapping(n, n, path, "name", "match", "limits", "plan")
	if !ok {
		return Rule{}, false
	}
	r := Rule{Line: n.Line}
	good := true
	if v := o.get("name"); v != nil {
		np := join(path, "name")
		if s, ok := d.nonEmpty(v, np); !ok {
			good = false
		} else if !validName(s) {
			d.add(deref(v), np, "a rule name must be 1 to %d letters, digits, '_' or '-', starting with a letter or digit", maxNameLen)
			good = false
		} else {
			r.Name = s
		}
	}
	if v := o.get("match"); v != nil {
		m, ok := d.match(o.fields["match"].key, v, join(path, "match"))
		r.Match = m
		good = good && ok
	}
	if v := o.get("plan"); v != nil {
		rp, ok := d.rulePlan(o.fields["plan"].key, v, join(path, "plan"))
		r.Plan = rp
		good = good && ok
	}
	lv := o.get("limits")
	if lv == nil && r.Plan != nil {
		return r, good // the plan's limits alone
	}
	if lv == nil {
		if o.get("plan") == nil {
			d.add(n, join(path, "limits"), "missing: list the limits this rule charges, like [{limit: per-ip, key: ip}]")
		}
		return r, false
	}
	rl, ok := d.ruleLimits(lv, join(path, "limits"), limits, r.Plan != nil)
	r.Limits = rl
	return r, good && ok
}

// ruleLimits decodes a rule's limits, the list n at path lp; withPlan
// says whether the rule applies a plan, whose limits it may not charge
// again.
func (d *decoder) ruleLimits(n *yaml.Node, lp string, limits map[string]Limit, withPlan bool) ([]RuleLimit, bool) {
	ln := deref(n)
	if !d.nonEmptyList(ln, lp, "must be a list, like [{limit: per-ip, key: ip}], got", "must list at least one limit") {
		return nil, false
	}
	var out []RuleLimit
	good := true
	used := make(map[string]int) // limit name -> index in this rule
	for i, e := range ln.Content {
		if !d.visit(e) {
			return out, false
		}
		rl, ok := d.ruleLimit(deref(e), index(lp, i), limits)
		if ok {
			if j, dup := used[rl.Limit]; dup {
				// One limit is one policy: its name labels the RateLimit
				// fields and its state, so it is charged once per request.
				d.add(deref(e), join(index(lp, i), "limit"), "limit %q is already charged by %s; define another limit with the same numbers to count a second key", rl.Limit, index(lp, j))
				ok = false
			} else {
				used[rl.Limit] = i
			}
		}
		if ok && withPlan {
			for _, pn := range sortedKeys(d.plans) {
				if slices.Contains(d.plans[pn].Limits, rl.Limit) {
					d.add(deref(e), join(index(lp, i), "limit"), "limit %q is also a limit of plan %q, which this rule applies; define another limit with the same numbers", rl.Limit, pn)
					ok = false
					break
				}
			}
		}
		good = good && ok
		out = append(out, rl)
	}
	return out, good
}

func (d *decoder) match(at, n *yaml.Node, path string) (Match, bool) {
	o, ok := d.mapping(at, n, path, "path_prefix", "methods")
	if !ok {
		return Match{}, false
	}
	var m Match
	good := true
	if v := o.get("path_prefix"); v != nil {
		pp := join(path, "path_prefix")
		if s, ok := d.nonEmpty(v, pp); !ok {
			good = false
		} else if s[0] != '/' {
			d.add(deref(v), pp, "must start with /, got %q", s)
			good = false
		} else if why := unmatchablePrefix(s); why != "" {
			d.add(deref(v), pp, "%q can never match: %s", s, why)
			good = false
		} else {
			m.PathPrefix = s
		}
	}
	if v := o.get("methods"); v != nil {
		mp := join(path, "methods")
		methods, ok := d.strs(v, mp, "[GET, POST]", func(s string) string {
			// A method is an RFC 9110 token, the syntax of a field name.
			if !httpguts.ValidHeaderFieldName(s) {
				return fmt.Sprintf("%q is not an HTTP method", s)
			}
			return ""
		})
		if ok && len(methods) == 0 {
			d.add(deref(v), mp, "is empty; remove it to match every method")
			ok = false
		}
		for i, s := range methods {
			methods[i] = strings.ToUpper(s)
		}
		m.Methods = methods
		good = good && ok
	}
	return m, good
}

// unmatchablePrefix says why no request path can start with the path
// prefix p, or returns "" when one can. Rules match the path in normal
// form (package server's normalPath, decoded): it has no empty or dot
// segment, and no backslash or NUL, which are refused.
func unmatchablePrefix(p string) string {
	switch {
	case strings.Contains(p, "//"):
		return "requests are matched with repeated slashes merged"
	case strings.Contains(p, "/./") || strings.Contains(p, "/../"):
		return "requests are matched with dot segments removed"
	case strings.ContainsAny(p, "\\\x00"):
		return "a path with a backslash or NUL is refused"
	}
	return ""
}

func (d *decoder) ruleLimit(n *yaml.Node, path string, limits map[string]Limit) (RuleLimit, bool) {
	o, ok := d.mapping(n, n, path, "limit", "key", "cost", "charge_on", "usage", "settle_within")
	if !ok {
		return RuleLimit{}, false
	}
	rl := RuleLimit{Cost: 1}
	good := true
	var lim Limit
	var known bool
	if v := o.get("limit"); v == nil {
		d.add(n, join(path, "limit"), "missing: the name of a limit in the limits section")
		good = false
	} else if s, ok := d.nonEmpty(v, join(path, "limit")); !ok {
		good = false
	} else if lim, known = limits[s]; !known && d.declared[s] {
		good = false // the limit's own problems are reported
	} else if !known {
		d.add(deref(v), join(path, "limit"), "no limit named %q in the limits section%s", s, suggest(s, sortedKeys(limits)))
		good = false
	} else if lim.Policy.Algorithm == sluice.ConcurrencyAlgorithm && !d.upstream {
		d.add(deref(v), join(path, "limit"), "limit %q is a concurrency limit, and this proxy has no upstream, so only /v1/forward-auth could use the rule; "+
			"a gateway never tells Sluice when its request ends, so the slot could not be released: set proxy.upstream so that Sluice forwards the requests and holds the slot while each runs, or use a rate limit here", s)
		good = false
	} else {
		rl.Limit = s
	}
	if v := o.get("key"); v == nil {
		d.add(n, join(path, "key"), "missing: where the key comes from, like ip, header:X-API-Key or ip+path")
		good = false
	} else if s, ok := d.keyField(v, join(path, "key")); !ok {
		good = false
	} else {
		rl.Key = s
	}
	// usage is decoded first: it lets cost be 0.
	usageSet := o.get("usage") != nil
	if usageSet {
		good = d.ruleUsage(o, path, lim, known, &rl) && good
	}
	if v := o.get("cost"); v != nil {
		cp := join(path, "cost")
		if c, ok := d.cost(v, cp, usageSet); !ok {
			good = false
		} else if known && c > lim.Policy.Capacity() {
			d.add(deref(v), cp, "%d exceeds the capacity of limit %q (%d): no request could ever pass", c, rl.Limit, lim.Policy.Capacity())
			good = false
		} else {
			rl.Cost = c
		}
	}
	if v := o.get("charge_on"); v != nil {
		cp := join(path, "charge_on")
		if statuses, ok := d.chargeOn(v, cp); !ok {
			good = false
		} else if known && lim.Shadow {
			d.add(o.fields["charge_on"].key, cp, "limit %q is a dry run (shadow: true), which is charged before the response; remove charge_on or shadow", rl.Limit)
			good = false
		} else if known && lim.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
			d.add(o.fields["charge_on"].key, cp, "limit %q is a concurrency limit: it holds a slot while the request runs, not a charge after the response; remove charge_on", rl.Limit)
			good = false
		} else if usageSet {
			d.add(o.fields["charge_on"].key, cp, "cannot be combined with usage: usage charges what the response reports (the estimate, cost, when it reports none), charge_on a fixed cost for some statuses; keep one")
			good = false
		} else {
			rl.ChargeOn = statuses
		}
	}
	if v := o.get("settle_within"); v != nil {
		sp := join(path, "settle_within")
		if !usageSet {
			d.add(o.fields["settle_within"].key, sp, "applies only with usage: how long the estimate waits for the usage the response reports")
			good = false
		} else if x, ok := d.duration(v, sp, MaxSettleWithin); ok {
			rl.SettleWithin = x
		} else {
			good = false
		}
	}
	return rl, good
}

// cost decodes a rule limit's cost: from 1, or from 0 with usage.
func (d *decoder) cost(v *yaml.Node, path string, usage bool) (int64, bool) {
	if usage {
		return d.integer(v, path, 0, sluice.MaxLimit)
	}
	var zero int64 = -1
	if n := deref(v); n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Decode(&zero) == nil && zero == 0 {
		d.add(n, path, "must be from 1 to %d, got 0; a cost of 0 needs usage (the limit is then charged what the upstream's response reports)", sluice.MaxLimit)
		return 0, false
	}
	return d.integer(v, path, 1, sluice.MaxLimit)
}

// ruleUsage decodes a rule limit's usage into rl (its SettleWithin, the
// limit's): where the upstream's response reports what the request cost,
// checked with Formats.Usage. lim is the limit, when known.
func (d *decoder) ruleUsage(o object, path string, lim Limit, known bool, rl *RuleLimit) bool {
	up := join(path, "usage")
	at := o.fields["usage"].key
	s, ok := d.nonEmpty(o.get("usage"), up)
	if !ok || !d.checked(d.formats.Usage, o.get("usage"), up, s) {
		return false
	}
	switch {
	case !d.upstream:
		d.add(at, up, "needs proxy.upstream: Sluice reads the usage from the upstream's response, which only its proxy sees (a gateway asking /v1/forward-auth never shows it); set proxy.upstream")
		return false
	case known && lim.Policy.Algorithm == sluice.ConcurrencyAlgorithm:
		d.add(at, up, "limit %q is a concurrency limit: it holds a slot while the request runs and charges nothing to settle; remove usage", rl.Limit)
		return false
	case known && lim.Shadow:
		d.add(at, up, "limit %q is a dry run (shadow: true), which is charged apart from the request and not settled; remove usage or shadow", rl.Limit)
		return false
	}
	rl.Usage, rl.SettleWithin = s, DefaultSettleWithin
	if known {
		rl.SettleWithin = lim.Settle()
	}
	return true
}

// period decodes a limit's period, time_zone and week_starts into p: a
// duration, or a calendar period (calendar_day, calendar_week,
// calendar_month or calendar_year) in a time zone, for the window
// algorithms only. p.Algorithm must be decoded already; algOK says whether
// it was (else its problem is reported already).
func (d *decoder) period(at *yaml.Node, o object, path string, p *sluice.Policy, algOK bool) bool {
	pp, zp, wp := join(path, "period"), join(path, "time_zone"), join(path, "week_starts")
	v := o.get("period")
	if v == nil {
		d.add(at, pp, "missing: a duration like 1s, 1m or 1h, or a calendar period (%s)", list(calendarNames))
		return false
	}
	s, ok := d.str(v, pp)
	if !ok {
		return false
	}
	if !IsCalendarPeriod(s) {
		for _, k := range []string{"time_zone", "week_starts"} {
			if kv := o.get(k); kv != nil {
				d.add(deref(kv), join(path, k), "applies only to a calendar period (%s); period is %s", list(calendarNames), s)
				ok = false
			}
		}
		x, good := d.duration(v, pp, sluice.MaxPeriod)
		p.Period = x
		return ok && good
	}
	var zone, week string
	if zv := o.get("time_zone"); zv != nil {
		if zone, ok = d.nonEmpty(zv, zp); !ok {
			return false
		}
	}
	if wv := o.get("week_starts"); wv != nil {
		if week, ok = d.str(wv, wp); !ok {
			return false
		}
	}
	c, err := ParseCalendar(s, zone, week)
	if err != nil {
		// Name the field at fault.
		switch {
		case !strings.HasPrefix(err.Error(), "unknown calendar period") && zone != "" && strings.Contains(err.Error(), "time zone"):
			d.add(deref(o.get("time_zone")), zp, "%v", err)
		case !strings.HasPrefix(err.Error(), "unknown calendar period") && week != "":
			d.add(deref(o.get("week_starts")), wp, "%v", err)
		default:
			d.add(deref(v), pp, "%v", err)
		}
		return false
	}
	if p.Algorithm != sluice.FixedWindowAlgorithm && p.Algorithm != sluice.SlidingWindowAlgorithm {
		if algOK {
			d.add(deref(v), pp, "%s cannot use a calendar period: only fixed_window and sliding_window can; give it a duration such as 720h, or use fixed_window", p.Algorithm)
		}
		return false
	}
	p.Calendar = c
	return true
}
