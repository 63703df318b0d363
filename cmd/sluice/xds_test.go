package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/service/rls"
	"github.com/sluicehq/sluice/internal/testkit"
)

const xdsNode = "envoy-ratelimit"

// xdsConfig is a RateLimitConfig of domain d: key k limited to perHour,
// and j too when withJ.
func xdsConfig(name, d string, perHour uint32, withJ bool) *rlsconfv3.RateLimitConfig {
	c := &rlsconfv3.RateLimitConfig{Name: name, Domain: d, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: perHour}},
	}}
	if withJ {
		c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "j", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 9}})
	}
	return c
}

// xdsEnv is the environment of a service configured over xDS from addr,
// as Envoy Gateway sets it (without TLS), with short reconnection waits.
func xdsEnv(addr string, extra ...string) []string {
	return append([]string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"BACKEND_TYPE=memory", "USE_STATSD=false", "LOG_LEVEL=info", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + addr,
		"CONFIG_GRPC_XDS_NODE_ID=" + xdsNode, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=100ms",
		"RUNTIME_ROOT=/nonexistent"}, extra...)
}

// rlsAsk sends one descriptor (key, value) of domain d and returns the
// status.
func rlsAsk(t *testing.T, in *instance, d, key string) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(dialGRPC(t, in.grpc)).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: d, Descriptors: []*rlscommon.RateLimitDescriptor{descriptor(key, "v")}})
	if err != nil {
		return nil, err
	}
	return resp.Statuses[0], nil
}

// TestEnvoyEnvXDS serves a configuration received over xDS from a
// go-control-plane management server: updates apply as reloads (the
// counters of unchanged limits kept), an invalid update is refused with
// its problems (NACK) and the previous configuration keeps serving, and
// the client finds the server again after it restarts.
func TestEnvoyEnvXDS(t *testing.T) {
	x := testkit.StartXDS(t)
	// Without FORCE_START_WITHOUT_INITIAL_CONFIG the service does not
	// listen before the first configuration: the snapshot is set only
	// once the client has subscribed, and the log must say that the
	// service waited before it listened.
	go func() {
		deadline := time.Now().Add(waitTimeout)
		for x.Requests() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		x.Set(t, xdsNode, "v1", xdsConfig("edge", "edge", 2, false))
	}()
	in := startEnvoyEnv(t, xdsEnv(x.Addr)...)
	logged := in.stderr.String()
	w, l := strings.Index(logged, "waiting for the first rate limit configuration over xDS"), strings.Index(logged, "msg=listening")
	if w < 0 || l < 0 || w > l {
		t.Errorf("the log does not say the service waited for its first configuration before listening:\n%s", logged)
	}
	remaining := func(key string) uint32 {
		st, err := rlsAsk(t, in, "edge", key)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetLimitRemaining()
	}
	if got := remaining("k"); got != 1 {
		t.Fatalf("first call under v1: remaining %d, want 1", got)
	}
	// v2 adds j and keeps k's numbers: k's counter is kept.
	x.Set(t, xdsNode, "v2", xdsConfig("edge", "edge", 2, true))
	testkit.WaitFor(t, waitTimeout, "v2 acknowledged", func() bool { return slices.Contains(x.Acked(), "v2") })
	if got := remaining("k"); got != 0 {
		t.Errorf("after v2, k remaining %d, want 0 (its counter kept)", got)
	}
	if st, err := rlsAsk(t, in, "edge", "j"); err != nil || st.GetCurrentLimit().GetRequestsPerUnit() != 9 {
		t.Errorf("after v2, j = %v, %v; want its limit 9", st, err)
	}
	// v3 is invalid (a limit without a unit): refused with the problem,
	// and v2 keeps serving.
	bad := xdsConfig("edge", "edge", 2, true)
	bad.Descriptors[1].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	x.Set(t, xdsNode, "v3", bad)
	testkit.WaitFor(t, waitTimeout, "v3 refused", func() bool { return len(x.Nacked()) > 0 })
	if n := x.Nacked()[0]; !strings.Contains(n, `RateLimitConfig "edge"`) || !strings.Contains(n, "descriptors[1].rate_limit") {
		t.Errorf("NACK detail = %q, want the resource and the problem's path", n)
	}
	if st, err := rlsAsk(t, in, "edge", "j"); err != nil || st.GetCurrentLimit().GetRequestsPerUnit() != 9 {
		t.Errorf("after the refused v3, j = %v, %v; want v2's limit 9", st, err)
	}
	if slices.Contains(x.Acked(), "v3") {
		t.Errorf("v3 was acknowledged: %q", x.Acked())
	}
	// The management server restarts with v4: the client reconnects.
	addr := x.Addr
	x.Stop()
	x = testkit.StartXDSAt(t, addr)
	x.Set(t, xdsNode, "v4", xdsConfig("edge", "edge", 5, true))
	testkit.WaitFor(t, waitTimeout, "v4 after the restart", func() bool {
		st, err := rlsAsk(t, in, "edge", "k")
		return err == nil && st.GetCurrentLimit().GetRequestsPerUnit() == 5
	})
	// v2 and v4 were reloads, v3 a refused one (v1 the first).
	req, _ := http.NewRequest("GET", "http://"+in.admin+"/metrics", nil)
	_, metrics := testkit.DoHTTP(t, http.DefaultClient, req)
	for _, line := range []string{"sluice_config_reloads_total 2", "sluice_config_reload_failures_total 1"} {
		if !strings.Contains(metrics, "\n"+line+"\n") {
			t.Errorf("the admin listener's /metrics has no line %q:\n%s", line, grepLines(metrics, "sluice_config_reload"))
		}
	}
}

