package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// envoyEnvSource names the configuration that sluice serve --envoy-env
// builds from the environment, in messages.
const envoyEnvSource = "environment (--envoy-env)"

// handling is what sluice serve --envoy-env does with one of
// envoyproxy/ratelimit's environment variables.
type handling uint8

const (
	// used: the variable means what it means to the reference.
	used handling = iota
	// warned: Sluice does not do what the variable asks, and doing
	// without it is harmless (statistics sinks, tuning of the
	// reference's own Redis client); set to anything but its default, it
	// is named in a warning at startup.
	warned
	// refused: Sluice does not do what the variable asks and doing
	// without it would change decisions or security; set to anything but
	// its default, serve refuses to start and names it.
	refused
)

// envVar is one of envoyproxy/ratelimit's environment variables.
type envVar struct {
	name string
	def  string // the reference's default
	how  handling
	// why says what Sluice does instead, for a warning or an error.
	why string
}

// envoyVars are every environment variable that envoyproxy/ratelimit
// reads (its settings, as of its 2026 source), in its order, with its
// defaults, the one that Envoy Gateway sets though the reference does
// not read it, and the hot-key settings of its 2026 tests. docs/envoy.md has the same table for people
// (TestEnvoyEnvDocs checks that it names every one).
var envoyVars = []envVar{
	{"HOST", "0.0.0.0", used, ""},
	{"PORT", "8080", used, ""},
	{"DEBUG_HOST", "0.0.0.0", used, ""},
	{"DEBUG_PORT", "6070", used, ""},
	{"GRPC_UDS", "", refused, "Sluice serves gRPC on TCP only (GRPC_HOST:GRPC_PORT)"},
	{"GRPC_HOST", "0.0.0.0", used, ""},
	{"GRPC_PORT", "8081", used, ""},
	{"GRPC_MAX_CONNECTION_AGE", "24h", used, ""},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", used, ""},
	{"GRPC_MAX_CONCURRENT_STREAMS", "0", used, ""},
	{"MAX_CONCURRENT_REQUESTS", "0", refused, "Sluice has no bound on requests decided at once; it runs every call it accepts"},
	{"REQUEST_TIMEOUT", "0", refused, "Sluice bounds a call by Envoy's own timeout (the gRPC deadline) and REDIS_TIMEOUT"},
	{"GRPC_SERVER_USE_TLS", "false", used, ""},
	{"GRPC_SERVER_TLS_CERT", "", used, ""},
	{"GRPC_SERVER_TLS_KEY", "", used, ""},
	{"GRPC_CLIENT_TLS_CACERT", "", used, ""},
	{"GRPC_CLIENT_TLS_SAN", "", used, ""},
	{"GRPC_SERVER_TLS_CA_CERT", "", warned, "envoyproxy/ratelimit does not read it (its variable is GRPC_CLIENT_TLS_CACERT), so client certificates are not asked for, as there"},
	{"LOG_LEVEL", "WARN", used, ""},
	{"LOG_FORMAT", "text", used, ""},
	{"CONFIG_TYPE", "FILE", used, ""},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", used, ""},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", used, ""},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", used, ""},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", used, ""},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", warned, "reconnections wait as XDS_CLIENT_BACKOFF_* say"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", used, ""},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", used, ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", used, ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", used, ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", used, ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", used, ""},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", used, ""},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", used, ""},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", used, ""},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", used, ""},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", used, ""},
	{"USE_DOG_STATSD", "false", warned, "Sluice sends no statsd; its metrics are Prometheus series (USE_PROMETHEUS)"},
	{"USE_DOG_STATSD_MOGRIFIERS", "", warned, "Sluice sends no statsd"},
	{"USE_STATSD", "true", warned, "Sluice sends no statsd; its metrics are Prometheus series (USE_PROMETHEUS, and /metrics on DEBUG_PORT); set USE_STATSD=false to silence this"},
	{"STATSD_HOST", "localhost", warned, "Sluice sends no statsd"},
	{"STATSD_PORT", "8125", warned, "Sluice sends no statsd"},
	{"EXTRA_TAGS", "", warned, "Sluice's series carry their own labels"},
	{"STATS_FLUSH_INTERVAL", "10s", warned, "Prometheus series are read when scraped"},
	{"DISABLE_STATS", "false", warned, "Sluice's metrics are always kept"},
	{"USE_PROMETHEUS", "false", used, ""},
	{"PROMETHEUS_ADDR", ":9090", used, ""},
	{"PROMETHEUS_PATH", "/metrics", used, ""},
	{"PROMETHEUS_MAPPER_YAML", "", warned, "Sluice's series are its own (docs/operations.md), not statsd names mapped"},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", used, ""},
	{"RUNTIME_SUBDIRECTORY", "", used, ""},
	{"RUNTIME_APPDIRECTORY", "config", used, ""},
	{"RUNTIME_IGNOREDOTFILES", "false", used, ""},
	{"RUNTIME_WATCH_ROOT", "true", used, ""},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", warned, "Sluice's Redis keys expire when their window ends"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", warned, "the Redis store keeps its own cache of refused keys, exact and bounded (store.redis.local_refusals)"},
	{"NEAR_LIMIT_RATIO", "0.8", warned, "Sluice has no near-limit statistic"},
	// Hot-key batching: set by the reference's 2026 integration tests,
	// not yet in a settings file Sluice could read, so no default is
	// known and any value is warned about.
	{"HOT_KEY_DETECTION_ENABLED", "", warned, "Sluice does not batch the Redis increments of hot keys; its local refusals (store.redis.local_refusals) keep refused hot keys off Redis"},
	{"HOT_KEY_THRESHOLD", "", warned, "read only with HOT_KEY_DETECTION_ENABLED"},
	{"HOT_KEY_FLUSH_WINDOW", "", warned, "read only with HOT_KEY_DETECTION_ENABLED"},
	{"CACHE_KEY_PREFIX", "", used, ""},
	{"BACKEND_TYPE", "redis", used, ""},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", used, ""},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", used, ""},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", used, ""},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", used, ""},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", used, ""},
	{"LIMIT_REQUEST_HEADERS_ENABLED", "false", refused, "Sluice does not add rate limit headers to the request sent upstream (request_headers_to_add)"},
	{"LIMIT_REQUEST_LIMIT_HEADER", "RateLimit-Limit", warned, "read only with LIMIT_REQUEST_HEADERS_ENABLED"},
	{"LIMIT_REQUEST_REMAINING_HEADER", "RateLimit-Remaining", warned, "read only with LIMIT_REQUEST_HEADERS_ENABLED"},
	{"LIMIT_REQUEST_RESET_HEADER", "RateLimit-Reset", warned, "read only with LIMIT_REQUEST_HEADERS_ENABLED"},
	{"LIMIT_PER_UNIT_HEADERS_ENABLED", "false", refused, "Sluice does not write a header per unit (RateLimit-Limit-Seconds and the like)"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", used, ""},
	{"REDIS_SOCKET_TYPE", "unix", used, ""},
	{"REDIS_TYPE", "SINGLE", used, ""},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", used, ""},
	{"REDIS_POOL_SIZE", "10", warned, "Sluice's Redis client multiplexes calls on a connection per node"},
	{"REDIS_AUTH", "", used, ""},
	{"REDIS_TLS", "false", used, ""},
	{"REDIS_TLS_CLIENT_CERT", "", used, ""},
	{"REDIS_TLS_CLIENT_KEY", "", used, ""},
	{"REDIS_TLS_CACERT", "", used, ""},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", refused, "Sluice always verifies the Redis server's name"},
	{"REDIS_PIPELINE_WINDOW", "0", warned, "Sluice batches the calls that queue for Redis itself (store.redis.max_batch)"},
	{"REDIS_PIPELINE_LIMIT", "0", warned, "Sluice batches the calls that queue for Redis itself (store.redis.max_batch)"},
	{"REDIS_USE_EXPLICIT_PIPELINE", "false", warned, "Sluice batches the calls that queue for Redis itself (store.redis.max_batch)"},
	{"REDIS_PERSECOND", "false", refused, "Sluice keeps every limit in one store (REDIS_URL); a second Redis for per-second limits is not supported"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_AUTH", "", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TLS", "false", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_SENTINEL_AUTH", "", used, ""},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_USE_EXPLICIT_PIPELINE", "false", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", used, ""},
	{"REDIS_TIMEOUT", "10s", used, ""},
	{"REDIS_PERSECOND_TIMEOUT", "10s", warned, "read only with REDIS_PERSECOND"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", warned, "Sluice's Redis client has no pool to run empty"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", warned, "read only with REDIS_PERSECOND"},
	{"MEMCACHE_HOST_PORT", "", warned, "read only with BACKEND_TYPE=memcache, which Sluice does not support"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV", "", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV_REFRESH", "0", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS", "false", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CACERT", "", warned, "read only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", warned, "read only with BACKEND_TYPE=memcache"},
	{"SHADOW_MODE", "false", used, ""},
	{"QUOTA_MODE", "false", used, "every descriptor in quota mode"},
	{"RESPONSE_DYNAMIC_METADATA", "false", used, "each answer carries the reference's dynamic metadata: domain, descriptors, hitsAddend and the metadata of the descriptors under their limit"},
	{"MERGE_DOMAIN_CONFIG", "false", used, ""},
	{"TRACING_ENABLED", "false", used, "exports OpenTelemetry traces over OTLP (docs/operations.md, \"Traces\"); when false, OTEL_EXPORTER_OTLP_*ENDPOINT turns nothing on"},
	{"TRACING_SERVICE_NAME", "RateLimit", used, "the traces' service.name (OTEL_SERVICE_NAME wins)"},
	{"TRACING_SERVICE_NAMESPACE", "", warned, "not set on the traces; OTEL_RESOURCE_ATTRIBUTES=service.namespace=... sets it"},
	{"TRACING_SERVICE_INSTANCE_ID", "", warned, "not set on the traces; OTEL_RESOURCE_ATTRIBUTES=service.instance.id=... sets it"},
	{"TRACING_EXPORTER_PROTOCOL", "http", used, "http (OTLP over HTTP, protobuf) or grpc"},
	{"TRACING_SAMPLING_RATE", "1", used, "the share of traces that start here to sample, 0 to 1; a caller's sampled trace is always continued"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", used, "where traces go, with TRACING_ENABLED (ignored without it)"},
}

// envoyEnv is the service as envoyproxy/ratelimit's environment variables
// describe it.
type envoyEnv struct {
	httpAddr, debugAddr, grpcAddr string
	maxConnAge, maxConnAgeGrace   time.Duration
	maxStreams                    uint32

	grpcTLS *grpcServerTLS // nil without GRPC_SERVER_USE_TLS

	logLevel, logFormat string

	xds        bool // CONFIG_TYPE=GRPC_XDS_SOTW; else FILE
	forceStart bool
	xdsClient  xdsSettings

	// runtimeDir is where FILE mode reads its configuration files:
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	runtimeDir string
	ignoreDot  bool

	promAddr, promPath string // promAddr "" without USE_PROMETHEUS

	memory  bool // BACKEND_TYPE=memory (a Sluice addition)
	redis   envRedis
	headers bool // LIMIT_RESPONSE_HEADERS_ENABLED
	// headerNames are LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER.
	headerNames [3]string
	// countRefused is the reference's counting: every hit counted,
	// unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	countRefused bool
	shadowAll    bool // SHADOW_MODE
	// quotaAll: QUOTA_MODE.
	quotaAll bool
	// dynamicMetadata: RESPONSE_DYNAMIC_METADATA.
	dynamicMetadata bool
	mergeDomains    bool // MERGE_DOMAIN_CONFIG

	healthyWithConfig bool
	redisHealth       bool

	// tracing is TRACING_ENABLED: then traces go over tracingProtocol
	// (grpc or http/protobuf), sampling tracingRatio of those that start
	// here, as service tracingService.
	tracing         bool
	tracingProtocol string
	tracingRatio    float64
	tracingService  string
}

// grpcServerTLS is the gRPC listener's TLS (GRPC_SERVER_*).
type grpcServerTLS struct {
	cert, key, clientCA, clientSAN string
}

// xdsSettings configure the xDS client (CONFIG_GRPC_XDS_*, XDS_CLIENT_*).
type xdsSettings struct {
	url, nodeID                string
	nodeMetadata               map[string]string
	headers                    map[string]string
	useTLS                     bool
	certFile, keyFile, caFile  string
	serverName                 string
	backoffInitial, backoffMax time.Duration
	backoffRandom              float64
	backoffJitter              bool
	maxMsgSize                 int
}

// envRedis is the Redis store of REDIS_*.
type envRedis struct {
	addrs                     []string
	masterSet                 string // REDIS_TYPE=SENTINEL
	username, password        string
	sentinelPassword          string
	tls                       bool
	caFile, certFile, keyFile string
	timeout                   time.Duration
	prefix                    string
}

// envReader reads the variables of envoyVars, collecting the problems.
type envReader struct {
	lookup   func(string) (string, bool)
	vars     map[string]envVar
	problems []string
	warnings []string
}

func (r *envReader) get(name string) string {
	if v, ok := r.lookup(name); ok {
		return v
	}
	return r.vars[name].def
}

// isSet reports whether the variable is set to something other than its
// default.
func (r *envReader) isSet(name string) bool {
	v, ok := r.lookup(name)
	return ok && v != r.vars[name].def
}

func (r *envReader) fail(name, format string, args ...any) {
	r.problems = append(r.problems, name+": "+fmt.Sprintf(format, args...))
}

func (r *envReader) boolean(name string) bool {
	s := r.get(name)
	b, err := strconv.ParseBool(s)
	if err != nil {
		r.fail(name, "%q is not a boolean (want true or false)", s)
	}
	return b
}

func (r *envReader) port(name string) int {
	s := r.get(name)
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		r.fail(name, "%q is not a port number (0 to 65535)", s)
	}
	return int(p)
}

func (r *envReader) duration(name string) time.Duration {
	s := r.get(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		r.fail(name, "%q is not a duration, like 10s", s)
	}
	return d
}

// stringMap reads "k1:v1,k2:v2" (sep ':'), the reference's format of
// maps, or "k1=v1,k2=v2" (sep '=') for the node metadata.
func (r *envReader) stringMap(name string, sep string) map[string]string {
	s := r.get(name)
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, sep)
		if !ok || k == "" {
			r.fail(name, "%q is not a list of key%svalue pairs separated by commas", s, sep)
			return nil
		}
		m[k] = v
	}
	return m
}

