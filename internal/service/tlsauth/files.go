// Package tlsauth is the transport security of sluice serve's listeners:
// server certificates loaded from files and rotated live, client
// certificates checked against a CA and a list of allowed names (mutual
// TLS), and bearer tokens for the decision API.
//
// The package is used by cmd/sluice (which wires the listeners), by
// internal/service/config (which checks the files and lists when a configuration
// is loaded) and by internal/service/server (tokens). It holds no global state.
package tlsauth

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// MaxFileSize is the largest certificate, key or CA file read: a PEM
// chain or bundle is a few KiB; a file much larger is not one.
const MaxFileSize = 1 << 20

// ExpiryWarning is how long before its expiry a serving certificate is
// reported as about to expire (by sluice validate and in the log).
const ExpiryWarning = 14 * 24 * time.Hour

// Files names the files of a TLS setup: the server's certificate chain
// and key (PEM), and optionally the CA bundle that client certificates
// must chain to. An empty ClientCAFile means no client certificate is
// asked for.
type Files struct {
	CertFile, KeyFile, ClientCAFile string
}

// Material is one loaded and checked set of files. It is immutable.
type Material struct {
	// Files are the files it was read from.
	Files Files
	// Cert is the server's certificate chain and key; Cert.Leaf is set.
	Cert tls.Certificate
	// ClientCAs holds the client CA bundle; nil without ClientCAFile.
	ClientCAs *x509.CertPool
	// Sum identifies the content of the files, to tell a change.
	Sum [32]byte
}

// NotAfter returns the end of the serving certificate's validity.
func (m *Material) NotAfter() time.Time { return m.Cert.Leaf.NotAfter }

// Serial returns the serving certificate's serial number in hexadecimal.
func (m *Material) Serial() string { return m.Cert.Leaf.SerialNumber.Text(16) }

// contents are the bytes of a Files, as read at one moment.
type contents struct {
	cert, key, ca []byte
}

// sum returns what identifies the contents.
func (c *contents) sum() [32]byte {
	h := sha256.New()
	for _, b := range [][]byte{c.cert, c.key, c.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// read reads the files of f.
func read(f Files) (*contents, error) {
	var c contents
	var err error
	if c.cert, err = readFile(f.CertFile); err != nil {
		return nil, err
	}
	if c.key, err = readFile(f.KeyFile); err != nil {
		return nil, err
	}
	if f.ClientCAFile != "" {
		if c.ca, err = readFile(f.ClientCAFile); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// FileError is a problem with one of the files of a Files: File is its
// path. Its message names the file.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// fileErrorf returns a *FileError about the file at path.
func fileErrorf(path, format string, args ...any) error {
	return &FileError{File: path, Err: fmt.Errorf(format, args...)}
}

// readFile reads one file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fileErrorf(path, "cannot read %s: no such file", path)
		}
		return nil, fileErrorf(path, "cannot read %s: %w", path, err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fileErrorf(path, "cannot read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fileErrorf(path, "%s is larger than 1 MiB; it should hold PEM blocks", path)
	}
	return b, nil
}

// Load reads the files of f and checks them at now: the certificate and
// key parse and belong together, the certificate has not expired, and the
// CA file, when named, holds at least one certificate. Its errors name
// the file at fault and never quote a key.
func Load(f Files, now time.Time) (*Material, error) {
	c, err := read(f)
	if err != nil {
		return nil, err
	}
	return build(f, c, now)
}

// build checks the contents read from f and makes them a Material.
func build(f Files, c *contents, now time.Time) (*Material, error) {
	if !bytes.Contains(c.cert, []byte("-----BEGIN")) {
		return nil, fileErrorf(f.CertFile, "%s holds no PEM block; it should hold the server's certificate chain", f.CertFile)
	}
	if !bytes.Contains(c.key, []byte("-----BEGIN")) {
		return nil, fileErrorf(f.KeyFile, "%s holds no PEM block; it should hold the server's private key", f.KeyFile)
	}
	cert, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fileErrorf(f.KeyFile, "%s and %s: %w", f.CertFile, f.KeyFile, keyPairError(err))
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fileErrorf(f.CertFile, "%s: %w", f.CertFile, err)
		}
		cert.Leaf = leaf
	}
	if now.After(leaf.NotAfter) {
		return nil, fileErrorf(f.CertFile, "%s: the certificate expired at %s", f.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	m := &Material{Files: f, Cert: cert, Sum: c.sum()}
	if f.ClientCAFile != "" {
		pool, n, err := parseCAs(c.ca)
		if err != nil {
			return nil, fileErrorf(f.ClientCAFile, "%s: %w", f.ClientCAFile, err)
		}
		if n == 0 {
			return nil, fileErrorf(f.ClientCAFile, "%s holds no PEM certificate; it should hold the CA that signs client certificates", f.ClientCAFile)
		}
		m.ClientCAs = pool
	}
	return m, nil
}

// keyPairError rewords the errors of tls.X509KeyPair that operators meet
// most, keeping the original wrapped.
func keyPairError(err error) error {
	msg := err.Error()
	switch {
	case bytes.Contains([]byte(msg), []byte("does not match")):
		return fmt.Errorf("the private key does not belong to the certificate (%w)", err)
	case bytes.Contains([]byte(msg), []byte("failed to find any PEM data in certificate")):
		return fmt.Errorf("the certificate file holds no CERTIFICATE block (%w)", err)
	case bytes.Contains([]byte(msg), []byte("failed to find")):
		return fmt.Errorf("the key file holds no PRIVATE KEY block (%w)", err)
	}
	return err
}

// parseCAs parses every CERTIFICATE block of a PEM bundle; a block that
// does not parse is an error, so that a damaged bundle is not half used.
func parseCAs(b []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n := 0
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("certificate %d does not parse: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	return pool, n, nil
}
