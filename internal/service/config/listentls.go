package config

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// ListenTLS is listen.tls: TLS, and optionally mutual TLS, on every
// listener of the service (listen.http, listen.grpc and listen.admin).
type ListenTLS struct {
	// CertFile and KeyFile are the server's certificate chain and private
	// key (PEM), resolved against the configuration file's directory.
	CertFile, KeyFile string
	// ClientCAFile, when not empty, is the CA bundle (PEM) that client
	// certificates must chain to: clients without one are refused during
	// the handshake.
	ClientCAFile string
	// ClientNames, when not empty, are the names (DNS, URI such as SPIFFE
	// IDs, or email subject alternative names) of which a verified client
	// certificate must carry one; it needs ClientCAFile.
	ClientNames []string

	names    *tlsauth.Names
	notAfter time.Time // of the certificate when the file was loaded
	certAt   *yaml.Node
}

// Files returns the files as package tlsauth takes them.
func (t *ListenTLS) Files() tlsauth.Files {
	return tlsauth.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}
}

// Names returns ClientNames parsed; nil when there are none.
func (t *ListenTLS) Names() *tlsauth.Names { return t.names }

// Tokens returns the bearer tokens of listen.tokens_file, which the
// decision API requires on listen.http; nil when the file is not set.
func (c *Config) Tokens() *tlsauth.Tokens { return c.listen.Tokens }

// listenSecurity decodes listen.tls and listen.tokens_file into l.
func (d *decoder) listenSecurity(o object, l *Listen) {
	if v := o.get("tls"); v != nil {
		l.TLS = d.listenTLS(o.fields["tls"].key, v)
	}
	if v := o.get("tokens_file"); v != nil {
		file, ok := d.nonEmpty(v, "listen.tokens_file")
		if !ok {
			return
		}
		file = d.relative(file)
		b, msg := readSecretFile(file)
		if msg != "" {
			d.add(deref(v), "listen.tokens_file", "%s", msg)
			return
		}
		t, err := tlsauth.ParseTokens(b)
		if err != nil {
			d.add(deref(v), "listen.tokens_file", "%s: %v", file, err)
			return
		}
		l.TokensFile, l.Tokens = file, t
	}
}

// listenTLS decodes listen.tls and checks its files now, so that sluice
// validate and a reload report a missing, unreadable, mismatched or
// expired file as a problem of the configuration.
func (d *decoder) listenTLS(at, v *yaml.Node) *ListenTLS {
	const path = "listen.tls"
	o, ok := d.mapping(at, v, path, "cert_file", "key_file", "client_ca_file", "client_names")
	if !ok {
		return nil
	}
	t := &ListenTLS{}
	bad := false
	file := func(key string, required bool) string {
		if required && o.get(key) == nil {
			d.add(o.at, path+"."+key, "missing: listen.tls needs cert_file and key_file (PEM files, relative to this file)")
			bad = true
			return ""
		}
		f, ok := d.filePath(o, path, key)
		bad = bad || !ok
		return f
	}
	t.CertFile, t.KeyFile, t.ClientCAFile = file("cert_file", true), file("key_file", true), file("client_ca_file", false)
	if v := o.get("client_names"); v != nil {
		names, ok := d.strs(v, path+".client_names", `["spiffe://cluster.local/ns/edge/sa/envoy", "edge.internal"]`, func(s string) string {
			if _, _, err := tlsauth.ParseName(s); err != nil {
				return err.Error()
			}
			return ""
		})
		switch {
		case !ok:
			bad = true
		case t.ClientCAFile == "" && len(names) > 0:
			d.add(o.fields["client_names"].key, path+".client_names", "needs listen.tls.client_ca_file: names are checked on client certificates, which are asked for only with a client CA")
			bad = true
		default:
			t.ClientNames = names
			t.names, _ = tlsauth.ParseNames(names)
		}
	}
	if bad {
		return nil
	}
	m, err := tlsauth.Load(t.Files(), time.Now())
	if err != nil {
		key := "cert_file"
		var fe *tlsauth.FileError
		if errors.As(err, &fe) {
			switch fe.File {
			case t.KeyFile:
				key = "key_file"
			case t.ClientCAFile:
				key = "client_ca_file"
			}
		}
		d.add(deref(o.get(key)), path+"."+key, "%v", err)
		return nil
	}
	t.notAfter, t.certAt = m.NotAfter(), deref(o.get("cert_file"))
	return t
}

// Warnings returns what is valid in the configuration but deserves a look:
// a serving certificate (listen.tls.cert_file) that expires within
// tlsauth.ExpiryWarning of now, and a configuration that limits nothing
// (LimitsNothing).
func (c *Config) Warnings(now time.Time) []Problem {
	var out []Problem
	if p, ok := c.LimitsNothing(); ok {
		out = append(out, p)
	}
	t := c.listen.TLS
	if t == nil || t.certAt == nil {
		return out
	}
	left := t.notAfter.Sub(now)
	if left >= tlsauth.ExpiryWarning {
		return out
	}
	return append(out, Problem{
		File: c.source, Line: t.certAt.Line, Column: t.certAt.Column, Path: "listen.tls.cert_file",
		Message: fmt.Sprintf("the certificate in %s expires in %s (at %s); renew it", t.CertFile, roundDays(left), t.notAfter.UTC().Format(time.RFC3339)),
	})
}

// LimitsNothing returns a warning, and true, when the configuration
// defines no limit and no envoy section: valid, but every request that
// reaches the service passes (the decision API knows no limit name).
func (c *Config) LimitsNothing() (Problem, bool) {
	if len(c.names) > 0 || c.envoy != nil {
		return Problem{}, false
	}
	return Problem{File: c.source, Line: 1, Path: "limits",
		Message: "no limits are defined (and no envoy section): this configuration limits nothing; define some under limits"}, true
}

// roundDays describes a duration in days, or hours below two days.
func roundDays(d time.Duration) string {
	if d < 48*time.Hour {
		return fmt.Sprintf("%d hours", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// cloneListen returns a copy of l that shares nothing mutable with it.
func cloneListen(l Listen) Listen {
	if l.TLS != nil {
		t := *l.TLS
		t.ClientNames = slices.Clone(t.ClientNames)
		l.TLS = &t
	}
	return l
}
