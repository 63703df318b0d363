package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// NewRedisTLSFiles writes a self-signed certificate for 127.0.0.1 and
// localhost (SelfSigned) and its key as PEM files named name.crt
// and name.key in dir. The certificate is its own CA: ClientTLS trusts it.
func NewRedisTLSFiles(t testing.TB, dir, name string) *RedisTLSFiles {
	t.Helper()
	c := SelfSigned(t, name)
	f := &RedisTLSFiles{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(f.CertFile, c.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.KeyFile, c.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.Cert)
	f.ClientTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return f
}