// parseEnvoyEnv reads envoyproxy/ratelimit's environment variables with
// lookup (os.LookupEnv). It returns the warnings to log (each naming its
// variable), and an error listing every variable it cannot honour.
func parseEnvoyEnv(lookup func(string) (string, bool)) (*envoyEnv, []string, error) {
	r := &envReader{lookup: lookup, vars: map[string]envVar{}}
	for _, v := range envoyVars {
		r.vars[v.name] = v
	}
	for _, v := range envoyVars {
		switch {
		case v.how == refused && r.isSet(v.name):
			r.fail(v.name, "set to %q, but %s", r.get(v.name), v.why)
		case v.how == warned && v.name == "USE_STATSD":
			if b, err := strconv.ParseBool(r.get(v.name)); err == nil && b {
				r.warnings = append(r.warnings, v.name+" is "+r.get(v.name)+": "+v.why)
			}
		case v.how == warned && r.isSet(v.name):
			r.warnings = append(r.warnings, v.name+" is set and ignored: "+v.why)
		}
	}
	e := &envoyEnv{}
	hostPort := func(hostVar, portVar string) string {
		return net.JoinHostPort(r.get(hostVar), strconv.Itoa(r.port(portVar)))
	}
	e.httpAddr = hostPort("HOST", "PORT")
	e.debugAddr = hostPort("DEBUG_HOST", "DEBUG_PORT")
	e.grpcAddr = hostPort("GRPC_HOST", "GRPC_PORT")
	e.maxConnAge = r.duration("GRPC_MAX_CONNECTION_AGE")
	e.maxConnAgeGrace = r.duration("GRPC_MAX_CONNECTION_AGE_GRACE")
	if s := r.get("GRPC_MAX_CONCURRENT_STREAMS"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 1<<32-1 {
			r.fail("GRPC_MAX_CONCURRENT_STREAMS", "%q is not a number of streams (0 to 4294967294)", s)
		}
		e.maxStreams = uint32(n)
	}
	if r.boolean("GRPC_SERVER_USE_TLS") {
		t := &grpcServerTLS{cert: r.get("GRPC_SERVER_TLS_CERT"), key: r.get("GRPC_SERVER_TLS_KEY"),
			clientCA: r.get("GRPC_CLIENT_TLS_CACERT"), clientSAN: r.get("GRPC_CLIENT_TLS_SAN")}
		if t.cert == "" || t.key == "" {
			r.fail("GRPC_SERVER_USE_TLS", "is true but GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY are not both set")
		}
		if t.clientSAN != "" && t.clientCA == "" {
			r.fail("GRPC_CLIENT_TLS_SAN", "needs GRPC_CLIENT_TLS_CACERT: names are checked on client certificates, which are asked for only with a client CA")
		}
		e.grpcTLS = t
	}
	e.logLevel, e.logFormat = envLogLevel(r), strings.ToLower(r.get("LOG_FORMAT"))
	if e.logFormat != "text" && e.logFormat != "json" {
		r.fail("LOG_FORMAT", "%q is not text or json", r.get("LOG_FORMAT"))
	}
	switch ct := r.get("CONFIG_TYPE"); ct {
	case "FILE":
	case "GRPC_XDS_SOTW":
		e.xds = true
	default:
		r.fail("CONFIG_TYPE", "%q is not FILE or GRPC_XDS_SOTW", ct)
	}
	e.forceStart = r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG")
	x := &e.xdsClient
	x.url, x.nodeID = r.get("CONFIG_GRPC_XDS_SERVER_URL"), r.get("CONFIG_GRPC_XDS_NODE_ID")
	x.nodeMetadata = r.stringMap("CONFIG_GRPC_XDS_NODE_METADATA", "=")
	x.headers = r.stringMap("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":")
	x.useTLS = r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS")
	x.certFile, x.keyFile = r.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), r.get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	x.caFile, x.serverName = r.get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), r.get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
	if x.useTLS && (x.certFile == "") != (x.keyFile == "") {
		r.fail("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: set both or neither")
	}
	x.backoffInitial = r.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	x.backoffMax = r.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	if x.backoffInitial <= 0 {
		r.fail("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "must be positive")
	}
	if x.backoffMax < x.backoffInitial {
		r.fail("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "%v is shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", x.backoffMax)
	}
	if s := r.get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1 {
			r.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "%q is not a number from 0 to 1", s)
		}
		x.backoffRandom = f
	}
	x.backoffJitter = r.boolean("XDS_CLIENT_BACKOFF_JITTER")
	if s := r.get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			r.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "%q is not a number of bytes", s)
		}
		x.maxMsgSize = n
	}

	root, sub, app := r.get("RUNTIME_ROOT"), r.get("RUNTIME_SUBDIRECTORY"), r.get("RUNTIME_APPDIRECTORY")
	// With RUNTIME_WATCH_ROOT the reference loads the keys of
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY that start with
	// RUNTIME_APPDIRECTORY; without it, every file under
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY: the same
	// files either way. Sluice looks at them on every --watch tick.
	e.runtimeDir = filepath.Join(root, sub, app)
	_ = r.boolean("RUNTIME_WATCH_ROOT")
	e.ignoreDot = r.boolean("RUNTIME_IGNOREDOTFILES")

	if r.boolean("USE_PROMETHEUS") {
		e.promAddr, e.promPath = r.get("PROMETHEUS_ADDR"), r.get("PROMETHEUS_PATH")
		if _, _, err := net.SplitHostPort(e.promAddr); err != nil {
			r.fail("PROMETHEUS_ADDR", "%q is not an address host:port, like :9090", e.promAddr)
		}
		if !strings.HasPrefix(e.promPath, "/") {
			r.fail("PROMETHEUS_PATH", "%q does not start with /", e.promPath)
		}
	}
	e.headers = r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED")
	e.headerNames = [3]string{r.get("LIMIT_LIMIT_HEADER"), r.get("LIMIT_REMAINING_HEADER"), r.get("LIMIT_RESET_HEADER")}
	for i, n := range e.headerNames {
		if !validHeaderName(n) {
			r.fail([]string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}[i], "%q is not a header name", n)
		}
	}
	e.tracing = r.boolean("TRACING_ENABLED")
	if e.tracing {
		switch p := r.get("TRACING_EXPORTER_PROTOCOL"); p {
		case "http":
			e.tracingProtocol = "http/protobuf"
		case "grpc":
			e.tracingProtocol = "grpc"
		default:
			r.fail("TRACING_EXPORTER_PROTOCOL", "%q is not http or grpc", p)
		}
		s := r.get("TRACING_SAMPLING_RATE")
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || !(x >= 0 && x <= 1) {
			r.fail("TRACING_SAMPLING_RATE", "%q is not a rate from 0 to 1", s)
		}
		e.tracingRatio, e.tracingService = x, r.get("TRACING_SERVICE_NAME")
	}
	e.countRefused = !r.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	e.shadowAll = r.boolean("SHADOW_MODE")
	e.dynamicMetadata = r.boolean("RESPONSE_DYNAMIC_METADATA")
	e.quotaAll = r.boolean("QUOTA_MODE")
	e.mergeDomains = r.boolean("MERGE_DOMAIN_CONFIG")
	e.healthyWithConfig = r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	e.redisHealth = r.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")

	switch b := r.get("BACKEND_TYPE"); b {
	case "redis":
		e.redis = envRedisSettings(r)
	case "memory":
		e.memory = true
	default:
		r.fail("BACKEND_TYPE", "%q is not supported (want redis, or memory: Sluice's store in the process)", b)
	}
	_ = r.boolean("REDIS_PERSECOND")
	_ = r.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
	if len(r.problems) > 0 {
		return nil, r.warnings, &envError{problems: r.problems}
	}
	return e, r.warnings, nil
}

