package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// The environment variables the client commands (check, overrides) read
// when the matching flag is not given.
const (
	caEnv    = "SLUICE_CA"
	certEnv  = "SLUICE_CERT"
	keyEnv   = "SLUICE_KEY"
	tokenEnv = "SLUICE_TOKEN"
)

// clientUsage documents the flags of clientFlags, for the usage texts.
const clientUsage = `  --ca FILE        the CA bundle (PEM) that the service's certificate must
                   chain to, for an https:// service with its own CA
                   (default: the system's roots; env SLUICE_CA)
  --cert FILE, --cert-key FILE
                   a client certificate and its key (PEM), for a service
                   with listen.tls.client_ca_file (env SLUICE_CERT,
                   SLUICE_KEY); sluice overrides also takes the key as
                   --key (in sluice check, --key is the key to decide for)
  --token TOKEN    the bearer token to send (env SLUICE_TOKEN, which keeps
                   it out of the process list; --token-file reads it from a
                   file)
  --token-file FILE
                   a file holding the token to send
`

// clientFlags are the transport flags of the commands that call a running
// service: TLS (--ca, --cert, --key) and the bearer token (--token,
// --token-file).
type clientFlags struct {
	ca, cert, key    string
	token, tokenFile string
}

// register adds the flags to fs. The client certificate's key is
// --cert-key, and also --key when keyFlag is set: sluice check has a
// --key of its own (the key to decide for).
func (c *clientFlags) register(fs *flag.FlagSet, keyFlag bool) {
	fs.StringVar(&c.ca, "ca", "", "CA bundle the service's certificate must chain to")
	fs.StringVar(&c.cert, "cert", "", "client certificate (PEM)")
	fs.StringVar(&c.key, "cert-key", "", "client certificate's key (PEM)")
	if keyFlag {
		fs.StringVar(&c.key, "key", "", "client certificate's key (PEM); the same as --cert-key")
	}
	fs.StringVar(&c.token, "token", "", "bearer token to send")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token to send")
}

// fromEnv fills the flags not given from the environment.
func (c *clientFlags) fromEnv() {
	for _, v := range []struct {
		dst *string
		env string
	}{{&c.ca, caEnv}, {&c.cert, certEnv}, {&c.key, keyEnv}} {
		if *v.dst == "" {
			*v.dst = os.Getenv(v.env)
		}
	}
}

// usesTLS reports whether a TLS flag is set.
func (c *clientFlags) usesTLS() bool { return c.ca != "" || c.cert != "" || c.key != "" }

// serverURL parses --server as serverURL does, with https:// assumed
// instead of http:// when a TLS flag is set.
func (c *clientFlags) serverURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") && c.usesTLS() {
		s = "https://" + s
	}
	u, err := serverURL(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && c.usesTLS() {
		return nil, fmt.Errorf("%s is plain HTTP, but --ca, --cert or --cert-key is set: name the service as https://HOST:PORT", u)
	}
	return u, nil
}

// bearer returns the token to send: --token, else the content of
// --token-file, else $SLUICE_TOKEN, else the variables in fallback (such
// as SLUICE_ADMIN_TOKEN); "" for none.
func (c *clientFlags) bearer(fallback ...string) (string, error) {
	switch {
	case c.token != "":
		return c.token, nil
	case c.tokenFile != "":
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	for _, env := range append([]string{tokenEnv}, fallback...) {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			return v, nil
		}
	}
	return "", nil
}

// httpClient returns the client to call the service with: the default
// one, or one with the TLS settings of the flags.
func (c *clientFlags) httpClient() (*http.Client, error) {
	if !c.usesTLS() {
		return http.DefaultClient, nil
	}
	cfg := &tls.Config{MinVersion: tlsauth.MinVersion}
	if c.ca != "" {
		b, err := os.ReadFile(c.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--ca: %s holds no PEM certificate", c.ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case c.cert != "" && c.key != "":
		cert, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("--cert and --cert-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case c.cert != "" || c.key != "":
		return nil, errors.New("--cert and --cert-key go together: name both files (or set SLUICE_CERT and SLUICE_KEY)")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}
