package envoycompat

// Documented differences (entries of docs/envoy.md's list).
const (
	diffNotCounted    = "Refused requests are not counted** (except with `--envoy-env`"
	diffAllOrNothing  = "All-or-nothing across descriptors"
	diffShadowCharge  = "A shadow descriptor is charged only when the request is admitted."
	diffQuotaCharge   = "A quota-mode descriptor is charged only when the request is admitted"
	diffNoReset       = "A request that can never be admitted has no `duration_until_reset`"
	diffErrorCode     = "A request without a domain or without descriptors fails with `InvalidArgument`"
	diffLimitCounters = "Counters belong to a limit: changing a limit's numbers, or its place in the tree, starts its counters afresh."
)

// cases are the call sequences of the suite. Every configuration and
// case is written for this suite; ref names the envoyproxy/ratelimit test,
// fixture or README section each one is derived from.
var cases = []compatCase{
	// --- matching: nested descriptors, values, defaults -----------------
	{name: "nested-default-subkey", ref: "test/config/config_test.go TestBasicConfig (basic_config.yaml: a value with a nested key and no value)",
		config: "nested-basic", calls: countdown(d("zone", "eu", "shard", "s-17"), 3, minute)},
	{name: "nested-exact-subvalue", ref: "test/config/config_test.go TestBasicConfig (the nested value beats the nested default)",
		config: "nested-basic", calls: countdown(d("zone", "eu", "shard", "primary"), 4, minute)},
	{name: "nested-values-own-counters", ref: "test/config/config_test.go TestBasicConfig; README Example 2 (each to_number has its own limit)",
		config: "nested-basic", calls: seq(countdown(d("zone", "eu", "shard", "a"), 3, minute), []call{one(d("zone", "eu", "shard", "b"), ok(3, minute, 2))})},
	{name: "placeholder-has-no-limit", ref: "test/config/config_test.go TestBasicConfig (a key with only nested descriptors: no limit)",
		config: "nested-basic", calls: []call{one(d("zone", "eu"), none), one(d("zone", "eu"), none)}},
	{name: "unknown-value-of-placeholder", ref: "test/config/config_test.go TestBasicConfig (key1 with an unknown value: no limit)",
		config: "nested-basic", calls: []call{one(d("zone", "us", "shard", "primary"), none)}},
	{name: "request-deeper-than-config", ref: "README Example 4 and test/config/config_test.go TestBasicConfig (more entries than the configuration: no limit)",
		config: "nested-basic", calls: []call{one(d("flat", "x", "extra", "y"), none)}},
	{name: "request-shallower-than-config", ref: "test/config/config_test.go TestBasicConfig (key2/subkey: fewer entries than the configuration)",
		config: "nested-basic", calls: []call{one(d("zone", "eu"), none)}},
	{name: "top-default-key", ref: "test/config/config_test.go TestBasicConfig (key2 without value: 20 per minute)",
		config: "nested-basic", calls: countdown(d("flat", "anything"), 2, minute)},
	{name: "top-exact-value", ref: "test/config/config_test.go TestBasicConfig (key2_value2 beats key2)",
		config: "nested-basic", calls: countdown(d("flat", "special"), 5, minute)},
	{name: "keys-are-case-sensitive", ref: "README Definitions (descriptors are case-sensitive)",
		config: "nested-basic", calls: []call{one(d("FLAT", "special"), none), one(d("flat", "SPECIAL"), ok(2, minute, 1))}},
	{name: "depth-three", ref: "README Example 3 (three levels of nesting)",
		config: "deep", calls: countdown(d("a", "1", "b", "2", "c", "3"), 2, hour)},
	{name: "depth-three-middle-stop", ref: "README Example 3 (the middle level alone has its own limit)",
		config: "deep", calls: countdown(d("a", "1", "b", "2"), 1, hour)},
	{name: "depth-three-other-leaf", ref: "README Example 3 (a sibling at the deepest level)",
		config: "deep", calls: seq(countdown(d("a", "1", "b", "2", "c", "9"), 2, hour))},
	{name: "mongo-two-values", ref: "README Example 1 (two values of one key, each 500 per second... here per minute)",
		config: "mongo", calls: []call{one(d("database", "users"), ok(500, minute, 499)), one(d("database", "default"), ok(500, minute, 499)), one(d("database", "users"), ok(500, minute, 498)), one(d("database", "other"), none)}},
	{name: "messaging-marketing", ref: "README Example 2 (5 marketing messages a day per number)",
		config: "messaging", calls: countdown(d("message_type", "marketing", "to_number", "2061234567"), 5, day)},
	{name: "messaging-any-number", ref: "README Example 2 (100 a day to any number)",
		config: "messaging", calls: []call{one(d("to_number", "2061234567"), ok(100, day, 99)), one(d("to_number", "2061111111"), ok(100, day, 99))}},
	{name: "messaging-both", ref: "README Example 2 (a request carries both descriptors)",
		config: "messaging", calls: []call{
			req(OK, ds(d("message_type", "marketing", "to_number", "1"), d("to_number", "1")), ok(5, day, 4), ok(100, day, 99)),
			req(OK, ds(d("message_type", "marketing", "to_number", "1"), d("to_number", "1")), ok(5, day, 3), ok(100, day, 98)),
		}},

	// --- wildcards --------------------------------------------------------
	{name: "wildcard-trailing", ref: "test/config/config_test.go TestWildcardConfig (wildcard.yaml: foo* matches foo1 and foo2, each its own counter)",
		config: "wild", calls: []call{one(d("wild", "foo1"), ok(2, minute, 1)), one(d("wild", "foo2"), ok(2, minute, 1)), one(d("wild", "foo1"), ok(2, minute, 0)), one(d("wild", "foo1"), over(2, minute))}},
	{name: "wildcard-no-match", ref: "test/config/config_test.go TestWildcardConfig (bar does not match foo*)",
		config: "wild", calls: []call{one(d("wild", "bar"), none)}},
	{name: "wildcard-not-eager", ref: "test/config/config_test.go TestWildcardConfig (a value without * matches only itself)",
		config: "wild", calls: []call{one(d("noWild", "foo1"), none), one(d("noWild", "foo"), ok(2, minute, 1))}},
	{name: "wildcard-middle", ref: "README wildcards (a * anywhere: log*.txt matches log-2024.txt and log.txt); test/config/wildcard.yaml midWild",
		config: "wild", calls: []call{one(d("file", "log-2024.txt"), ok(3, minute, 2)), one(d("file", "log.txt"), ok(3, minute, 2)), one(d("file", "log.csv"), none), one(d("midWild", "barab"), ok(2, minute, 1))}},
	{name: "wildcard-several-stars", ref: "README wildcards (svc*get*v1 matches svcgetv1)",
		config: "wild", calls: []call{one(d("route", "svcgetv1"), ok(4, minute, 3)), one(d("route", "svc-users-get-all-v1"), ok(4, minute, 3)), one(d("route", "svcv1get"), none)}},
	{name: "wildcard-leading", ref: "README wildcards (a * at the start of a value)",
		config: "wild", calls: []call{one(d("host", "api.example.com"), ok(2, minute, 1)), one(d("host", "example.org"), none)}},
	{name: "wildcard-precedence", ref: "README wildcards (exact value first, then wildcards in file order, then the key's default)",
		config: "wild", calls: []call{
			one(d("path", "/api/special"), ok(1, minute, 0)),
			one(d("path", "/api/v1/users"), ok(5, minute, 4)),
			one(d("path", "/api/other"), ok(6, minute, 5)),
			one(d("path", "/static/x"), ok(7, minute, 6)),
		}},
	{name: "wildcard-lone-star", ref: "README wildcards (a value of only * matches every value, the empty one too, before the key's default)",
		config: "wild", calls: []call{one(d("any", "x"), ok(3, minute, 2)), one(d("any", ""), ok(3, minute, 2)), one(d("any", "x"), ok(3, minute, 1))}},
	{name: "wildcard-nested", ref: "fix of wildcards in nested descriptors (config_impl.go: the wildcards of each level; PR 420)",
		config: "wild", calls: countdown(d("tenant", "t1", "op", "read-users"), 2, minute)},
	{name: "wildcard-value-literal-star", ref: "config_impl.go GetLimit (the exact key_value lookup comes first, so a request value equal to the pattern finds it)",
		config: "wild", calls: []call{one(d("wild", "foo*"), ok(2, minute, 1))}},
	{name: "share-threshold", ref: "test/config/share_threshold.yaml and PR 1016 (values matching a shared wildcard share one counter)",
		config: "share", calls: []call{one(d("files", "files/a.pdf"), ok(3, minute, 2)), one(d("files", "files/b.csv"), ok(3, minute, 1)), one(d("files", "files/c.txt"), ok(3, minute, 0)), one(d("files", "files/d"), over(3, minute))}},
	{name: "share-threshold-off", ref: "PR 1016 (without share_threshold each value has its own counter)",
		config: "share", calls: []call{one(d("models", "m/a"), ok(2, minute, 1)), one(d("models", "m/b"), ok(2, minute, 1)), one(d("models", "m/a"), ok(2, minute, 0))}},
	{name: "share-threshold-nested", ref: "test/integration/runtime/.../share_threshold.yaml (a shared wildcard above a nested limit)",
		config: "share", calls: []call{one(d("org", "acme-1", "user", "u"), ok(2, minute, 1)), one(d("org", "acme-2", "user", "u"), ok(2, minute, 0)), one(d("org", "acme-3", "user", "u"), over(2, minute)), one(d("org", "acme-3", "user", "v"), ok(2, minute, 1))}},
	{name: "share-threshold-mid-star", ref: "share_threshold on a wildcard with a * inside (README wildcards)",
		config: "share", calls: []call{one(d("doc", "v1-a.md"), ok(2, minute, 1)), one(d("doc", "v1-b.md"), ok(2, minute, 0)), one(d("doc", "v1-c.md"), over(2, minute))}},

	// --- unlimited ---------------------------------------------------------
	{name: "unlimited", ref: "README Example 5 (ldap unlimited: OK, limit_remaining 4294967295)",
		config: "internal", calls: repeat(3, one(d("ldap", "cn=x"), unlimited))},
	{name: "unlimited-beside-limited", ref: "README Example 5; test/service/ratelimit_test.go TestUnlimited",
		config: "internal", calls: []call{
			req(OK, ds(d("ldap", "a"), d("azure", "b")), unlimited, ok(2, minute, 1)),
			req(OK, ds(d("ldap", "a"), d("azure", "b")), unlimited, ok(2, minute, 0)),
			req(OVER, ds(d("ldap", "a"), d("azure", "b")), unlimited, over(2, minute)),
		}},
	{name: "unlimited-with-hits", ref: "test/service/ratelimit_test.go TestUnlimited (hits do not matter)",
		config: "internal", calls: []call{{descs: ds(d("ldap", "x")), hits: 1000, overall: OK, want: []status{unlimited}}}},

	// --- shadow mode ------------------------------------------------------
	{name: "shadow-never-refuses", ref: "README Example 6; test/config/config_test.go TestShadowModeConfig",
		config: "shadow", calls: []call{one(d("service", "auth", "user", "user-a"), ok(1, minute, 0)), one(d("service", "auth", "user", "user-a"), shadowOver(1, minute)), one(d("service", "auth", "user", "user-a"), shadowOver(1, minute))}},
	{name: "shadow-sibling-enforced", ref: "README Example 6 (user-b is limited)",
		config: "shadow", calls: countdown(d("service", "auth", "user", "user-b"), 2, minute)},
	{name: "shadow-mixed-request", ref: "test/service/ratelimit_test.go TestMixedRuleShadowMode (one shadow and one enforced descriptor)",
		config: "shadow", calls: []call{
			req(OK, ds(d("service", "s", "user", "user-a"), d("service", "s", "user", "user-b")), ok(1, minute, 0), ok(2, minute, 1)),
			req(OK, ds(d("service", "s", "user", "user-a"), d("service", "s", "user", "user-b")), shadowOver(1, minute), ok(2, minute, 0)),
			req(OVER, ds(d("service", "s", "user", "user-a"), d("service", "s", "user", "user-b")), shadowOver(1, minute), over(2, minute)),
		}},
	{name: "shadow-all-over", ref: "test/service/ratelimit_test.go TestRuleShadowMode (every descriptor in shadow mode: OK)",
		config: "shadow", calls: []call{
			req(OK, ds(d("service", "t", "user", "user-a"), d("dry", "x")), ok(1, minute, 0), ok(1, minute, 0)),
			req(OK, ds(d("service", "t", "user", "user-a"), d("dry", "x")), shadowOver(1, minute), shadowOver(1, minute)),
		}},
	{name: "shadow-not-charged-when-refused", ref: "test/service/ratelimit_test.go TestMixedRuleShadowMode", diff: diffShadowCharge,
		config: "shadow", calls: []call{
			one(d("service", "u", "user", "user-b"), ok(2, minute, 1)),
			one(d("service", "u", "user", "user-b"), ok(2, minute, 0)),
			req(OVER, ds(d("service", "u", "user", "user-b"), d("dry", "y")), over(2, minute), ok(1, minute, 1)),
			one(d("dry", "y"), ok(1, minute, 0)),
		},
		// Counting as the reference: the shadow descriptor of the refused
		// request is counted, and the next hit finds it over (OK: shadow).
		counting: []call{
			one(d("service", "u", "user", "user-b"), ok(2, minute, 1)),
			one(d("service", "u", "user", "user-b"), ok(2, minute, 0)),
			req(OVER, ds(d("service", "u", "user", "user-b"), d("dry", "y")), over(2, minute), ok(1, minute, 0)),
			one(d("dry", "y"), shadowOver(1, minute)),
		}},

	// --- quota mode -----------------------------------------------------
	// The reference's quota mode (src/service/ratelimit.go
	// shouldRateLimitWorker), from its test/service/ratelimit_test.go of
	// 2026.
	{name: "quota-one-left", ref: "test/service/ratelimit_test.go TestServiceQuotaModeOnlySomeOverTheLimit (one quota descriptor over: OK, its status OVER_LIMIT)",
		config: "quota", calls: []call{
			req(OK, ds(d("backend", "a"), d("backend", "b")), ok(1, minute, 0), ok(2, minute, 1)),
			req(OK, ds(d("backend", "a"), d("backend", "b")), over(1, minute), ok(2, minute, 0)),
		}},
	{name: "quota-all-over", ref: "test/service/ratelimit_test.go TestServiceQuotaModeOnlyAllOverTheLimit (every quota descriptor over: OVER_LIMIT)",
		config: "quota", calls: []call{
			req(OK, ds(d("backend", "a"), d("backend", "b")), ok(1, minute, 0), ok(2, minute, 1)),
			req(OK, ds(d("backend", "a"), d("backend", "b")), over(1, minute), ok(2, minute, 0)),
			req(OVER, ds(d("backend", "a"), d("backend", "b")), over(1, minute), over(2, minute)),
		}},
	{name: "quota-alone", ref: "test/service/ratelimit_test.go TestServiceMixedPerDescriptorModes (the only quota descriptor over: OVER_LIMIT); TestServiceMixedPerDescriptorModesUnderLimit",
		config: "quota", calls: countdown(d("backend", "a"), 1, minute)},
	{name: "quota-and-enforced", ref: "test/service/ratelimit_test.go TestServicePerDescriptorQuotaMode (a descriptor outside quota mode over: OVER_LIMIT whatever the quota says)", diff: diffQuotaCharge,
		config: "quota", calls: []call{
			req(OK, ds(d("backend", "b"), d("tenant", "t")), ok(2, minute, 1), ok(3, minute, 2)),
			req(OK, ds(d("backend", "b"), d("tenant", "t")), ok(2, minute, 0), ok(3, minute, 1)),
			// b, the only quota descriptor, is over: all of them are.
			req(OVER, ds(d("backend", "b"), d("tenant", "t")), over(2, minute), ok(3, minute, 0)),
			// Quota a is not over, tenant is: refused, and a is not charged.
			req(OVER, ds(d("backend", "a"), d("tenant", "t")), ok(1, minute, 1), over(3, minute)),
		},
		// Counting as the reference: a is counted by the refused request.
		counting: []call{
			req(OK, ds(d("backend", "b"), d("tenant", "t")), ok(2, minute, 1), ok(3, minute, 2)),
			req(OK, ds(d("backend", "b"), d("tenant", "t")), ok(2, minute, 0), ok(3, minute, 1)),
			// b, the only quota descriptor, is over: all of them are.
			req(OVER, ds(d("backend", "b"), d("tenant", "t")), over(2, minute), ok(3, minute, 0)),
			req(OVER, ds(d("backend", "a"), d("tenant", "t")), ok(1, minute, 0), over(3, minute)),
		}},

	// --- replaces -----------------------------------------------------------
	{name: "replaces-drops-named", ref: "README Example 7; test/service/ratelimit_test.go TestServiceWithReplaces",
		config: "replaces", calls: []call{
			req(OK, ds(d("key_1", "value_1", "user", "bk"), d("key_2", "value_2", "user", "bk")), none, status{code: OK, rpu: 3, unit: minute, rem: 2}),
			req(OK, ds(d("key_1", "value_1", "user", "bk"), d("key_2", "value_2", "user", "bk")), none, status{code: OK, rpu: 3, unit: minute, rem: 1}),
		}},
	{name: "replaces-original-untouched", ref: "README Example 7 (the replaced limit is not changed by the evaluation)",
		config: "replaces", calls: []call{
			req(OK, ds(d("key_1", "value_1", "user", "x"), d("key_2", "value_2", "user", "x")), none, status{code: OK, rpu: 3, unit: minute, rem: 2}),
			one(d("key_1", "value_1", "user", "x"), status{code: OK, rpu: 1, unit: minute, name: "specific", rem: 0}),
			one(d("key_1", "value_1", "user", "x"), status{code: OVER, rpu: 1, unit: minute, name: "specific"}),
		}},
	{name: "replaces-alone-no-effect", ref: "README Example 7 (a rule that replaces only acts when both match)",
		config: "replaces", calls: countdown(d("key_2", "value_2", "user", "y"), 3, minute)},

	// --- detailed_metric ---------------------------------------------------------
	{name: "detailed-metric-same-answers", ref: "test/config/config_test.go TestBasicConfig (key7 with detailed_metric: the answer is that of the limit)",
		config: "nested-basic", calls: seq(countdown(d("detailed", "v1"), 2, minute), []call{one(d("detailed", "v2"), ok(2, minute, 1))})},

	// --- hits_addend --------------------------------------------------------------
	{name: "request-hits", ref: "test/redis/fixed_cache_impl_test.go TestRedis (hits_addend of the request)",
		config: "costs", calls: []call{{descs: ds(d("k", "a")), hits: 4, overall: OK, want: []status{ok(10, minute, 6)}}, {descs: ds(d("k", "a")), hits: 6, overall: OK, want: []status{ok(10, minute, 0)}}, {descs: ds(d("k", "a")), hits: 1, overall: OVER, want: []status{over(10, minute)}}}},
	{name: "request-hits-zero-is-one", ref: "src/utils GetHitsAddends (a request hits_addend of 0 counts as 1)",
		config: "costs", calls: []call{{descs: ds(d("k", "b")), hits: 0, overall: OK, want: []status{ok(10, minute, 9)}}}},
	{name: "descriptor-hits", ref: "test/redis/fixed_cache_impl_test.go (per-descriptor hits_addend overrides the request's)",
		config: "costs", calls: []call{{descs: ds(dh(2, "k", "c"), d("k", "d")), hits: 5, overall: OK, want: []status{ok(10, minute, 8), ok(10, minute, 5)}}}},
	{name: "descriptor-hits-zero", ref: "src/utils GetHitsAddends (a descriptor hits_addend of 0 checks without counting)",
		config: "costs", calls: []call{
			{descs: ds(d("k", "e")), hits: 10, overall: OK, want: []status{ok(10, minute, 0)}},
			one(dh(0, "k", "e"), ok(10, minute, 0)),
			one(dh(0, "k", "f"), ok(10, minute, 10)),
			one(d("k", "f"), ok(10, minute, 9)),
		}},
	{name: "hits-over-then-fits", ref: "test/redis/fixed_cache_impl_test.go TestOverLimit (the reference counts the refused hits)", diff: diffNotCounted,
		config: "costs", calls: []call{
			{descs: ds(d("k", "g")), hits: 8, overall: OK, want: []status{ok(10, minute, 2)}},
			{descs: ds(d("k", "g")), hits: 3, overall: OVER, want: []status{over(10, minute)}},
			{descs: ds(d("k", "g")), hits: 2, overall: OK, want: []status{ok(10, minute, 0)}},
		},
		// The reference's answers: the refused 3 were counted (11 of 10),
		// so 2 more do not fit.
		counting: []call{
			{descs: ds(d("k", "g")), hits: 8, overall: OK, want: []status{ok(10, minute, 2)}},
			{descs: ds(d("k", "g")), hits: 3, overall: OVER, want: []status{over(10, minute)}},
			{descs: ds(d("k", "g")), hits: 2, overall: OVER, want: []status{over(10, minute)}},
		}},
	{name: "hits-above-limit", ref: "test/redis/fixed_cache_impl_test.go TestOverLimit (more hits than the limit)", diff: diffNoReset,
		config: "costs", calls: []call{{descs: ds(d("k", "h")), hits: 11, overall: OVER, want: []status{{code: OVER, rpu: 10, unit: minute, noReset: true}}}, one(d("k", "h"), ok(10, minute, 9))},
		// The reference's answers: the 11 are counted, the window's end
		// reported, and the next hit is over too.
		counting: []call{{descs: ds(d("k", "h")), hits: 11, overall: OVER, want: []status{over(10, minute)}}, one(d("k", "h"), over(10, minute))}},
	{name: "zero-requests-per-unit", ref: "README (requests_per_unit 0 refuses every request)", diff: diffNoReset,
		config: "costs", calls: repeat(2, one(d("blocked", "x"), status{code: OVER, unit: minute, noReset: true}))},

	// --- several descriptors, the same descriptor twice --------------------------------
	{name: "several-descriptors", ref: "test/integration/integration_test.go (domain another: key2 and key3 in one request)",
		config: "another", calls: seq(repeat(1, req(OK, ds(d("key2", "v"), d("key3", "v")), ok(20, minute, 19), ok(3, hour, 2))), repeat(1, req(OK, ds(d("key2", "v"), d("key3", "v")), ok(20, minute, 18), ok(3, hour, 1))), repeat(1, req(OK, ds(d("key2", "v"), d("key3", "v")), ok(20, minute, 17), ok(3, hour, 0))))},
	{name: "several-descriptors-one-over", ref: "test/integration/integration_test.go (key3 over: the request is OVER_LIMIT; the reference still counts key2)", diff: diffAllOrNothing,
		config: "another", calls: []call{
			one(d("key3", "w"), ok(3, hour, 2)), one(d("key3", "w"), ok(3, hour, 1)), one(d("key3", "w"), ok(3, hour, 0)),
			req(OVER, ds(d("key2", "w"), d("key3", "w")), status{code: OK, rpu: 20, unit: minute, rem: 20, zeroReset: true}, over(3, hour)),
			one(d("key2", "w"), ok(20, minute, 19)),
		},
		// The reference's answers: key2 is counted in the refused request.
		counting: []call{
			one(d("key3", "w"), ok(3, hour, 2)), one(d("key3", "w"), ok(3, hour, 1)), one(d("key3", "w"), ok(3, hour, 0)),
			req(OVER, ds(d("key2", "w"), d("key3", "w")), ok(20, minute, 19), over(3, hour)),
			one(d("key2", "w"), ok(20, minute, 18)),
		}},
	{name: "unmatched-beside-matched", ref: "test/service/ratelimit_test.go TestService (a descriptor without a limit beside one with)",
		config: "another", calls: []call{req(OK, ds(d("nothing", "x"), d("key4", "x")), none, ok(20, day, 19))}},
	{name: "same-descriptor-twice", ref: "test/redis/fixed_cache_impl_test.go (two descriptors with one cache key: each INCRBY sees the other)",
		config: "another", calls: []call{req(OK, ds(d("key4", "t"), d("key4", "t")), ok(20, day, 19), ok(20, day, 18)), one(d("key4", "t"), ok(20, day, 17))}},

	// --- units and windows ------------------------------------------------------------
	{name: "unit-second", ref: "test/integration/integration_test.go (basic: key1 per second)", config: "units", calls: countdown(d("per", "second"), 2, second)},
	{name: "unit-minute", ref: "test/integration/integration_test.go (basic: one_per_minute)", config: "units", calls: countdown(d("per", "minute"), 1, minute)},
	{name: "unit-hour", ref: "test/integration/integration_test.go (another: key3 per hour)", config: "units", calls: countdown(d("per", "hour"), 2, hour)},
	{name: "unit-day", ref: "test/integration/integration_test.go (another: key4 per day)", config: "units", calls: countdown(d("per", "day"), 2, day)},
	{name: "unit-week", ref: "src/utils UnitToDivider (a week is 7 days)", config: "units", calls: countdown(d("per", "week"), 2, week)},
	{name: "unit-month", ref: "src/utils UnitToDivider (a month is 30 days, windows aligned to multiples since the epoch)", config: "units", calls: countdown(d("per", "month"), 2, month)},
	{name: "unit-year", ref: "src/utils UnitToDivider (a year is 365 days)", config: "units", calls: countdown(d("per", "year"), 2, year)},
	{name: "unit-any-case", ref: "config_impl.go (the unit is read in upper case: Minute and MINUTE are minute)", config: "units", calls: countdown(d("per", "Minute"), 1, minute)},
	{name: "unit-multiplier", ref: "test/config/unit_multiplier.yaml (2 per 30 seconds, windows of 30 s)", config: "units",
		calls: []call{one(d("per", "30s"), status{code: OK, rpu: 2, unit: second, mult: 30, rem: 1}), one(d("per", "30s"), status{code: OK, rpu: 2, unit: second, mult: 30, rem: 0}), one(d("per", "30s"), status{code: OVER, rpu: 2, unit: second, mult: 30})}},
	{name: "unit-multiplier-hours", ref: "test/config/unit_multiplier.yaml (a multiple of hours)", config: "units",
		calls: []call{one(d("per", "6h"), status{code: OK, rpu: 1, unit: hour, mult: 6, rem: 0}), one(d("per", "6h"), status{code: OVER, rpu: 1, unit: hour, mult: 6})}},

	// --- overrides in the request -------------------------------------------------------
	{name: "override-limit", ref: "test/config/config_test.go TestConfigLimitOverride (the request's limit replaces the configured one)",
		config: "nested-basic", calls: []call{one(dl(2, hour, "zone", "eu", "shard", "x"), ok(2, hour, 1)), one(dl(2, hour, "zone", "eu", "shard", "x"), ok(2, hour, 0)), one(dl(2, hour, "zone", "eu", "shard", "x"), over(2, hour))}},
	{name: "override-unconfigured-descriptor", ref: "test/config/config_test.go TestConfigLimitOverride (an override applies even where nothing is configured)",
		config: "nested-basic", calls: []call{one(dl(1, day, "free", "x"), ok(1, day, 0)), one(dl(1, day, "free", "x"), over(1, day))}},
	{name: "override-other-values", ref: "test/config/config_test.go TestConfigLimitOverride (a different value has a different counter)",
		config: "nested-basic", calls: []call{one(dl(1, day, "free", "y"), ok(1, day, 0)), one(dl(1, day, "free", "z"), ok(1, day, 0))}},
	{name: "override-values-change", ref: "test/config/config_test.go TestConfigLimitOverride (\"change in override value doesn't erase stats\": the reference keeps one counter per descriptor)", diff: diffLimitCounters,
		config: "nested-basic", calls: []call{one(dl(2, hour, "free", "w"), ok(2, hour, 1)), one(dl(5, hour, "free", "w"), ok(5, hour, 4))}},
	{name: "override-unknown-domain", ref: "test/config/config_test.go TestConfigLimitOverride (no override without the domain)",
		config: "nested-basic", calls: []call{{domain: "no-such-domain", descs: ds(dl(1, day, "free", "x")), overall: OK, want: []status{none}}}},

	// --- domains, no match, errors -------------------------------------------------------
	{name: "unknown-domain", ref: "test/config/config_test.go TestBasicConfig (foo_domain: no limit)",
		config: "nested-basic", calls: []call{{domain: "foo_domain", descs: ds(d("flat", "x")), overall: OK, want: []status{none}}}},
	{name: "no-match", ref: "test/service/ratelimit_test.go TestService (a descriptor that matches nothing: OK)",
		config: "nested-basic", calls: []call{one(d("nothing", "here"), none)}},
	{name: "empty-descriptor", ref: "test/config/config_test.go TestBasicConfig (a descriptor without entries: no limit)",
		config: "nested-basic", calls: []call{one(d(), none)}},
	{name: "empty-descriptor-list", ref: "src/service/ratelimit.go (\"rate limit descriptor list must not be empty\")", diff: diffErrorCode,
		config: "nested-basic", calls: []call{{descs: nil, err: "InvalidArgument"}}},
	{name: "empty-domain", ref: "src/service/ratelimit.go (\"rate limit domain must not be empty\")", diff: diffErrorCode,
		config: "nested-basic", calls: []call{{noDomain: true, descs: ds(d("flat", "x")), err: "InvalidArgument"}}},
}
