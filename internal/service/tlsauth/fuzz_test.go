package tlsauth_test

import (
	"crypto/x509"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/service/tlsauth"
)

// FuzzParseTokens checks that ParseTokens never panics, that every token
// it accepts matches as a bearer token and is never quoted in an error.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("aaaaaaaaaaaaaaaa1\n# comment\n\nbbbbbbbbbbbbbbbb2\r\n"))
	f.Add([]byte("short\n"))
	f.Add([]byte("aaaaaaaaaaaaaaaa1\naaaaaaaaaaaaaaaa1"))
	f.Add([]byte("\xff\xfe token with bytes \x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := tlsauth.ParseTokens(data)
		var lines []string
		for line := range strings.SplitSeq(string(data), "\n") {
			if s := strings.TrimSpace(line); s != "" && s[0] != '#' {
				lines = append(lines, s)
			}
		}
		if err != nil {
			for _, s := range lines {
				if len(s) >= tlsauth.MinTokenLen && tlsauth.CheckToken(s) == "" && strings.Contains(err.Error(), s) {
					t.Fatalf("the error quotes a token: %v", err)
				}
			}
			return
		}
		if tok.Len() != len(lines) {
			t.Fatalf("Len = %d, want %d for %q", tok.Len(), len(lines), data)
		}
		for _, s := range lines {
			if !tok.Match("Bearer " + s) {
				t.Fatalf("token %q does not match", s)
			}
			// s with a byte more matches only when that is a token too.
			if tok.Match("Bearer "+s+"x") && !slices.Contains(lines, s+"x") {
				t.Fatalf("token %q with a byte more matches", s)
			}
		}
	})
}

// FuzzParseName checks that ParseName never panics and that a certificate
// carrying an accepted name, as a SAN of its kind, is allowed by it.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"edge.internal", "spiffe://cluster.local/ns/edge/sa/envoy", "ops@example.org", "*.x", "a b", "https://h/p?q", "EDGE.Internal.", "spiffe://x/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, kind, err := tlsauth.ParseName(s)
		if err != nil {
			return
		}
		n, err := tlsauth.ParseNames([]string{s})
		if err != nil {
			t.Fatalf("ParseName accepted %q but ParseNames did not: %v", s, err)
		}
		var cert x509.Certificate
		switch kind {
		case tlsauth.DNSName:
			cert.DNSNames = []string{s}
		case tlsauth.Email:
			cert.EmailAddresses = []string{s}
		case tlsauth.URIName:
			u, err := url.Parse(c)
			if err != nil {
				t.Fatalf("canonical URI %q does not parse: %v", c, err)
			}
			cert.URIs = []*url.URL{u}
		default:
			t.Fatalf("kind %q", kind)
		}
		if !n.Allows(&cert) {
			t.Fatalf("%q (%s, canonical %q) does not allow a certificate carrying it", s, kind, c)
		}
		if n.Allows(&x509.Certificate{}) {
			t.Fatalf("%q allows a certificate without names", s)
		}
	})
}
