package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testkit"
)

// envoySPIFFE is the name the tests' allowed client carries.
const envoySPIFFE = "spiffe://cluster.local/ns/edge/sa/envoy"

// tlsService is a sluice serve with mutual TLS on listen.http, listen.grpc
// and listen.admin, its CA and its files.
type tlsService struct {
	*instance
	ca     *testkit.CA
	dir    string // holds tls/server.pem, tls/server-key.pem, tls/ca.pem
	config string
	serial string // of the certificate written first
}

// tlsServiceYAML is the configuration of startTLS; paths are relative to
// the file.
const tlsServiceYAML = `listen:
  http: 127.0.0.1:0
  grpc: 127.0.0.1:0
  admin: 127.0.0.1:0
  tls:
    cert_file: tls/server.pem
    key_file: tls/server-key.pem
    client_ca_file: tls/ca.pem
    client_names: ["` + envoySPIFFE + `", "ops@example.com"]
limits:
  a: {algorithm: gcra, limit: 1000, period: 1s}
envoy:
  - domain: edge
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 1000}
`

// startTLS starts a service with mutual TLS on every listener.
func startTLS(t *testing.T, args ...string) *tlsService {
	t.Helper()
	return startTLSWith(t, tlsServiceYAML, args...)
}

// startTLSWith starts a service with the configuration yaml, written
// beside tls/ (and tokens.txt, which holds decisionTokens).
func startTLSWith(t *testing.T, yaml string, args ...string) *tlsService {
	t.Helper()
	s := &tlsService{ca: testkit.NewCA(t, "sluice test CA"), dir: t.TempDir()}
	testkit.WriteCertFile(t, s.dir, "tokens.txt", []byte(decisionTokens))
	if err := os.Mkdir(filepath.Join(s.dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	s.serial = s.writeServer(t, s.ca.Issue(t, testkit.Leaf{CommonName: "sluice"}))
	testkit.WriteCertFile(t, filepath.Join(s.dir, "tls"), "ca.pem", s.ca.PEM)
	s.config = writeConfig(t, filepath.Join(s.dir, "sluice.yaml"), yaml)
	s.instance = startServe(t, append([]string{"--config", s.config}, args...)...)
	return s
}

// writeServer writes a server certificate and key, key first, each by a
// rename, and returns the certificate's serial.
func (s *tlsService) writeServer(t *testing.T, is *testkit.Issued) string {
	t.Helper()
	testkit.WriteCertFile(t, filepath.Join(s.dir, "tls"), "server-key.pem", is.KeyPEM)
	testkit.WriteCertFile(t, filepath.Join(s.dir, "tls"), "server.pem", is.CertPEM)
	return is.Cert.SerialNumber.Text(16)
}

// client returns an HTTP client that trusts the service's CA and presents
// cert (none when nil); keepAlive false makes each request a new
// connection.
func (s *tlsService) client(t *testing.T, cert *testkit.Issued, keepAlive bool) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: testkit.ClientConfig(t, s.ca, cert), ForceAttemptHTTP2: true, DisableKeepAlives: !keepAlive}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// decide sends POST /v1/check to addr and returns the status, the
// protocol and the serial of the server's certificate.
func decide(c *http.Client, addr string) (int, string, string, error) {
	resp, err := c.Post("https://"+addr+"/v1/check", "application/json", strings.NewReader(`{"limit":"a","key":"k"}`))
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	serial := ""
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		serial = resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	return resp.StatusCode, resp.Proto, serial, nil
}

// rls asks the gRPC listener for one decision with the given client
// certificate.
func (s *tlsService) rls(t *testing.T, cert *testkit.Issued) (*rlspb.RateLimitResponse, error) {
	t.Helper()
	return s.rlsWithToken(t, cert, "")
}

// rlsWithToken is rls with a token of listen.tokens_file ("" for none).
func (s *tlsService) rlsWithToken(t *testing.T, cert *testkit.Issued, token string) (*rlspb.RateLimitResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(testkit.ClientConfig(t, s.ca, cert))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("api_key", "k")},
	})
}

