package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestTLSCertificateSteps runs the openssl commands of docs/operations.md
// ("Making the certificates") in an empty directory, starts sluice serve
// from examples/tls.yaml with what they made (its store switched to
// memory and its addresses to loopback), and checks that each client
// certificate they made is let in where the example says: the gateway's
// on the decision API with a token, Envoy's on the rate limit service,
// the operators' on the admin listener with the admin token.
func TestTLSCertificateSteps(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl not found on PATH: install it with `apt-get install openssl` (scripts/deps.sh does)")
	}
	md, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var steps string
	for _, b := range testkit.Blocks(string(md)) {
		if b.Marker == "<!-- tls-certificates -->" {
			steps = b.Text
		}
	}
	if steps == "" {
		t.Fatal("docs/operations.md has no block marked <!-- tls-certificates -->")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the steps failed: %v\n%s", err, out)
	}

	example, err := os.ReadFile("../../examples/tls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml, _, ok := strings.Cut(string(example), "store:\n")
	if !ok {
		t.Fatal("examples/tls.yaml has no store section")
	}
	_, rest, _ := strings.Cut(string(example), "limits:\n")
	yaml += "limits:\n" + rest
	for from, to := range map[string]string{"0.0.0.0:8443": "127.0.0.1:0", "0.0.0.0:8444": "127.0.0.1:0", "127.0.0.1:9443": "127.0.0.1:0"} {
		if !strings.Contains(yaml, from) {
			t.Fatalf("examples/tls.yaml no longer holds %q", from)
		}
		yaml = strings.Replace(yaml, from, to, 1)
	}
	in := startServe(t, "--config", writeConfig(t, filepath.Join(dir, "sluice.yaml"), yaml))

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(read("tls/clients-ca.pem"))) {
		t.Fatal("tls/clients-ca.pem holds no certificate")
	}
	config := func(name string) *tls.Config {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls", name+".pem"), filepath.Join(dir, "tls", name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "localhost"}
	}
	get := func(name, method, url, body, token string) int {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: config(name)}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s %s with the %s certificate: %v", method, url, name, err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	token := strings.Fields(read("tokens.txt"))[0]
	check := `{"limit":"per-ip","key":"203.0.113.7"}`
	if code := get("gateway", "POST", "https://"+in.http+"/v1/check", check, token); code != 200 {
		t.Errorf("/v1/check with the gateway's certificate and a token = %d, want 200", code)
	}
	if code := get("gateway", "GET", "https://"+in.admin+"/metrics", "", token); code != 401 {
		t.Errorf("admin /metrics with a decision token = %d, want 401", code)
	}
	if code := get("ops", "GET", "https://"+in.admin+"/metrics", "", read("admin-token")); code != 200 {
		t.Errorf("admin /metrics with the operators' certificate and the admin token = %d, want 200", code)
	}

	conn, err := grpc.NewClient(in.grpc, grpc.WithTransportCredentials(credentials.NewTLS(config("envoy"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.Fields(read("tokens.txt"))[1])
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}}},
	})
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("gRPC with Envoy's certificate and a token: %v %v, want OK", resp, err)
	}
}