// validHeaderName reports whether s is a header field name (an RFC 9110
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// envLogLevel maps LOG_LEVEL (logrus's levels, in any case) to sluice's.
func envLogLevel(r *envReader) string {
	switch s := strings.ToLower(r.get("LOG_LEVEL")); s {
	case "trace", "debug":
		return "debug"
	case "info":
		return "info"
	case "warn", "warning":
		return "warn"
	case "error", "fatal", "panic":
		return "error"
	default:
		r.fail("LOG_LEVEL", "%q is not a level (want trace, debug, info, warn, error, fatal or panic)", r.get("LOG_LEVEL"))
		return "info"
	}
}

// envRedisSettings reads REDIS_*.
func envRedisSettings(r *envReader) envRedis {
	var red envRedis
	if st := r.get("REDIS_SOCKET_TYPE"); st != "tcp" {
		r.fail("REDIS_SOCKET_TYPE", "%q: Sluice reaches Redis over TCP only; set REDIS_SOCKET_TYPE=tcp and REDIS_URL to host:port", st)
	}
	url := r.get("REDIS_URL")
	parts := strings.Split(url, ",")
	switch t := strings.ToUpper(r.get("REDIS_TYPE")); t {
	case "SINGLE", "CLUSTER":
	case "SENTINEL":
		if len(parts) < 2 {
			r.fail("REDIS_URL", "%q: with REDIS_TYPE=SENTINEL it is the master's name then the sentinels, like mymaster,10.0.0.1:26379", url)
			return red
		}
		red.masterSet, parts = parts[0], parts[1:]
	default:
		r.fail("REDIS_TYPE", "%q is not SINGLE, SENTINEL or CLUSTER", r.get("REDIS_TYPE"))
	}
	for _, a := range parts {
		a = strings.TrimSpace(a)
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			r.fail("REDIS_URL", "%q is not a list of host:port addresses separated by commas", url)
			return red
		}
		red.addrs = append(red.addrs, a)
	}
	if auth := r.get("REDIS_AUTH"); auth != "" {
		// The reference reads "user:password", or a password alone.
		if u, p, ok := strings.Cut(auth, ":"); ok {
			red.username, red.password = u, p
		} else {
			red.password = auth
		}
	}
	red.sentinelPassword = r.get("REDIS_SENTINEL_AUTH")
	if red.sentinelPassword != "" && red.masterSet == "" {
		r.fail("REDIS_SENTINEL_AUTH", "is set but REDIS_TYPE is not SENTINEL")
	}
	red.tls = r.boolean("REDIS_TLS")
	red.caFile, red.certFile, red.keyFile = r.get("REDIS_TLS_CACERT"), r.get("REDIS_TLS_CLIENT_CERT"), r.get("REDIS_TLS_CLIENT_KEY")
	red.timeout = r.duration("REDIS_TIMEOUT")
	if red.timeout <= 0 {
		r.fail("REDIS_TIMEOUT", "must be positive")
	}
	red.prefix = r.get("CACHE_KEY_PREFIX")
	return red
}

