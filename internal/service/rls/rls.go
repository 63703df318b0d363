// Package rls serves Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService, over go-control-plane's
// generated types, so that Envoy, Istio and other Envoy-based gateways can
// use Sluice as their global rate limit service.
//
// Limits are configured in envoyproxy/ratelimit's own format (Domain,
// Descriptor, RateLimit), so a file written for that service behaves the
// same here: descriptors match by key and value, with wildcards and
// nesting, and limits count fixed windows aligned to the Unix epoch. Three
// Sluice extensions go further: a descriptor's limits can use any of
// Sluice's six algorithms (Descriptor.Algorithm), a descriptor can carry
// several limits at once (Descriptor.RateLimits), such as 10 per second
// AND 10,000 per day, and a descriptor's costs can be usage reported after
// the response (Descriptor.Usage), counted whether or not they fit.
//
// A request is decided all-or-nothing: the limits of all its descriptors
// go to the store in one Store.AllowAll call, and when one is over, none is
// charged. docs/envoy.md describes the configuration, how to point Envoy
// at Sluice, and how Sluice differs from envoyproxy/ratelimit.
package rls

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
)

// Outcome is what happened to one descriptor of a request.
type Outcome uint8

// The outcomes.
const (
	// OutcomeAllowed: the descriptor's limits admitted it.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: a limit of the descriptor was over, so the request
	// was answered OVER_LIMIT.
	OutcomeDenied
	// OutcomeShadowDenied: a limit of a descriptor in shadow mode was
	// over; the descriptor was answered OK all the same.
	OutcomeShadowDenied
	// OutcomeUnlimited: the descriptor matched an unlimited limit.
	OutcomeUnlimited
)

var outcomeNames = [...]string{"allowed", "denied", "shadow_denied", "unlimited"}

// String returns the outcome's name: allowed, denied, shadow_denied or
// unlimited.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event describes the decision on one descriptor of a request that matched
// a limit, for metrics. Descriptors that match no limit have no event.
type Event struct {
	// Domain is the request's domain.
	Domain string
	// Key names the configured descriptor that matched, as
	// envoyproxy/ratelimit names its stats: "database_users.op". Under
	// detailed_metric it is the request's own keys and values instead
	// ("database_users.op_get"), which is not bounded. For Envoy's
	// RateLimitOverride it is "override:" and the request's keys.
	Key string
	// Outcome is the descriptor's own verdict.
	Outcome Outcome
	// Hits is what the descriptor costs: its hits_addend, or the
	// request's, or 1. Zero for a descriptor that charges nothing.
	Hits int64
	// Charged reports whether the hits were counted: false when another
	// descriptor of the request was over its limit, or when this one was
	// (unless it reports usage).
	Charged bool
	// Usage reports a descriptor with usage: its hits are usage spent
	// already, counted (Charged) whether or not they fitted, and Outcome
	// says whether they did.
	Usage bool
	// Degraded reports that the store's failure policy decided.
	Degraded bool
}

// Options configure a Service. The zero value is valid.
type Options struct {
	// Now returns the time of each decision. The default, nil, passes the
	// zero time, which means the store's own clock (Redis's TIME for the
	// Redis store). Tests set it to replay explicit times.
	Now func() time.Time
	// OnDecision, when set, is called once per descriptor that matched a
	// limit, before the response is sent. It must be fast and safe for
	// concurrent use.
	OnDecision func(Event)
	// OnPenalty, when set, is called once per limit of a matched
	// descriptor that its penalty refused (d.Blocked), with the limit's
	// name (its policy's: "envoy:" domain "." descriptor path) and its
	// decision, whose Offence says that this request started the block.
	// It is called before the response is sent, and must be fast and
	// safe for concurrent use.
	OnPenalty func(limit string, d sluice.Decision)
	// Resolver gives each configured limit and descriptor its policy: an
	// admin override in force for (Config.Limit's name, the descriptor's
	// override key), else the configured one. Nil means no overrides.
	Resolver *engine.Resolver
	// DecisionLog, when set, receives each decided request that matched a
	// limit (see writeLog). The store given to New must then date each
	// decision, as the HTTP doors' does: decorated by decisionlog.Store
	// (a store with a clock, memstore), or telling decisionlog.Saw the
	// time it decided at (redisstore's Options.OnDecided).
	DecisionLog *decisionlog.Log
}

