package tlsauth

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// Names is a list of allowed client identities (listen.tls.client_names):
// DNS names, URIs such as SPIFFE IDs, and email addresses, matched against
// the subject alternative names of a verified client certificate. The
// subject's common name is never looked at: SANs are what identify a
// client in current practice (RFC 6125, SPIFFE X.509-SVIDs). A nil or
// empty *Names allows every verified client. A Names is immutable.
type Names struct {
	dns, uri, email map[string]bool
	list            []string
}

// Kind is the kind of one allowed name.
type Kind string

// The kinds of names, as reported by ParseName.
const (
	DNSName Kind = "dns"
	URIName Kind = "uri"
	Email   Kind = "email"
)

// maxNameLen bounds one name: a DNS name has at most 253 characters, and
// URIs and email addresses in certificates are of that order.
const maxNameLen = 1024

// ParseName returns the canonical form and the kind of one allowed name:
// a string with "://" is a URI (scheme and host required, as in
// spiffe://cluster.local/ns/edge/sa/envoy), one with "@" an email
// address, any other a DNS name (letters, digits, hyphens and dots;
// compared without regard to case). Wildcards are not accepted: each
// client is named.
func ParseName(s string) (string, Kind, error) {
	switch {
	case s == "":
		return "", "", fmt.Errorf("is empty")
	case len(s) > maxNameLen:
		return "", "", fmt.Errorf("is longer than %d characters", maxNameLen)
	case strings.TrimSpace(s) != s:
		return "", "", fmt.Errorf("%q has white space around it", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return "", "", fmt.Errorf("%q holds a character other than visible ASCII", s)
		}
	}
	switch {
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return "", "", fmt.Errorf("%q is not a URI like spiffe://cluster.local/ns/edge/sa/envoy (scheme and host, no user, query or fragment)", s)
		}
		if u.String() != s {
			return "", "", fmt.Errorf("%q is not in canonical form (%q); write it as certificates carry it", s, u.String())
		}
		return s, URIName, nil
	case strings.Contains(s, "@"):
		local, domain, _ := strings.Cut(s, "@")
		if local == "" || !ValidDNSName(domain) {
			return "", "", fmt.Errorf("%q is not an email address like edge@example.com", s)
		}
		return local + "@" + strings.ToLower(domain), Email, nil
	default:
		if strings.Contains(s, "*") {
			return "", "", fmt.Errorf("%q: wildcards are not accepted; name each client", s)
		}
		if !ValidDNSName(s) {
			return "", "", fmt.Errorf("%q is neither a DNS name, a URI (spiffe://...) nor an email address", s)
		}
		return strings.ToLower(strings.TrimSuffix(s, ".")), DNSName, nil
	}
}

// ValidDNSName reports whether s is a DNS name: dot-separated labels of
// letters, digits and hyphens (each 1 to 63 bytes, not starting or ending
// with a hyphen), at most 253 bytes without the optional final dot.
func ValidDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ParseNames parses a list of allowed names with ParseName. Its error
// names the entry at fault by its index.
func ParseNames(list []string) (*Names, error) {
	n := &Names{dns: map[string]bool{}, uri: map[string]bool{}, email: map[string]bool{}}
	for i, s := range list {
		c, kind, err := ParseName(s)
		if err != nil {
			return nil, &NameError{Index: i, Err: err}
		}
		switch kind {
		case DNSName:
			n.dns[c] = true
		case URIName:
			n.uri[c] = true
		case Email:
			n.email[c] = true
		}
		n.list = append(n.list, s)
	}
	return n, nil
}

// NameError is a problem with one entry of a names list.
type NameError struct {
	// Index is the entry's position in the list, from 0.
	Index int
	Err   error
}

func (e *NameError) Error() string { return fmt.Sprintf("entry %d: %v", e.Index, e.Err) }
func (e *NameError) Unwrap() error { return e.Err }

// Len returns the number of names; 0 for nil.
func (n *Names) Len() int {
	if n == nil {
		return 0
	}
	return len(n.list)
}

// Allows reports whether the certificate carries one of the names among
// its subject alternative names. A nil or empty Names allows any
// certificate, and a nil certificate only then.
func (n *Names) Allows(c *x509.Certificate) bool {
	if n.Len() == 0 {
		return true
	}
	if c == nil {
		return false
	}
	for _, d := range c.DNSNames {
		if n.dns[strings.ToLower(strings.TrimSuffix(d, "."))] {
			return true
		}
	}
	for _, u := range c.URIs {
		if n.uri[u.String()] {
			return true
		}
	}
	for _, e := range c.EmailAddresses {
		if local, domain, ok := strings.Cut(e, "@"); ok && n.email[local+"@"+strings.ToLower(domain)] {
			return true
		}
	}
	return false
}

// Presented lists the identities a certificate carries, for a log line
// about a refused client: its SANs (DNS:, URI:, email:) and its subject's
// common name (CN:). Nothing else of the certificate is reported.
func Presented(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, d := range c.DNSNames {
		out = append(out, "DNS:"+d)
	}
	for _, u := range c.URIs {
		out = append(out, "URI:"+u.String())
	}
	for _, e := range c.EmailAddresses {
		out = append(out, "email:"+e)
	}
	if c.Subject.CommonName != "" {
		out = append(out, "CN:"+c.Subject.CommonName)
	}
	return out
}
