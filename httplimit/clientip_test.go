package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func mustPrefixes(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	ps, err := ParseTrustedProxies(list)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestClientIP(t *testing.T) {
	trusted := mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.254")
	tests := []struct {
		name    string
		c       ClientIP
		remote  string
		headers []string // name, value pairs (a name may repeat)
		addr    string
		key     string
	}{
		{"remote only", ClientIP{}, "198.51.100.7:1234", nil, "198.51.100.7", "198.51.100.7"},
		{"no trusted proxies: XFF ignored", ClientIP{}, "198.51.100.7:1234", []string{"X-Forwarded-For", "203.0.113.1"}, "198.51.100.7", "198.51.100.7"},
		{"untrusted peer: XFF ignored", ClientIP{TrustedProxies: trusted}, "198.51.100.7:1", []string{"X-Forwarded-For", "203.0.113.1"}, "198.51.100.7", "198.51.100.7"},
		{"untrusted peer: Forwarded ignored", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "198.51.100.7:1", []string{"Forwarded", "for=203.0.113.1"}, "198.51.100.7", "198.51.100.7"},
		{"trusted peer, one hop", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1"}, "203.0.113.1", "203.0.113.1"},
		{"right-most untrusted wins over spoofed left", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "1.1.1.1, 2.2.2.2, 203.0.113.1, 10.9.9.9"}, "203.0.113.1", "203.0.113.1"},
		{"several header lines", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "1.1.1.1, 203.0.113.1", "X-Forwarded-For", "10.2.2.2"}, "203.0.113.1", "203.0.113.1"},
		{"all trusted: left-most", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "10.3.3.3, 10.2.2.2"}, "10.3.3.3", "10.3.3.3"},
		{"garbage stops the walk", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1, nonsense, 10.2.2.2"}, "10.2.2.2", "10.2.2.2"},
		{"garbage right-most: the peer", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1, unknown"}, "10.0.0.1", "10.0.0.1"},
		{"trailing comma stops", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1,"}, "10.0.0.1", "10.0.0.1"},
		{"XFF with ports and brackets", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "[2001:db8::7]:443"}, "2001:db8::7", "2001:db8::/64"},
		{"XFF with IPv4 port", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1:8080"}, "203.0.113.1", "203.0.113.1"},
		{"trusted single address", ClientIP{TrustedProxies: trusted}, "192.0.2.254:1", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9", "203.0.113.9"},
		{"neighbour of trusted address is not trusted", ClientIP{TrustedProxies: trusted}, "192.0.2.253:1", []string{"X-Forwarded-For", "203.0.113.9"}, "192.0.2.253", "192.0.2.253"},
		{"trusted peer without header", ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", nil, "10.0.0.1", "10.0.0.1"},
		{"X-Real-IP", ClientIP{TrustedProxies: trusted, Header: "X-Real-IP"}, "10.0.0.1:1", []string{"X-Real-IP", "203.0.113.5", "X-Forwarded-For", "1.1.1.1"}, "203.0.113.5", "203.0.113.5"},
		{"other header not read", ClientIP{TrustedProxies: trusted, Header: "X-Real-IP"}, "10.0.0.1:1", []string{"X-Forwarded-For", "1.1.1.1"}, "10.0.0.1", "10.0.0.1"},
		{"Forwarded", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=1.1.1.1, for=203.0.113.1;proto=https;by=10.0.0.1, for="10.5.5.5:80"`}, "203.0.113.1", "203.0.113.1"},
		{"Forwarded IPv6 quoted", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "[2001:db8:ffff::1]:1", []string{"Forwarded", `For="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17", "2001:db8:cafe::/64"},
		{"Forwarded quoted comma", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=203.0.113.1;ext="a,b", for=10.1.1.1`}, "203.0.113.1", "203.0.113.1"},
		{"Forwarded unknown stops", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=203.0.113.1, for=unknown, for=10.1.1.1`}, "10.1.1.1", "10.1.1.1"},
		{"Forwarded obfuscated stops", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=_hidden`}, "10.0.0.1", "10.0.0.1"},
		{"Forwarded element without for", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=203.0.113.1, proto=https`}, "10.0.0.1", "10.0.0.1"},
		{"Forwarded syntax error", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for=203.0.113.1, for="10.1.1.1`}, "10.0.0.1", "10.0.0.1"},
		{"Forwarded unbracketed IPv6 is invalid", ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded", `for="2001:db8::1"`}, "10.0.0.1", "10.0.0.1"},
		{"IPv4-mapped remote", ClientIP{}, "[::ffff:198.51.100.7]:1", nil, "198.51.100.7", "198.51.100.7"},
		{"IPv4-mapped trusted proxy", ClientIP{TrustedProxies: trusted}, "[::ffff:10.0.0.1]:1", []string{"X-Forwarded-For", "::ffff:203.0.113.1"}, "203.0.113.1", "203.0.113.1"},
		{"IPv6 /64 default", ClientIP{}, "[2001:db8:1:2:3:4:5:6]:1", nil, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"IPv6 /48", ClientIP{IPv6Prefix: 48}, "[2001:db8:1:2:3:4:5:6]:1", nil, "2001:db8:1:2:3:4:5:6", "2001:db8:1::/48"},
		{"IPv6 /128", ClientIP{IPv6Prefix: 128}, "[2001:db8:1:2:3:4:5:6]:1", nil, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{"IPv6 zone dropped", ClientIP{IPv6Prefix: 128}, "[fe80::1%eth0]:1", nil, "fe80::1", "fe80::1"},
		{"IPv4 /24", ClientIP{IPv4Prefix: 24}, "198.51.100.7:1", nil, "198.51.100.7", "198.51.100.0/24"},
		{"remote without port", ClientIP{}, "198.51.100.7", nil, "198.51.100.7", "198.51.100.7"},
		{"mapped trusted prefix", ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.1"}, "203.0.113.1", "203.0.113.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.headers); i += 2 {
				r.Header.Add(tt.headers[i], tt.headers[i+1])
			}
			a, ok := tt.c.Addr(r)
			if !ok || a.String() != tt.addr {
				t.Errorf("Addr() = %v, %v, want %s", a, ok, tt.addr)
			}
			k, ok := tt.c.Key(r)
			if !ok || k != tt.key {
				t.Errorf("Key() = %q, %v, want %q", k, ok, tt.key)
			}
		})
	}
}

func TestClientIPNotAnAddress(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@"
	c := &ClientIP{}
	if _, ok := c.Addr(r); ok {
		t.Error("Addr() of a Unix socket peer reported an address")
	}
	if k, ok := c.Key(r); !ok || k != "@" {
		t.Errorf("Key() = %q, %v, want \"@\", true", k, ok)
	}
	r.RemoteAddr = ""
	if k, ok := c.Key(r); ok {
		t.Errorf("Key() with no remote address = %q, true; want no key", k)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies([]string{"10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32", "::1", "::ffff:10.0.0.0/104", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := "10.0.0.0/8 192.0.2.1/32 2001:db8::/32 ::1/128 10.0.0.0/8 10.0.0.0/8"
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	if strings.Join(s, " ") != want {
		t.Errorf("ParseTrustedProxies = %v, want %s", s, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", ""} {
		if _, err := ParseTrustedProxies([]string{"10.0.0.0/8", bad}); err == nil || !strings.Contains(err.Error(), "trusted proxy 1") {
			t.Errorf("ParseTrustedProxies(%q) = %v, want an error naming entry 1", bad, err)
		}
	}
}

// FuzzClientIP checks that no header makes ClientIP panic, that it always
// returns a valid address, and that an untrusted peer's headers never
// change the result.
func FuzzClientIP(f *testing.F) {
	seeds := []struct{ remote, xff, fwd string }{
		{"10.0.0.1:1", "203.0.113.1, 10.2.2.2", `for=203.0.113.1;proto=https, for="[2001:db8::1]:80"`},
		{"10.0.0.1:1", "", ""},
		{"10.0.0.1:1", ",,,", `for=""`},
		{"10.0.0.1:1", "[::1]:80, ::ffff:1.2.3.4", `for="\"q\"", for=_x;by=unknown`},
		{"[2001:db8:ffff::1]:1", "unknown", `For="[2001:db8:cafe::17]:_port"`},
		{"198.51.100.7:1", "1.1.1.1", "for=1.1.1.1"},
		{"@", "1.1.1.1", ";;,;"},
		{"10.0.0.1:1", "1.1.1.1 , 10.0.0.3", `for="\`},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.xff, s.fwd)
	}
	trusted := mustPrefixes(f, "10.0.0.0/8", "2001:db8:ffff::/48")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			c := &ClientIP{TrustedProxies: trusted, Header: header}
			r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
			r.Header.Set("X-Forwarded-For", xff)
			r.Header.Set("X-Real-IP", xff)
			r.Header.Set("Forwarded", fwd)
			a, ok := c.Addr(r)
			peer, _, peerOK := parseRemoteAddr(remote)
			if ok != peerOK {
				t.Fatalf("Addr ok = %v, remote parses = %v", ok, peerOK)
			}
			if !ok {
				continue
			}
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("Addr() = %v: not a valid unmapped address without zone", a)
			}
			if !c.trusted(peer) && a != peer {
				t.Fatalf("untrusted peer %v: Addr() = %v, headers must not change it", peer, a)
			}
			if _, ok := c.Key(r); !ok {
				t.Fatal("Key() has no key for an address")
			}
		}
	})
}

// FuzzForwarded checks the Forwarded parser against its own round trip:
// every for= value it returns for a line it built must be read back.
func FuzzForwarded(f *testing.F) {
	f.Add(`for=192.0.2.60;proto=http;by=203.0.113.43`)
	f.Add(`for="[2001:db8:cafe::17]:4711", for=unknown`)
	f.Add(`for="a\"b";x=",", ;; ,for=1.2.3.4`)
	f.Add(`FOR=1.2.3.4;for=5.6.7.8`)
	f.Fuzz(func(t *testing.T, line string) {
		nodes := forwardedFor(nil, line)
		for _, n := range nodes {
			a, ok := parseForwardedNode(n)
			if ok && (!a.IsValid() || a.Is4In6()) {
				t.Fatalf("parseForwardedNode(%q) = %v", n, a)
			}
		}
		if len(nodes) > len(line)+1 {
			t.Fatalf("forwardedFor(%q) returned %d nodes", line, len(nodes))
		}
	})
}