// Service implements envoy.service.ratelimit.v3.RateLimitServiceServer. It
// is safe for concurrent use; its configuration can be swapped while it
// serves with SetConfig.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store      sluice.Store
	cfg        atomic.Pointer[Config]
	now        func() time.Time
	onDecision func(Event)
	onPenalty  func(string, sluice.Decision)
	resolver   *engine.Resolver
	dlog       *decisionlog.Log
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service that decides with store under cfg. A nil cfg has
// no domains: every request is answered OK.
func New(store sluice.Store, cfg *Config, opts Options) *Service {
	s := &Service{store: store, now: opts.Now, onDecision: opts.OnDecision, onPenalty: opts.OnPenalty, resolver: opts.Resolver, dlog: opts.DecisionLog}
	s.SetConfig(cfg)
	return s
}

// SetConfig replaces the configuration; requests under way finish with the
// old one. A limit whose numbers and place are unchanged keeps its state.
func (s *Service) SetConfig(cfg *Config) {
	if cfg == nil {
		cfg = &Config{}
	}
	s.cfg.Store(cfg)
}

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// Register registers the service on a gRPC server. On a server built
// with ServerOptions, a request whose bytes are not a RateLimitRequest is
// answered InvalidArgument; on another, Internal, as grpc-go answers any
// message it cannot decode.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(&serviceDesc, s)
}

// StreamWorkers is how many goroutines of the gRPC server that
// ServerOptions configures run its calls, each call after the other
// (grpc.NumStreamWorkers).
const StreamWorkers = 64

// ServerOptions returns the options of the gRPC server that serves the
// service in `sluice serve` (bench/service's bared uses them too, so that
// the benchmark's floor is the same server). A call runs on one of
// StreamWorkers goroutines kept from call to call, whose stacks have
// already grown to what a call needs (docs/BENCHMARKS.md measures what
// that saves). When every worker is busy, a call gets a new goroutine as without the
// option, so no call waits for a worker: what is served, in what order and
// how soon is unchanged. Its codec is grpc-go's protobuf codec, except
// that it leaves a request it cannot decode for the service to answer
// InvalidArgument (see Register and wire.go).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers), grpc.ForceServerCodecV2(newCodec())}
}

// item is one descriptor of a request being decided.
type item struct {
	limits []limit
	key    string // the store key
	// ovKey is the key of the admin overrides of the item's limits
	// (overrideKey), set (and overridable) only for a descriptor matched
	// in the configuration while overrides may be in force: admin
	// overrides do not replace Envoy's own limit override.
	ovKey       string
	overridable bool
	metricKey   string
	cost        int64 // 0: charges nothing (hits_addend 0, or negative hits)
	shadow      bool
	// quota is the node's quota mode: decided apart from the enforced
	// descriptors, as a shadow descriptor is, but reported OVER_LIMIT
	// when over (the request is refused when every quota descriptor is).
	quota    bool
	metadata *structpb.Struct // of the matched node, for dynamic metadata
	// usage makes cost usage spent already, charged whether or not it
	// fits, and a cost of 0 a check of the budget (Descriptor.Usage).
	usage     bool
	unlimited bool
	replaces  []string // of an unlimited limit
	matched   bool
	// first is the index of the decision of the item's first limit in
	// the request's decisions (decide), one per limit in order.
	first int
}

// MaxDescriptors is the most descriptors one request may carry, as the
// decision API takes at most 128 checks per request. Envoy sends one
// descriptor per rate_limits entry that applies to a route, a handful in
// practice; the bound keeps one request's work small, in the service and
// in the store (on Redis, one script that every other caller waits for).
const MaxDescriptors = 128

// MaxEntries is the most entries one descriptor of a request may carry:
// the deepest nesting of configured descriptors, so that no descriptor a
// configuration could limit is refused.
const MaxEntries = maxDepth

