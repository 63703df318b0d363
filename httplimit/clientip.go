package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP finds the address of the client that sent a request, without
// letting the client choose it.
//
// By default the address is the connection's remote address
// (Request.RemoteAddr) and every forwarding header is ignored, since any
// client can send one. When the connection comes from a trusted proxy (an
// address in TrustedProxies), the forwarding Header is read instead: its
// list of addresses is walked from the right (the entry added by the
// nearest proxy) to the left, skipping the addresses of trusted proxies,
// and the first address that is not a trusted proxy is the client. Entries
// to the left of it were written by the client or by untrusted hops and are
// never used. When every entry is a trusted proxy, the left-most is used.
// An entry that is not an address ("unknown", an obfuscated node, garbage)
// stops the walk: the last trusted address before it is used.
//
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are treated as the IPv4
// address they contain, and zones are dropped. For keys, IPv6 addresses are
// grouped by IPv6Prefix (a /64, usually one subscriber, by default), so one
// client cannot escape a limit by rotating through its own addresses.
//
// A ClientIP is read-only once in use and safe for concurrent use.
type ClientIP struct {
	// TrustedProxies are the networks of the proxies in front of this
	// server. Empty means none: forwarding headers are never read.
	TrustedProxies []netip.Prefix
	// Header names the forwarding header the trusted proxies set:
	// "X-Forwarded-For" (the default), "Forwarded" (RFC 7239, the for=
	// parameter), "X-Real-IP", or any other header holding one address or
	// a comma-separated list of them. Only this one header is read: name
	// the one your proxy writes, since a header it does not write passes
	// through from the client unchanged.
	Header string
	// IPv6Prefix is how many leading bits of an IPv6 address make its key;
	// 0 means 64, 128 keeps the whole address.
	IPv6Prefix int
	// IPv4Prefix is how many leading bits of an IPv4 address make its key;
	// 0 means 32 (the whole address).
	IPv4Prefix int
}

// ParseTrustedProxies parses a list of CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32") or single addresses ("127.0.0.1", meaning /32 or /128)
// for ClientIP.TrustedProxies. The error names the entry that is wrong.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %d (%q): %w", i, s, err)
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %d (%q): not an address or CIDR prefix: %w", i, s, err)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (c *ClientIP) check() error {
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return fmt.Errorf("client ip: IPv6Prefix must be within 0..128, got %d", c.IPv6Prefix)
	}
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 {
		return fmt.Errorf("client ip: IPv4Prefix must be within 0..32, got %d", c.IPv4Prefix)
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("client ip: trusted proxy %d is not a valid prefix", i)
		}
	}
	if c.Header != "" && !validHeaderName(c.Header) {
		return fmt.Errorf("client ip: header %q is not a valid HTTP field name", c.Header)
	}
	return nil
}

// Addr returns the client's address, by the rules in ClientIP's doc. It
// reports false when the remote address is not an IP address (a Unix
// socket, for example).
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	a, _, ok := c.addr(r)
	return a, ok
}

// Key is a KeyFunc whose key is the client's address, grouped by the
// configured prefixes: "192.0.2.1", "2001:db8:1:2::/64". When the remote
// address is not an IP address, the key is the remote address as it is (all
// clients on one Unix socket share it).
func (c *ClientIP) Key(r *http.Request) (string, bool) {
	a, text, ok := c.addr(r)
	if !ok {
		return r.RemoteAddr, r.RemoteAddr != ""
	}
	if a.Is4() {
		bits := c.IPv4Prefix
		if bits == 0 || bits >= 32 {
			if text != "" {
				return text, true
			}
			return a.String(), true
		}
		return netip.PrefixFrom(a, bits).Masked().String(), true
	}
	bits := c.IPv6Prefix
	if bits == 0 {
		bits = 64
	}
	if bits >= 128 {
		return a.String(), true
	}
	return netip.PrefixFrom(a, bits).Masked().String(), true
}

