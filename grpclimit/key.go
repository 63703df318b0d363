package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyFunc returns the key a call is counted under for one limit, and
// whether the call has one; a call without a key is not counted by that
// limit. fullMethod is the call's method, "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) (key string, ok bool)

// PeerIP returns a KeyFunc whose key is the address of the connection's
// peer, without port: IPv4-mapped IPv6 addresses become IPv4, and IPv6
// addresses are grouped by their first ipv6Prefix bits (0 means 64), as
// httplimit.ClientIP does. gRPC has no forwarding header convention, so
// the peer is the client; behind a proxy, key by metadata the proxy sets.
func PeerIP(ipv6Prefix int) KeyFunc {
	if ipv6Prefix <= 0 || ipv6Prefix > 128 {
		ipv6Prefix = 64
	}
	return func(ctx context.Context, _ string) (string, bool) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", false
		}
		var a netip.Addr
		switch addr := p.Addr.(type) {
		case *net.TCPAddr:
			a = addr.AddrPort().Addr()
		default:
			ap, err := netip.ParseAddrPort(addr.String())
			if err != nil {
				s := addr.String()
				return s, s != ""
			}
			a = ap.Addr()
		}
		a = a.Unmap().WithZone("")
		if a.Is4() || ipv6Prefix == 128 {
			return a.String(), a.IsValid()
		}
		return netip.PrefixFrom(a, ipv6Prefix).Masked().String(), true
	}
}

// Metadata returns a KeyFunc whose key is the first value of the named
// incoming metadata key (an API key); calls without it have no key.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, bool) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		return vs[0], true
	}
}

// Method is a KeyFunc whose key is the full method name,
// "/package.Service/Method".
func Method(_ context.Context, fullMethod string) (string, bool) {
	return fullMethod, fullMethod != ""
}

// Constant returns a KeyFunc that gives every call the same key.
func Constant(key string) KeyFunc {
	return func(context.Context, string) (string, bool) { return key, true }
}

// Join returns a KeyFunc whose key combines the keys of fns in order,
// separated by '|' (a part's own '|' and '\' are escaped); a call has a
// joined key only when every part has one.
func Join(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...)
	return func(ctx context.Context, method string) (string, bool) {
		var b strings.Builder
		for i, fn := range fns {
			k, ok := fn(ctx, method)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			for j := 0; j < len(k); j++ {
				if k[j] == '|' || k[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(k[j])
			}
		}
		return b.String(), true
	}
}

// ParseKey parses a key spec: "peer" (PeerIP with /64), "metadata:NAME",
// "method", "const:VALUE", or several joined with "+" ("metadata:x-api-key+method").
func ParseKey(spec string) (KeyFunc, error) {
	if spec == "" {
		return nil, fmt.Errorf("key spec is empty (want peer, metadata:NAME, method, const:VALUE, or several joined with +)")
	}
	parts := strings.Split(spec, "+")
	fns := make([]KeyFunc, 0, len(parts))
	for _, part := range parts {
		name, arg, hasArg := strings.Cut(part, ":")
		var fn KeyFunc
		switch {
		case part == "":
			return nil, fmt.Errorf("key spec %q: empty source (a leading, trailing or doubled +)", spec)
		case name == "peer" && !hasArg:
			fn = PeerIP(0)
		case name == "method" && !hasArg:
			fn = Method
		case name == "metadata" && arg != "":
			fn = Metadata(arg)
		case name == "const" && arg != "":
			fn = Constant(arg)
		case name == "metadata" || name == "const":
			return nil, fmt.Errorf("key spec %q: source %q needs an argument: %s:VALUE", spec, name, name)
		case name == "peer" || name == "method":
			return nil, fmt.Errorf("key spec %q: source %q takes no argument", spec, name)
		default:
			return nil, fmt.Errorf("key spec %q: unknown source %q (want peer, metadata:NAME, method or const:VALUE)", spec, name)
		}
		fns = append(fns, fn)
	}
	if len(fns) == 1 {
		return fns[0], nil
	}
	return Join(fns...), nil
}