// ShouldRateLimit decides a request: it matches each descriptor to its
// limits in the request's domain, charges the limits of the descriptors
// in neither shadow nor quota mode all at once or none, and answers
// OVER_LIMIT when one of those is over.
//
// Descriptors in quota mode are decided apart from the others, each on
// its own as a shadow descriptor is, and reported OVER_LIMIT when over;
// they make the answer OVER_LIMIT only when every one of the request's
// quota descriptors is over, and the other descriptors stay charged. With the section's DynamicMetadata, the
// answer carries dynamic metadata (dynamicMetadata).
//
// A descriptor that matches no limit, and every descriptor of an unknown
// domain, is answered OK with no current_limit. A request without a domain
// or descriptors, with more than MaxDescriptors descriptors or with a
// descriptor of more than MaxEntries entries is InvalidArgument. When ctx
// ends before the store is asked, nothing is charged and the call fails
// with Canceled or DeadlineExceeded. When the store fails (and its failure
// policy did not decide), the call fails with Unavailable, and Envoy
// applies its failure_mode_deny setting.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain := req.GetDomain()
	if domain == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: the request has no domain")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: the request has no descriptors")
	}
	if err := checkSize(descs); err != nil {
		return nil, err
	}
	resp, spare := newResponse(len(descs))
	cfg := s.cfg.Load()
	root := cfg.domains[domain]
	if root == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		}
		return resp, nil
	}
	reqCost := int64(req.GetHitsAddend())
	if reqCost == 0 {
		reqCost = 1
	}
	// Most requests carry a descriptor or two: their items stay on the
	// stack.
	var itemBuf [2]item
	var items []item
	if len(descs) <= len(itemBuf) {
		items = itemBuf[:len(descs)]
	} else {
		items = make([]item, len(descs))
	}
	replaced := map[string]bool{}
	for i, d := range descs {
		if err := s.matchDescriptor(&items[i], root, domain, d, reqCost); err != nil {
			return nil, err
		}
		it := &items[i]
		it.quota = it.quota || cfg.quotaAll
		// The reference's counting: every hit is counted, as a usage
		// report is; a hits_addend of 0 stays a look at the state, which
		// is what the reference's increment of 0 is.
		it.usage = it.usage || (cfg.countRefused && it.matched && !it.unlimited && it.cost > 0)
		for _, r := range it.replaces {
			replaced[r] = true
		}
		for _, l := range it.limits {
			for _, r := range l.replaces {
				replaced[r] = true
			}
		}
	}
	if len(replaced) > 0 {
		for i := range items {
			it := &items[i]
			it.limits = dropReplaced(it.limits, replaced)
			if it.matched && !it.unlimited && len(it.limits) == 0 {
				it.matched = false
			}
		}
	}

	// A caller that has gone (Envoy's timeout) gets nothing charged.
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	var now time.Time
	if s.now != nil {
		now = s.now()
	}
	ctx, dl := s.startLog(ctx, domain)
	// The decisions of a few limits stay on the stack too.
	var dsBuf [4]sluice.Decision
	ds, denied, degraded, err := s.decide(ctx, now, items, dsBuf[:0])
	if err != nil {
		return nil, err
	}
	quotas, quotasOver := 0, 0
	for i := range items {
		it := &items[i]
		var its []sluice.Decision
		if it.matched && !it.unlimited {
			its = ds[it.first : it.first+len(it.limits)]
		}
		resp.Statuses[i] = s.statusOf(domain, it, its, spare, denied, degraded)
		// With the global quota mode, a descriptor without a limit is a
		// quota descriptor that is not over, as in the reference.
		if it.quota && !it.unlimited && (it.matched || cfg.quotaAll) {
			quotas++
			if resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				quotasOver++
			}
		}
	}
	// As envoyproxy/ratelimit: a descriptor that is not in quota mode and
	// is over refuses the request, and so do its quota descriptors when
	// every one of them is over.
	if (denied || (quotas > 0 && quotasOver == quotas)) && !cfg.shadowAll {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if dl != nil {
		if now.IsZero() {
			now = time.Now()
		}
		s.writeLog(dl, domain, items, ds, quotas > 0 && quotasOver == quotas, cfg.shadowAll, now)
	}
	if cfg.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, items, resp.Statuses)
	}
	resp.ResponseHeadersToAdd = cfg.responseHeaders(descs, items, resp)
	return resp, nil
}