// TestEnvoyEnvXDSForceStart: with FORCE_START_WITHOUT_INITIAL_CONFIG the
// service listens at once; until a configuration arrives, calls fail
// Unavailable (the reference fails them too) and /healthcheck answers 500
// when HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks for a configuration.
func TestEnvoyEnvXDSForceStart(t *testing.T) {
	x := testkit.StartXDS(t)
	in := startEnvoyEnv(t, xdsEnv(x.Addr, "FORCE_START_WITHOUT_INITIAL_CONFIG=true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true")...)
	if _, err := rlsAsk(t, in, "edge", "k"); status.Code(err) != codes.Unavailable {
		t.Errorf("before any configuration: %v, want Unavailable", err)
	}
	if code, _, body := in.do(t, "GET", "/healthcheck", ""); code != 500 {
		t.Errorf("GET /healthcheck before any configuration = %d %q, want 500", code, body)
	}
	x.Set(t, xdsNode, "v1", xdsConfig("edge", "edge", 2, false))
	testkit.WaitFor(t, waitTimeout, "the first configuration", func() bool {
		code, _, _ := in.do(t, "GET", "/healthcheck", "")
		return code == 200
	})
	if st, err := rlsAsk(t, in, "edge", "k"); err != nil || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Errorf("after v1: %v, %v; want the limit 2", st, err)
	}
}