// TestServeMutualTLS checks every listener with clients without a
// certificate, with one of another CA, with a name not on the list, and
// with the right one.
func TestServeMutualTLS(t *testing.T) {
	t.Parallel()
	s := startTLS(t)
	other := testkit.NewCA(t, "another CA")
	right := s.ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{envoySPIFFE}})
	byEmail := s.ca.Issue(t, testkit.Leaf{Client: true, Emails: []string{"ops@example.com"}})
	wrong := s.ca.Issue(t, testkit.Leaf{Client: true, CommonName: "web", URIs: []string{"spiffe://cluster.local/ns/web/sa/app"}, DNS: []string{"web.internal"}})
	foreign := other.Issue(t, testkit.Leaf{Client: true, URIs: []string{envoySPIFFE}})

	for _, addr := range []string{s.http, s.admin} {
		if _, _, _, err := decide(s.client(t, nil, false), addr); err == nil {
			t.Errorf("%s: a client without a certificate was served", addr)
		}
		if _, _, _, err := decide(s.client(t, foreign, false), addr); err == nil {
			t.Errorf("%s: a client with a certificate of another CA was served", addr)
		}
	}
	code, _, _, err := decide(s.client(t, wrong, false), s.http)
	if err != nil || code != http.StatusForbidden {
		t.Errorf("listen.http, a name not on the list: %d %v, want 403", code, err)
	}
	resp, err := s.client(t, wrong, false).Get("https://" + s.admin + "/metrics")
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("listen.admin, a name not on the list: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, c := range []*testkit.Issued{right, byEmail} {
		code, proto, serial, err := decide(s.client(t, c, true), s.http)
		if err != nil || code != http.StatusOK || proto != "HTTP/2.0" || serial != s.serial {
			t.Errorf("listen.http, an allowed client: %d %s serial %s %v; want 200 over HTTP/2 from serial %s", code, proto, serial, err, s.serial)
		}
	}
	resp, err = s.client(t, right, false).Get("https://" + s.admin + "/metrics")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("listen.admin, an allowed client: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	// Plain HTTP on a TLS listener is refused.
	if resp, err := http.Get("http://" + s.http + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS listener = %d, want 400", resp.StatusCode)
		}
	}

	if _, err := s.rls(t, nil); err == nil {
		t.Error("listen.grpc: a client without a certificate was served")
	}
	if _, err := s.rls(t, foreign); err == nil {
		t.Error("listen.grpc: a client with a certificate of another CA was served")
	}
	if _, err := s.rls(t, wrong); status.Code(err) != codes.PermissionDenied {
		t.Errorf("listen.grpc, a name not on the list: %v, want PermissionDenied", err)
	}
	if r, err := s.rls(t, right); err != nil || r.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("listen.grpc, the allowed client: %v %v, want OK", r, err)
	}
	log := s.stderr.String()
	testkit.WantAll(t, "the refusals' log lines", log, "listener=listen.http", "listener=listen.grpc", "listener=listen.admin", "URI:spiffe://cluster.local/ns/web/sa/app", "DNS:web.internal", "CN:web")
	if strings.Contains(log, "PRIVATE KEY") {
		t.Errorf("the log holds key material:\n%s", log)
	}
}