// checkSize returns an InvalidArgument error for descriptors beyond
// MaxDescriptors, or a descriptor with more than MaxEntries entries.
func checkSize(descs []*rlscommon.RateLimitDescriptor) error {
	if len(descs) > MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "rls: the request has %d descriptors; at most %d are allowed", len(descs), MaxDescriptors)
	}
	for i, d := range descs {
		if n := len(d.GetEntries()); n > MaxEntries {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d has %d entries; at most %d are allowed", i, n, MaxEntries)
		}
	}
	return nil
}

// matchDescriptor fills it with the limits that apply to descriptor d.
func (s *Service) matchDescriptor(it *item, root *node, domain string, d *rlscommon.RateLimitDescriptor, reqCost int64) error {
	entries := make([]entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		entries[j] = entry{e.GetKey(), e.GetValue()}
	}
	it.cost = reqCost
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() > math.MaxInt64 {
			it.cost = math.MaxInt64
		} else {
			it.cost = int64(h.GetValue())
		}
	}
	if d.GetIsNegativeHits() {
		it.cost = 0
	}
	if o := d.GetLimit(); o != nil {
		mult := uint32(1)
		if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
			mult = m.GetValue()
		}
		l, ok := overrideLimit(o.GetRequestsPerUnit(), unitCode(o.GetUnit()), mult, domain)
		if !ok {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %s has a limit override with unit %v × %d, which Sluice cannot count", detailedPath(entries), o.GetUnit(), mult)
		}
		it.limits = []limit{l}
		it.matched = true
		it.key = storeKey(domain, entries, nil)
		keys := make([]entry, len(entries))
		for j, e := range entries {
			keys[j] = entry{key: e.key}
		}
		it.metricKey = "override:" + detailedPath(keys)
		return nil
	}
	patterns := make([]string, len(entries))
	n := root.match(entries, patterns)
	if n == nil {
		return nil
	}
	it.matched = true
	it.limits = n.limits
	it.unlimited = n.unlimited
	it.replaces = n.replaces
	it.shadow = n.shadow
	it.quota = n.quota
	it.metadata = n.metadata
	it.usage = n.usage
	shared := false
	for _, p := range patterns {
		shared = shared || p != ""
	}
	if !shared {
		patterns = nil
	}
	it.key = storeKey(domain, entries, patterns)
	if s.resolver.Active() {
		it.ovKey, it.overridable = overrideKey(entries, patterns), true
	}
	it.metricKey = n.path
	if n.detailed {
		it.metricKey = detailedPath(entries)
	}
	return nil
}

// dropReplaced returns limits without those whose name is replaced, as a
// new slice when any is dropped (limits belongs to the configuration).
func dropReplaced(limits []limit, replaced map[string]bool) []limit {
	keep := 0
	for _, l := range limits {
		if l.name == "" || !replaced[l.name] {
			keep++
		}
	}
	if keep == len(limits) {
		return limits
	}
	out := make([]limit, 0, keep)
	for _, l := range limits {
		if l.name == "" || !replaced[l.name] {
			out = append(out, l)
		}
	}
	return out
}

// enforced reports whether it is charged with the request's all-or-nothing
// call, or decides it: it has limits, charges something (or checks a
// budget) and is in neither shadow nor quota mode.
func (it *item) enforced() bool {
	return it.matched && !it.unlimited && !it.shadow && !it.quota && (it.cost > 0 || it.usage)
}

// debits reports whether it reports usage: its cost is debited from its
// limits whether or not it fits, apart from the rest of the request.
func (it *item) debits() bool {
	return it.matched && !it.unlimited && it.usage && it.cost > 0
}