// TestEnvoyEnvXDSTLS runs the TLS of Envoy Gateway's deployment: mutual
// TLS to the management server (CONFIG_GRPC_XDS_*: the server's CA, a
// client certificate) and TLS on the gRPC listener alone
// (GRPC_SERVER_*), while /healthcheck stays plain HTTP for the probes.
func TestEnvoyEnvXDSTLS(t *testing.T) {
	ca := testkit.NewCA(t, "envoy-gateway")
	dir := t.TempDir()
	srvCert := ca.Issue(t, testkit.Leaf{CommonName: "envoy-gateway"})
	cliCert := ca.Issue(t, testkit.Leaf{CommonName: "envoy-ratelimit", Client: true})
	caFile := testkit.WriteCertFile(t, dir, "ca.crt", ca.PEM)
	certFile := testkit.WriteCertFile(t, dir, "tls.crt", srvCert.CertPEM)
	keyFile := testkit.WriteCertFile(t, dir, "tls.key", srvCert.KeyPEM)
	cliCertFile := testkit.WriteCertFile(t, dir, "client.crt", cliCert.CertPEM)
	cliKeyFile := testkit.WriteCertFile(t, dir, "client.key", cliCert.KeyPEM)
	mtls := &tls.Config{Certificates: []tls.Certificate{srvCert.TLS(t)}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	x := testkit.StartXDSAt(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(mtls)))
	x.Set(t, xdsNode, "v1", xdsConfig("edge", "edge", 3, false))
	in := startEnvoyEnv(t, xdsEnv(x.Addr,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+caFile,
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+cliCertFile, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+cliKeyFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN=localhost",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+certFile, "GRPC_SERVER_TLS_KEY="+keyFile,
		"GRPC_SERVER_TLS_CA_CERT="+caFile)...)
	if code, _, body := in.do(t, "GET", "/healthcheck", ""); code != 200 {
		t.Errorf("GET /healthcheck (plain HTTP) = %d %q, want 200", code, body)
	}
	conn, err := grpc.NewClient(in.grpc, grpc.WithTransportCredentials(credentials.NewTLS(testkit.ClientConfig(t, ca, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("k", "v")}})
	if err != nil || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Errorf("ShouldRateLimit over TLS = %v, %v; want the limit 3 received over mutual TLS", resp, err)
	}
	if !strings.Contains(in.stderr.String(), "GRPC_SERVER_TLS_CA_CERT is set and ignored") {
		t.Errorf("no warning names GRPC_SERVER_TLS_CA_CERT:\n%s", in.stderr)
	}
}

// withUnknown appends b to the unknown fields of m, as a newer control
// plane's fields arrive in Sluice's copy of the message; it returns m.
func withUnknown[M proto.Message](m M, b []byte) M {
	r := m.ProtoReflect()
	r.SetUnknown(append(r.GetUnknown(), b...))
	return m
}

// quotaModeBytes is the descriptor's field 7 as envoyproxy/ratelimit's
// rls_conf.proto encodes it.
func quotaModeBytes(on bool) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), protowire.EncodeBool(on))
}