// addr returns the client address and, when it is cheaply known, its
// canonical text (for an IPv4 address taken from RemoteAddr).
func (c *ClientIP) addr(r *http.Request) (netip.Addr, string, bool) {
	peer, text, ok := parseRemoteAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if len(c.TrustedProxies) == 0 || !c.trusted(peer) {
		return peer, text, true
	}
	name := c.Header
	if name == "" {
		name = "X-Forwarded-For"
	}
	lines := r.Header.Values(name)
	if len(lines) == 0 {
		return peer, text, true
	}
	got := peer
	if strings.EqualFold(name, "Forwarded") {
		var buf [8]string
		nodes := buf[:0]
		for _, line := range lines {
			nodes = forwardedFor(nodes, line)
		}
		for i := len(nodes) - 1; i >= 0; i-- {
			a, ok := parseForwardedNode(nodes[i])
			if !ok {
				return got, "", true
			}
			if !c.trusted(a) {
				return a, "", true
			}
			got = a
		}
		return got, "", true
	}
	for l := len(lines) - 1; l >= 0; l-- {
		line := lines[l]
		for {
			i := strings.LastIndexByte(line, ',')
			elem := strings.Trim(line[i+1:], " \t")
			if elem != "" || i >= 0 { // an empty element is invalid, an empty line is skipped
				a, ok := parseListAddr(elem)
				if !ok {
					return got, "", true
				}
				if !c.trusted(a) {
					return a, "", true
				}
				got = a
			}
			if i < 0 {
				break
			}
			line = line[:i]
		}
	}
	return got, "", true
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		// a is never IPv4-mapped; a prefix written in the mapped form
		// (::ffff:10.0.0.0/104) still covers the IPv4 addresses it maps.
		if p.Contains(a) || a.Is4() && p.Addr().Is4In6() && p.Contains(netip.AddrFrom16(a.As16())) {
			return true
		}
	}
	return false
}

// parseRemoteAddr parses Request.RemoteAddr ("192.0.2.1:1234",
// "[2001:db8::1]:1234"), returning the unmapped address without zone and,
// for IPv4, the address's text.
func parseRemoteAddr(s string) (netip.Addr, string, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		// Tolerate an address without a port.
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, "", false
		}
		ap = netip.AddrPortFrom(a, 0)
		s += ":"
	}
	a := ap.Addr()
	if a.Is4() {
		return a, s[:strings.LastIndexByte(s, ':')], true
	}
	return a.Unmap().WithZone(""), "", true
}

// parseListAddr parses one entry of an X-Forwarded-For style list: an
// address, optionally with a port ("192.0.2.1:80", "[2001:db8::1]:80") or
// in brackets.
func parseListAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// parseForwardedNode parses the value of a Forwarded for= parameter
// (RFC 7239 section 6): an IPv4 address or a bracketed IPv6 address, either
// with an optional port. "unknown" and obfuscated identifiers ("_hidden")
// are not addresses.
func parseForwardedNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && !validNodePort(rest) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return a.Unmap().WithZone(""), true
	}
	host := s
	if i := strings.IndexByte(s, ':'); i >= 0 {
		if !validNodePort(s[i:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// validNodePort reports whether s is ":" followed by a port number or an
// obfuscated port ("_abc").
func validNodePort(s string) bool {
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	s = s[1:]
	if s[0] == '_' {
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(s) > 1
	}
	if len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// forwardedFor appends to dst the for= value of each element of one
// Forwarded header line, in order, unquoted; an element without for= gives
// "" (not an address). A syntax error appends "" and ends the line, so the
// walk from the right stops there.
func forwardedFor(dst []string, line string) []string {
	i := 0
	n := len(line)
	skipOWS := func() {
		for i < n && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
	}
	for {
		// One element: pairs separated by ';', ended by ',' or the end.
		forVal, seen := "", false
		empty := true
		for {
			skipOWS()
			if i >= n || line[i] == ',' {
				break
			}
			if line[i] == ';' {
				i++
				continue
			}
			start := i
			for i < n && isTokenChar(line[i]) {
				i++
			}
			name := line[start:i]
			if name == "" || i >= n || line[i] != '=' {
				return append(dst, "")
			}
			i++
			var val string
			if i < n && line[i] == '"' {
				var ok bool
				val, i, ok = readQuoted(line, i)
				if !ok {
					return append(dst, "")
				}
			} else {
				start := i
				for i < n && isTokenChar(line[i]) {
					i++
				}
				val = line[start:i]
				if val == "" {
					return append(dst, "")
				}
			}
			empty = false
			if strings.EqualFold(name, "for") {
				if seen { // a parameter may appear once per element
					return append(dst, "")
				}
				forVal, seen = val, true
			}
			skipOWS()
			if i < n && line[i] != ';' && line[i] != ',' {
				return append(dst, "")
			}
		}
		if !empty {
			dst = append(dst, forVal)
		}
		if i >= n {
			return dst
		}
		i++ // the ','
	}
}

// readQuoted reads the quoted-string that starts at s[i] (a '"'), returning
// its unescaped content and the index after the closing quote.
func readQuoted(s string, i int) (string, int, bool) {
	i++
	start := i
	simple := true
	for i < len(s) {
		switch s[i] {
		case '"':
			if simple {
				return s[start:i], i + 1, true
			}
			var b strings.Builder
			for j := start; j < i; j++ {
				if s[j] == '\\' {
					j++
				}
				b.WriteByte(s[j])
			}
			return b.String(), i + 1, true
		case '\\':
			simple = false
			i += 2
			continue
		}
		i++
	}
	return "", i, false
}