// decide decides the request's descriptors with the engine: the limits of
// the enforced descriptors all or nothing, each shadow descriptor's limits
// apart (all or nothing among themselves, charged only when the request
// is admitted), and the state of those that charge nothing. It reports
// whether the request is denied and whether the store's failure policy
// decided. A request whose cost a limit can never admit (a limit of 0, a
// cost above the capacity, or the summed cost of descriptors that charge
// the same counter) is denied and charges nothing. It appends the
// decisions of the items' limits to ds, each item's from its first.
//
// The usage of descriptors with usage is debited first, each limit on its
// own, whether or not it fits; a usage that did not fit (outside shadow
// mode) denies the request, and the other descriptors then charge
// nothing and report their state. A usage descriptor's hits_addend of 0
// is a check of its budget, decided with the enforced descriptors.
func (s *Service) decide(ctx context.Context, now time.Time, items []item, ds []sluice.Decision) (_ []sluice.Decision, denied, degraded bool, err error) {
	// The checks and their results stay on the stack for a few limits.
	var checkBuf [4]engine.Check
	var resBuf [len(checkBuf)]engine.CheckResult
	var debitBuf [2]sluice.Decision
	checks, debits := checkBuf[:0], debitBuf[:0]
	for i := range items {
		it := &items[i]
		if !it.matched || it.unlimited {
			continue
		}
		s.override(it)
		if it.debits() {
			for j := range it.limits {
				d, err := s.debit(ctx, now, &it.limits[j].policy, it.key, it.cost)
				if err != nil {
					return ds, false, false, storeError(err)
				}
				debits = append(debits, d)
				if !it.shadow && !it.quota {
					denied = denied || !d.Allowed
					degraded = degraded || d.Degraded
				}
			}
			continue
		}
		for j := range it.limits {
			c := engine.Check{Request: sluice.Request{Policy: &it.limits[j].policy, Key: it.key, Cost: it.cost}, Budget: it.usage}
			if it.shadow || it.quota {
				// A quota descriptor is decided as a shadow one is, on
				// its own; ShouldRateLimit then counts it as over or not.
				c.Mode, c.Group = engine.Shadow, i+1
			}
			checks = append(checks, c)
		}
	}
	var res []engine.CheckResult
	if len(checks) <= len(resBuf) {
		res = resBuf[:len(checks)]
	} else {
		res = make([]engine.CheckResult, len(checks))
	}
	switch {
	case len(checks) == 0:
	case denied:
		// A usage did not fit: the request is refused, and the rest is
		// only looked at.
		for k := range checks {
			res[k].Decision, res[k].Err = s.state(ctx, now, &checks[k])
		}
	default:
		var o engine.Outcome
		engine.Decide(ctx, s.store, now, checks, res, &o)
		if o.Err != nil {
			return ds, false, false, storeError(o.Err)
		}
		denied, degraded = !o.Allowed, degraded || o.Decision.Degraded
	}
	k, u := 0, 0
	for i := range items {
		it := &items[i]
		if !it.matched || it.unlimited {
			continue
		}
		it.first = len(ds)
		if it.debits() {
			ds = append(ds, debits[u:u+len(it.limits)]...)
			u += len(it.limits)
			continue
		}
		for range it.limits {
			if res[k].Err != nil {
				return ds, false, false, storeError(res[k].Err)
			}
			ds = append(ds, res[k].Decision)
			k++
		}
	}
	return ds, denied, degraded, nil
}

// debit charges cost units of usage to key under p, whether or not they
// fit. A limit of zero requests_per_unit admits nothing and counts
// nothing: its usage never fits.
func (s *Service) debit(ctx context.Context, now time.Time, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if p.Capacity() < 1 {
		return sluice.Decision{RetryAfter: sluice.Never}, nil
	}
	return s.store.Debit(ctx, now, sluice.Request{Policy: p, Key: key, Cost: cost})
}

// state returns what check c would get now, charging nothing: a check of a
// budget (cost 0) is admitted while a unit is left.
func (s *Service) state(ctx context.Context, now time.Time, c *engine.Check) (sluice.Decision, error) {
	if c.Budget && c.Cost == 0 && c.Policy.Capacity() >= 1 {
		return s.store.Peek(ctx, now, sluice.Request{Policy: c.Policy, Key: c.Key})
	}
	return engine.State(ctx, s.store, now, *c)
}

// override replaces the policy of each limit of it that an admin override
// covers for its key, in a copy of its limits (they belong to the
// configuration), and reports the override's numbers in place of the
// configured ones.
func (s *Service) override(it *item) {
	if !it.overridable {
		return
	}
	copied := false
	for j, l := range it.limits {
		if l.policy.Name == "" {
			continue // zero requests_per_unit: nothing to override
		}
		p, ok := s.resolver.Policy(l.policy, it.ovKey)
		if !ok {
			continue
		}
		if !copied {
			it.limits, copied = slices.Clone(it.limits), true
		}
		it.limits[j] = overridden(l, p)
	}
}