// envError lists the environment variables that sluice serve --envoy-env
// cannot honour.
type envError struct{ problems []string }

func (e *envError) Error() string {
	return strings.Join(e.problems, "\n")
}

// sluiceYAML returns the configuration file that the environment
// describes: the listeners and the store. The envoy section is empty:
// its domains come from the runtime directory or over xDS.
func (e *envoyEnv) sluiceYAML() ([]byte, error) {
	listen := map[string]any{"http": e.httpAddr, "grpc": e.grpcAddr, "admin": e.debugAddr}
	store := map[string]any{"backend": "memory"}
	if !e.memory {
		red := map[string]any{"addrs": e.redis.addrs}
		if e.redis.prefix != "" {
			red["prefix"] = e.redis.prefix
		}
		if e.redis.username != "" {
			red["username"] = e.redis.username
		}
		if e.redis.password != "" {
			red["password"] = e.redis.password
		}
		if e.redis.masterSet != "" {
			s := map[string]any{"master_set": e.redis.masterSet}
			if e.redis.sentinelPassword != "" {
				s["password"] = e.redis.sentinelPassword
			}
			red["sentinel"] = s
		}
		if e.redis.tls {
			t := map[string]any{}
			for k, v := range map[string]string{"ca_file": e.redis.caFile, "cert_file": e.redis.certFile, "key_file": e.redis.keyFile} {
				if v != "" {
					t[k] = v
				}
			}
			if len(t) == 0 {
				red["tls"] = true
			} else {
				red["tls"] = t
			}
		}
		// The reference answers an error when Redis fails, and Envoy
		// applies failure_mode_deny: on_error: error does the same.
		store = map[string]any{"backend": "redis", "redis": red, "timeout": e.redis.timeout.String(), "on_error": "error"}
	}
	doc := map[string]any{"listen": listen, "store": store, "envoy": []any{}}
	if e.tracing {
		// The endpoint comes from OTEL_EXPORTER_OTLP_*ENDPOINT, as the
		// reference's exporter reads it.
		doc["tracing"] = map[string]any{"protocol": e.tracingProtocol, "sample_ratio": e.tracingRatio}
	}
	return yaml.Marshal(doc)
}

// getenv is the environment as tracing reads it: without TRACING_ENABLED
// no OTLP endpoint turns traces on, as with the reference.
func (e *envoyEnv) getenv(name string) string {
	if !e.tracing && strings.HasPrefix(name, "OTEL_EXPORTER_OTLP_") && strings.HasSuffix(name, "ENDPOINT") {
		return ""
	}
	return os.Getenv(name)
}

// envoyVarNames returns the names of envoyVars, sorted.
func envoyVarNames() []string {
	out := make([]string, len(envoyVars))
	for i, v := range envoyVars {
		out[i] = v.name
	}
	slices.Sort(out)
	return out
}