// TestXDSNewerFields: quota_mode (7) of a newer RateLimitDescriptor,
// which Sluice's copy of the message keeps as an unknown field, is read
// at every depth and checked as the same key of a file; any other
// unknown field (8 included: metadata's number is not guessed), a
// wrong wire type or a value that does not parse refuses the resource
// with the place named.
func TestXDSNewerFields(t *testing.T) {
	limit := func() *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3}
	}
	desc := func(key string, withLimit bool, extra []byte) *rlsconfv3.RateLimitDescriptor {
		d := &rlsconfv3.RateLimitDescriptor{Key: key}
		if withLimit {
			d.RateLimit = limit()
		}
		return withUnknown(d, extra)
	}
	cfg := func(ds ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: ds}
	}
	for _, c := range []struct {
		name string
		cfg  *rlsconfv3.RateLimitConfig
		// wire: send the resource through its encoding, as the client
		// receives it.
		wire bool
		// want is the descriptor read (descriptors[0], or its first child
		// when nested), or the problem expected.
		want    rls.Descriptor
		nested  bool
		problem string
	}{
		{name: "quota_mode", wire: true, cfg: cfg(desc("backend", true, quotaModeBytes(true))),
			want: rls.Descriptor{Key: "backend", QuotaMode: true}},
		{name: "quota_mode false", wire: true, cfg: cfg(desc("backend", true, quotaModeBytes(false))),
			want: rls.Descriptor{Key: "backend"}},
		{name: "nested", wire: true, nested: true,
			cfg:  cfg(&rlsconfv3.RateLimitDescriptor{Key: "app", Descriptors: []*rlsconfv3.RateLimitDescriptor{desc("route", true, quotaModeBytes(true))}}),
			want: rls.Descriptor{Key: "route", QuotaMode: true}},
		{name: "quota_mode without a limit", wire: true, cfg: cfg(desc("backend", false, quotaModeBytes(true))),
			problem: `RateLimitConfig "edge": descriptors[0].quota_mode: quota_mode is set but the descriptor has no rate_limit that counts`},
		{name: "quota_mode of the wrong wire type", wire: true,
			cfg:     cfg(desc("backend", true, protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), []byte{1}))),
			problem: `RateLimitConfig "edge": descriptors[0].quota_mode: field 7 (quota_mode, a bool) has wire type 2`},
		{name: "malformed", cfg: cfg(desc("backend", true, []byte{0x42, 0x09, 0x01})),
			problem: `RateLimitConfig "edge": descriptors[0]: malformed field 8`},
		{name: "a field 8", wire: true,
			cfg:     cfg(desc("backend", true, protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), []byte{0x0a, 0x00}))),
			problem: `RateLimitConfig "edge": descriptors[0]: field 8 of RateLimitDescriptor is not one Sluice knows`},
		{name: "unknown descriptor field", wire: true,
			cfg:     cfg(desc("backend", true, append(quotaModeBytes(true), protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1)...))),
			problem: `RateLimitConfig "edge": descriptors[0]: field 9 of RateLimitDescriptor is not one Sluice knows`},
		{name: "unknown config field", wire: true,
			cfg:     withUnknown(cfg(desc("backend", true, nil)), protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), "x")),
			problem: `RateLimitConfig "edge": field 4 of RateLimitConfig is not one Sluice knows`},
		{name: "unknown policy field", wire: true,
			cfg: cfg(&rlsconfv3.RateLimitDescriptor{Key: "backend",
				RateLimit: withUnknown(limit(), protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 1))}),
			problem: `RateLimitConfig "edge": descriptors[0].rate_limit: field 6 of RateLimitPolicy is not one Sluice knows`},
		{name: "unknown replace field", wire: true,
			cfg: cfg(&rlsconfv3.RateLimitDescriptor{Key: "backend", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3,
				Replaces: []*rlsconfv3.RateLimitReplace{withUnknown(&rlsconfv3.RateLimitReplace{Name: "x"}, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1))}}}),
			problem: `RateLimitConfig "edge": descriptors[0].rate_limit.replaces[0]: field 2 of RateLimitReplace is not one Sluice knows`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.cfg
			if c.wire {
				b, err := proto.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				r = &rlsconfv3.RateLimitConfig{}
				if err := proto.Unmarshal(b, r); err != nil {
					t.Fatal(err)
				}
			}
			got, err := xdsDomains([]*rlsconfv3.RateLimitConfig{r})
			if c.problem != "" {
				if err == nil || !strings.Contains(problemsText(err), c.problem) {
					t.Errorf("xdsDomains = %v, want the problem %q", err, c.problem)
				}
				return
			}
			if err != nil {
				t.Fatalf("xdsDomains = %v", err)
			}
			d := got[0].domains[0].Descriptors[0]
			if c.nested {
				d = d.Descriptors[0]
			}
			d.RateLimit = nil
			if !reflect.DeepEqual(d, c.want) {
				t.Errorf("descriptor = %+v, want %+v", d, c.want)
			}
		})
	}
}

// FuzzXDSDescriptorFields: any bytes as a descriptor's unknown fields
// are read or refused, never a panic; what is accepted holds only
// field 7.
func FuzzXDSDescriptorFields(f *testing.F) {
	f.Add(quotaModeBytes(true))
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), []byte{0x0a, 0x00}))
	f.Add([]byte{0x42, 0x09, 0x01})
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d rls.Descriptor
		refused := false
		descriptorFields(raw, &d, "descriptors[0]", func(string, string, ...any) { refused = true })
		if refused {
			return
		}
		for b := raw; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || num != 7 {
				t.Fatalf("accepted %x, which holds field %d (or is malformed)", raw, num)
			}
			b = b[n:]
			b = b[protowire.ConsumeFieldValue(num, typ, b):]
		}
	})
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