// storeError turns a store's error into the gRPC status of the call.
//
// Descriptors whose keys the store can never decide together (an error
// wrapping sluice.ErrNotAtomic: keys in different Redis Cluster hash
// slots) are FailedPrecondition, not Unavailable: the same descriptors fail
// the same way every time, and the message says what to change.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if errors.Is(err, sluice.ErrNotAtomic) {
		return status.Errorf(codes.FailedPrecondition, "rls: the request's descriptors name keys that the store cannot decide all or nothing "+
			"(on Redis Cluster their keys lie in different hash slots); nothing was charged, and retrying cannot help: "+
			"send one enforced descriptor per request, or keep the counters on a single Redis or Sentinel (docs/envoy.md): %v", err)
	}
	return status.Errorf(codes.Unavailable, "rls: store: %v", err)
}

// statusOf returns the status of one descriptor, whose limits decided
// ds, and reports its event. The status of a descriptor with a limit is
// spare when not nil (the response's own, for a request of one
// descriptor), else a new one.
func (s *Service) statusOf(domain string, it *item, ds []sluice.Decision, spare *statusAlloc, denied, degraded bool) *rlsv3.RateLimitResponse_DescriptorStatus {
	if !it.matched {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	ev := Event{Domain: domain, Key: it.metricKey, Hits: it.cost, Usage: it.usage}
	if it.unlimited {
		ev.Outcome = OutcomeUnlimited
		s.emit(ev)
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	if s.onPenalty != nil {
		for j := range ds {
			if ds[j].Blocked {
				s.onPenalty(it.limits[j].policy.Name, ds[j])
			}
		}
	}
	// The deciding limit: a denying one with the longest wait, else the
	// one with the fewest units left.
	k := engine.Decider(ds)
	d, l := ds[k], it.limits[k]
	own := d.Allowed
	// One allocation for the status and the messages it points to, or
	// none.
	a := spare
	if a == nil {
		a = new(statusAlloc)
	}
	st := &a.status
	st.Code = rlsv3.RateLimitResponse_OK
	st.CurrentLimit = &a.limit
	st.CurrentLimit.Name = l.name
	st.CurrentLimit.RequestsPerUnit = l.rpu
	st.CurrentLimit.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(l.unit)
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
	if l.multiplier > 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(l.multiplier)
	}
	switch {
	case !own && d.RetryAfter != sluice.Never:
		st.DurationUntilReset = a.duration(d.RetryAfter)
	case own:
		st.DurationUntilReset = a.duration(d.ResetAfter)
	}
	ev.Degraded = d.Degraded || (degraded && it.enforced())
	ev.Charged = it.debits() || (own && it.cost > 0 && !denied)
	switch {
	case own:
		ev.Outcome = OutcomeAllowed
	case it.shadow:
		// As envoyproxy/ratelimit: nothing is left of a limit that is
		// over, in shadow mode or not (Envoy's x-ratelimit-remaining).
		ev.Outcome = OutcomeShadowDenied
		st.LimitRemaining = 0
	default:
		ev.Outcome = OutcomeDenied
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.LimitRemaining = 0
	}
	s.emit(ev)
	return st
}

// statusAlloc is a descriptor's status with the limit and the duration it
// points to, allocated together.
type statusAlloc struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// duration sets a's duration to d, as durationpb.New does, and returns it.
func (a *statusAlloc) duration(d time.Duration) *durationpb.Duration {
	a.reset.Seconds = int64(d / time.Second)
	a.reset.Nanos = int32(d % time.Second)
	return &a.reset
}

// responseAlloc is a response with room for one descriptor's status and
// that status itself, allocated together.
type responseAlloc struct {
	resp rlsv3.RateLimitResponse
	one  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st   statusAlloc
}

// newResponse returns an OK response with n statuses to fill: one
// allocation when n is 1, which also holds the status to fill in, spare
// (nil for another n).
func newResponse(n int) (resp *rlsv3.RateLimitResponse, spare *statusAlloc) {
	if n != 1 {
		return &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
		}, nil
	}
	a := new(responseAlloc)
	a.resp.OverallCode = rlsv3.RateLimitResponse_OK
	a.resp.Statuses = a.one[:]
	return &a.resp, &a.st
}

func (s *Service) emit(ev Event) {
	if s.onDecision != nil {
		s.onDecision(ev)
	}
}
