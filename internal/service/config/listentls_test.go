package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
)

// tlsDir writes a CA, a server certificate and key and a tokens file into
// a temporary directory, as tls/ca.pem, tls/server.pem,
// tls/server-key.pem and tokens.txt, and returns the directory.
func tlsDir(t *testing.T, server *testkit.Issued, ca *testkit.CA) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "server.pem", server.CertPEM)
	testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "server-key.pem", server.KeyPEM)
	testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "ca.pem", ca.PEM)
	testkit.WriteCertFile(t, dir, "tokens.txt", []byte("# edge\nedge-0123456789abcdef\nweb-0123456789abcdef\n"))
	return dir
}

const tlsYAML = `listen:
  http: 0.0.0.0:8443
  grpc: 0.0.0.0:8444
  tls:
    cert_file: tls/server.pem
    key_file: tls/server-key.pem
    client_ca_file: tls/ca.pem
    client_names: ["spiffe://cluster.local/ns/edge/sa/envoy", "edge.internal"]
  tokens_file: tokens.txt
limits:
  demo: {algorithm: token_bucket, limit: 10, period: 1m}
`

func TestListenTLS(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	server := ca.Issue(t, testkit.Leaf{NotAfter: time.Now().Add(30 * 24 * time.Hour)})
	notAfter := server.Cert.NotAfter
	dir := tlsDir(t, server, ca)
	file := filepath.Join(dir, "sluice.yaml")
	c, err := Parse(file, []byte(tlsYAML), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listen()
	if l.TLS == nil {
		t.Fatal("Listen().TLS is nil")
	}
	want := ListenTLS{CertFile: filepath.Join(dir, "tls/server.pem"), KeyFile: filepath.Join(dir, "tls/server-key.pem"), ClientCAFile: filepath.Join(dir, "tls/ca.pem")}
	if l.TLS.CertFile != want.CertFile || l.TLS.KeyFile != want.KeyFile || l.TLS.ClientCAFile != want.ClientCAFile {
		t.Errorf("files %+v, want %+v", l.TLS.Files(), want.Files())
	}
	if !slices.Equal(l.TLS.ClientNames, []string{"spiffe://cluster.local/ns/edge/sa/envoy", "edge.internal"}) || l.TLS.Names().Len() != 2 {
		t.Errorf("client names %q", l.TLS.ClientNames)
	}
	l.TLS.ClientNames[0] = "changed"
	if c.Listen().TLS.ClientNames[0] == "changed" {
		t.Error("Listen() shares its client names with the Config")
	}
	if l.TokensFile != filepath.Join(dir, "tokens.txt") || c.Tokens().Len() != 2 || !c.Tokens().Match("Bearer web-0123456789abcdef") {
		t.Errorf("tokens file %q, %d tokens", l.TokensFile, c.Tokens().Len())
	}
	if w := c.Warnings(notAfter.Add(-15 * 24 * time.Hour)); len(w) != 0 {
		t.Errorf("Warnings 15 days before expiry: %v", w)
	}
	if w := c.Warnings(notAfter.Add(-13 * 24 * time.Hour)); len(w) != 1 || !strings.Contains(w[0].Message, "expires in 13 days") {
		t.Errorf("Warnings 13 days before expiry: %v", w)
	}
	w := c.Warnings(notAfter.Add(-3*time.Hour - time.Minute))
	if len(w) != 1 || !strings.HasPrefix(w[0].String(), file+":5: listen.tls.cert_file: the certificate in ") || !strings.Contains(w[0].Message, "expires in 3 hours") {
		t.Errorf("Warnings a few hours before expiry: %v", w)
	}
	plain, err := Parse("plain.yaml", []byte("limits:\n  demo: {algorithm: token_bucket, limit: 10, period: 1m}\n"), testFormats)
	if err != nil {
		t.Fatal(err)
	}
	if got := RestartRequired(plain, c); !slices.Contains(got, "listen.tls (turning TLS on or off)") {
		t.Errorf("RestartRequired(plain, tls) = %v", got)
	}
	if plain.Tokens() != nil || plain.Listen().TLS != nil {
		t.Error("a file without listen.tls has TLS or tokens")
	}
}

func TestListenTLSProblems(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	good := ca.Issue(t, testkit.Leaf{})
	other := ca.Issue(t, testkit.Leaf{})
	expired := ca.Issue(t, testkit.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	tests := []struct {
		name  string
		setup func(dir string)
		yaml  string
		want  string
	}{
		{"missing cert file", func(dir string) { os.Remove(filepath.Join(dir, "tls/server.pem")) }, tlsYAML,
			":5: listen.tls.cert_file: cannot read DIR/tls/server.pem: no such file"},
		{"key of another certificate", func(dir string) { testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "server-key.pem", other.KeyPEM) }, tlsYAML,
			":6: listen.tls.key_file: DIR/tls/server.pem and DIR/tls/server-key.pem: the private key does not belong to the certificate"},
		{"expired", func(dir string) {
			testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "server.pem", expired.CertPEM)
			testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "server-key.pem", expired.KeyPEM)
		}, tlsYAML, ":5: listen.tls.cert_file: DIR/tls/server.pem: the certificate expired at"},
		{"CA not PEM", func(dir string) { testkit.WriteCertFile(t, filepath.Join(dir, "tls"), "ca.pem", []byte("nothing")) }, tlsYAML,
			":7: listen.tls.client_ca_file: DIR/tls/ca.pem holds no PEM certificate"},
		{"names without CA", nil, "listen:\n  tls:\n    cert_file: tls/server.pem\n    key_file: tls/server-key.pem\n    client_names: [edge.internal]\n",
			":5: listen.tls.client_names: needs listen.tls.client_ca_file"},
		{"bad name", nil, strings.Replace(tlsYAML, `"edge.internal"`, `"*.internal"`, 1),
			":8: listen.tls.client_names[1]: \"*.internal\": wildcards are not accepted"},
		{"no key file", nil, "listen:\n  tls:\n    cert_file: tls/server.pem\n",
			":2: listen.tls.key_file: missing"},
		{"unknown key", nil, "listen:\n  tls:\n    cert_file: tls/server.pem\n    key_file: tls/server-key.pem\n    min_version: '1.0'\n",
			":5: listen.tls.min_version: "},
		{"tokens file missing", func(dir string) { os.Remove(filepath.Join(dir, "tokens.txt")) }, tlsYAML,
			":9: listen.tokens_file: cannot read DIR/tokens.txt: no such file"},
		{"short token", func(dir string) {
			testkit.WriteCertFile(t, dir, "tokens.txt", []byte("edge-0123456789abcdef\nshort\n"))
		}, tlsYAML, ":9: listen.tokens_file: DIR/tokens.txt: line 2: the token is too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tlsDir(t, good, ca)
			if tt.setup != nil {
				tt.setup(dir)
			}
			file := filepath.Join(dir, "sluice.yaml")
			_, err := Parse(file, []byte(tt.yaml), testFormats)
			want := file + strings.ReplaceAll(tt.want, "DIR", dir)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Parse: %v\nwant a problem starting %q", err, want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "0123456789abcdef") {
				t.Errorf("the problem quotes a secret: %v", err)
			}
		})
	}
}