// TestServeTLSRotationUnderLoad replaces the certificate and key three
// times while clients keep deciding over HTTP (one kept-alive connection,
// and a new connection per request) and gRPC: no request fails, and new
// connections see each new certificate. Then a broken replacement is
// refused and the last good certificate keeps serving.
func TestServeTLSRotationUnderLoad(t *testing.T) {
	t.Parallel()
	s := startTLS(t, "--watch", "20ms")
	client := s.ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{envoySPIFFE}})
	kept := s.client(t, client, true)
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(testkit.ClientConfig(t, s.ca, client))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rlsClient := rlspb.NewRateLimitServiceClient(conn)

	var lastSerial atomic.Value // of the newest connection
	lastSerial.Store(s.serial)
	var ok, failed atomic.Int64
	var firstErr sync.Once
	fail := func(format string, args ...any) {
		failed.Add(1)
		firstErr.Do(func() { t.Errorf(format, args...) })
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loop := func(step func() error) {
		wg.Go(func() {
			for i := 0; i < 20000 && ctx.Err() == nil; i++ {
				if err := step(); err != nil {
					fail("%v", err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	loop(func() error {
		code, _, _, err := decide(kept, s.http)
		if err == nil && code != 200 {
			err = fmt.Errorf("kept-alive connection: status %d", code)
		}
		return err
	})
	fresh := s.client(t, client, false)
	loop(func() error {
		code, _, serial, err := decide(fresh, s.http)
		if err == nil && code != 200 {
			err = fmt.Errorf("new connection: status %d", code)
		}
		if err == nil {
			lastSerial.Store(serial)
		}
		return err
	})
	loop(func() error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := rlsClient.ShouldRateLimit(cctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("api_key", "k")}})
		if err != nil && ctx.Err() != nil {
			return nil // the test is ending
		}
		if err == nil && r.GetOverallCode() != rlspb.RateLimitResponse_OK {
			err = fmt.Errorf("grpc: %v", r.GetOverallCode())
		}
		return err
	})

	var notAfter time.Time
	for i := range 3 {
		is := s.ca.Issue(t, testkit.Leaf{CommonName: fmt.Sprintf("sluice %d", i+2), NotAfter: time.Now().Add(time.Duration(48+i) * time.Hour)})
		serial := s.writeServer(t, is)
		notAfter = is.Cert.NotAfter
		testkit.WaitFor(t, waitTimeout, "new connections to see certificate "+serial, func() bool { return lastSerial.Load() == serial })
		after := ok.Load()
		testkit.WaitFor(t, waitTimeout, "more decisions after the rotation", func() bool { return ok.Load() >= after+30 })
	}
	stop()
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed, %d succeeded during the rotations; want 0 failed", failed.Load(), ok.Load())
	}
	t.Logf("%d decisions during three rotations, 0 failed", ok.Load())

	metric := func(series string) string {
		t.Helper()
		resp, err := s.client(t, client, false).Get("https://" + s.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		v, _ := testkit.SeriesValue(string(b), series)
		return v
	}
	if got, err := strconv.ParseFloat(metric("sluice_tls_certificate_expiry_timestamp_seconds"), 64); err != nil || int64(got) != notAfter.Unix() {
		t.Errorf("expiry metric = %v (%v), want %d", got, err, notAfter.Unix())
	}
	if got := metric(`sluice_tls_reloads_total{result="ok"}`); got != "3" {
		t.Errorf(`sluice_tls_reloads_total{result="ok"} = %s, want 3`, got)
	}

	// A key that is not the certificate's: refused, logged, kept out.
	// (A rotation can have been refused already, when a look at the files
	// fell between the writes of the key and of the certificate.)
	good := lastSerial.Load().(string)
	before, _ := strconv.Atoi(metric(`sluice_tls_reloads_total{result="refused"}`))
	logged := strings.Count(s.stderr.String(), "new TLS files refused")
	testkit.WriteCertFile(t, filepath.Join(s.dir, "tls"), "server-key.pem", s.ca.Issue(t, testkit.Leaf{}).KeyPEM)
	testkit.WaitFor(t, waitTimeout, "the broken replacement to be refused", func() bool {
		return strings.Count(s.stderr.String(), "new TLS files refused") > logged
	})
	if _, _, serial, err := decide(s.client(t, client, false), s.http); err != nil || serial != good {
		t.Errorf("after a broken replacement: serial %s %v, want %s still", serial, err, good)
	}
	if got := metric(`sluice_tls_reloads_total{result="refused"}`); got != strconv.Itoa(before+1) {
		t.Errorf(`sluice_tls_reloads_total{result="refused"} = %s, want %d`, got, before+1)
	}
	if !strings.Contains(s.stderr.String(), "does not belong to the certificate") {
		t.Errorf("the refusal does not say why:\n%s", s.stderr)
	}
}

// decisionTokens is the tokens file of startTLSWith.
const decisionTokens = "# one token per client\nedge-0123456789abcdef\n"

// TestCLIOverTLS runs sluice check and sluice overrides against a service
// with mutual TLS, decision tokens and an admin token, with the flags and
// with the environment variables.
func TestCLIOverTLS(t *testing.T) {
	const adminToken = "admin-0123456789abcdef"
	yaml := strings.Replace(tlsServiceYAML, "listen:\n", "listen:\n  tokens_file: tokens.txt\n", 1) + "admin: {token: " + adminToken + "}\n"
	s := startTLSWith(t, yaml)
	dir := t.TempDir()
	client := s.ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{envoySPIFFE}})
	ca := testkit.WriteCertFile(t, dir, "ca.pem", s.ca.PEM)
	cert := testkit.WriteCertFile(t, dir, "client.pem", client.CertPEM)
	key := testkit.WriteCertFile(t, dir, "client-key.pem", client.KeyPEM)
	tokenFile := testkit.WriteCertFile(t, dir, "token", []byte("edge-0123456789abcdef\n"))
	tlsArgs := []string{"--ca", ca, "--cert", cert, "--cert-key", key}

	check := func(args ...string) result {
		return runSluice(t, nil, append([]string{"check", "--limit", "a", "--key", "alice"}, args...)...)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"TLS flags and token", append([]string{"--server", s.http, "--token-file", tokenFile}, tlsArgs...), 0, "allowed: limit \"a\""},
		{"https URL", append([]string{"--server", "https://" + s.http, "--token", "edge-0123456789abcdef"}, tlsArgs...), 0, "allowed"},
		{"no token", append([]string{"--server", s.http}, tlsArgs...), 2, "401 Unauthorized"},
		{"wrong token", append([]string{"--server", s.http, "--token", "edge-0123456789abcdeX"}, tlsArgs...), 2, "401 Unauthorized"},
		{"no client certificate", []string{"--server", s.http, "--ca", ca, "--token-file", tokenFile}, 2, "check: "},
		{"plain http URL with TLS flags", append([]string{"--server", "http://" + s.http}, tlsArgs...), 2, "is plain HTTP"},
		{"cert without key", []string{"--server", s.http, "--cert", cert}, 2, "--cert and --cert-key go together"},
	} {
		r := check(tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and %q", tt.name, r.code, r.stdout, r.stderr, tt.code, tt.want)
		}
	}

	// The same from the environment.
	t.Setenv("SLUICE_CA", ca)
	t.Setenv("SLUICE_CERT", cert)
	t.Setenv("SLUICE_KEY", key)
	t.Setenv("SLUICE_TOKEN", "edge-0123456789abcdef")
	if r := check("--server", s.http); r.code != 0 {
		t.Errorf("check with the environment: exit %d, %s", r.code, r.stderr)
	}
	if r := check("--server", s.admin, "--explain", "--token", adminToken); r.code != 0 || !strings.Contains(r.stdout, `"alice"`) {
		t.Errorf("check --explain on the admin listener: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv("SLUICE_TOKEN", "")
	t.Setenv("SLUICE_ADMIN_TOKEN", adminToken)
	t.Setenv("SLUICE_KEY", "")
	runOK(t, nil, "overrides", "--server", s.admin, "--key", key, "set", "a", "alice", "--limit", "5", "--period", "1m")
	if r := runSluice(t, nil, "overrides", "--server", s.admin, "--key", key, "list"); r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Errorf("overrides list over TLS: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
}

// TestValidateTLSFiles checks that sluice validate checks the files of
// listen.tls: a certificate about to expire is a warning, one whose key
// does not match is a problem naming file, line and path, and serve
// refuses to start with it.
func TestValidateTLSFiles(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	soon := ca.Issue(t, testkit.Leaf{NotAfter: time.Now().Add(5*24*time.Hour + time.Hour)})
	testkit.WriteCertFile(t, tlsDir, "server.pem", soon.CertPEM)
	testkit.WriteCertFile(t, tlsDir, "server-key.pem", soon.KeyPEM)
	testkit.WriteCertFile(t, tlsDir, "ca.pem", ca.PEM)
	testkit.WriteCertFile(t, dir, "tokens.txt", []byte(decisionTokens))
	path := writeConfig(t, filepath.Join(dir, "sluice.yaml"), tlsServiceYAML)
	r := runSluice(t, nil, "validate", path)
	if r.code != 0 || r.stdout != "ok: "+path+"\n" || !strings.Contains(r.stderr, "warning: "+path+":6: listen.tls.cert_file: the certificate in "+filepath.Join(tlsDir, "server.pem")+" expires in 5 days") {
		t.Errorf("validate, a certificate expiring in 5 days: exit %d, stdout %q, stderr %q; want 0, ok and a warning", r.code, r.stdout, r.stderr)
	}
	testkit.WriteCertFile(t, tlsDir, "server-key.pem", ca.Issue(t, testkit.Leaf{}).KeyPEM)
	r = runSluice(t, nil, "validate", path)
	if r.code != 1 || !strings.Contains(r.stderr, path+":7: listen.tls.key_file: ") || !strings.Contains(r.stderr, "the private key does not belong to the certificate") {
		t.Errorf("validate, a key of another certificate: exit %d, stderr %q; want 1 and a problem at line 7", r.code, r.stderr)
	}
	r = runSluice(t, nil, "serve", "--config", path)
	if r.code != 1 || !strings.Contains(r.stderr, "listen.tls.key_file") {
		t.Errorf("serve with a key of another certificate: exit %d, stderr %q; want 1", r.code, r.stderr)
	}
}

// TestTLSEverywhereExample starts sluice serve from examples/tls.yaml, with
// its addresses on loopback and its Redis a private redis-server that
// accepts only TLS and a password, and files made by the test at the paths
// the example names: a client with an allowed certificate and a token gets
// decisions from Redis over HTTPS and gRPC (and none without the token),
// and the admin listener answers with the admin token.
func TestTLSEverywhereExample(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile("../../examples/tls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const password = "redis-0123456789abcdef"
	srv := testkit.StartRedis(t, testkit.RedisOptions{Password: password, TLS: testkit.NewRedisTLSFiles(t, dir, "redis")})
	redisCA, err := os.ReadFile(filepath.Join(dir, "redis.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca := testkit.NewCA(t, "clients and server")
	server := ca.Issue(t, testkit.Leaf{CommonName: "sluice"})
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"tls/server.pem": server.CertPEM, "tls/server-key.pem": server.KeyPEM, "tls/clients-ca.pem": ca.PEM, "tls/redis-ca.pem": redisCA,
		"tokens.txt": []byte(decisionTokens), "admin-token": []byte("admin-0123456789abcdef\n"), "redis-password": []byte(password + "\n"),
	} {
		testkit.WriteCertFile(t, filepath.Dir(filepath.Join(dir, name)), filepath.Base(name), data)
	}
	yaml := string(example)
	for from, to := range map[string]string{"0.0.0.0:8443": "127.0.0.1:0", "0.0.0.0:8444": "127.0.0.1:0", "127.0.0.1:9443": "127.0.0.1:0", "redis.internal:6380": srv.Addr} {
		if !strings.Contains(yaml, from) {
			t.Fatalf("examples/tls.yaml no longer holds %q", from)
		}
		yaml = strings.Replace(yaml, from, to, 1)
	}
	// The first dial of Redis over TLS can take longer than the default
	// store.timeout on a loaded machine.
	yaml = strings.Replace(yaml, "  backend: redis\n", "  backend: redis\n  timeout: 2s\n", 1)
	s := &tlsService{ca: ca, dir: dir}
	s.instance = startServe(t, "--config", writeConfig(t, filepath.Join(dir, "sluice.yaml"), yaml))
	if s.admin == "" || s.grpc == "" {
		t.Fatalf("ready file: admin %q, grpc %q; want both", s.admin, s.grpc)
	}

	client := ca.Issue(t, testkit.Leaf{Client: true, DNS: []string{"edge.internal"}})
	c := s.client(t, client, true)
	post := func(token string) (int, string) {
		req, _ := http.NewRequest("POST", "https://"+s.http+"/v1/check", strings.NewReader(`{"limit":"per-ip","key":"203.0.113.7"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Errorf("/v1/check without a token = %d, want 401", code)
	}
	if code, body := post("edge-0123456789abcdef"); code != http.StatusOK || strings.Contains(body, `"degraded":true`) || !strings.Contains(body, `"remaining":99`) {
		t.Errorf("/v1/check with a token = %d %s, want 200 decided by Redis", code, body)
	}
	if n, err := srv.Do("DBSIZE"); err != nil || fmt.Sprint(n) == "0" {
		t.Errorf("Redis holds %v keys (%v), want the decision's", n, err)
	}
	envoy := ca.Issue(t, testkit.Leaf{Client: true, URIs: []string{envoySPIFFE}})
	if _, err := s.rls(t, envoy); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC from Envoy's identity without a token: %v, want Unauthenticated", err)
	}
	if r, err := s.rlsWithToken(t, envoy, "edge-0123456789abcdef"); err != nil || r.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("gRPC from Envoy's identity with a token: %v %v, want OK", r, err)
	}
	req, _ := http.NewRequest("GET", "https://"+s.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer admin-0123456789abcdef")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("admin /metrics with the admin token: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
}
