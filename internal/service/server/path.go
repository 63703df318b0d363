package server

import "strings"

// pathError is why normalPath refuses a path: each is a path that
// servers read in different ways, so that a rule matched on one reading
// could be passed by a request that the upstream reads another way.
type pathError string

func (e pathError) Error() string { return string(e) }

const (
	errPathNotAbsolute pathError = "the path does not start with /"
	errPathEscape      pathError = "the path has an invalid percent-encoding"
	errPathControl     pathError = "the path has a control character (such as NUL, %00)"
	errPathSlash       pathError = "the path has an encoded slash (%2F), which some servers read as a slash and others as part of a name"
	errPathBackslash   pathError = `the path has a backslash (\ or %5C), which some servers read as a slash`
	errPathFragment    pathError = "the path has a #, which some servers read as the start of a fragment"
	errPathDot         pathError = "the path has a dot segment written with %2E, which some servers resolve and others do not"
	errPathDotParam    pathError = "the path has a dot segment with parameters (..;), which some servers resolve"
)

// normalPath returns the normal form of p, an escaped URL path (a
// request's path as sent, without its query): percent-encoded unreserved
// characters (letters, digits, '-', '.', '_', '~') are decoded and other
// percent-encodings written in upper case (RFC 3986 section 6.2.2), the
// dot segments "." and ".." are removed (section 5.2.4), and empty
// segments are merged ("//" is "/"), as nginx and Envoy's merge_slashes
// do. A trailing slash is kept. The result is again an escaped path, in
// which every remaining percent-encoding stands for a byte that is not a
// path separator.
//
// It refuses, with a pathError that says why, a path that servers read in
// different ways: one that does not start with '/', has an invalid
// percent-encoding, a control character or %00, a slash or backslash
// written %2F or %5C, a backslash, a '#', a dot segment written with %2E
// ("%2e%2e") or a dot segment with parameters (".;", "..;").
//
// A path already in normal form is returned as it is, without
// allocating.
func normalPath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", errPathNotAbsolute
	}
	if plainPath(p) {
		return p, nil
	}
	var out []string // the segments kept, each in normal form
	rest := p[1:]
	for {
		raw, after, more := strings.Cut(rest, "/")
		seg, dots, err := normalSegment(raw)
		if err != nil {
			return "", err
		}
		switch {
		case dots > 0:
			if dots == 2 && len(out) > 0 {
				out = out[:len(out)-1]
			}
			if !more {
				out = append(out, "") // "/a/.." is "/", "/a/b/." is "/a/b/"
			}
		case seg == "":
			if !more {
				out = append(out, "") // the trailing slash
			}
		default:
			out = append(out, seg)
		}
		if !more {
			return "/" + strings.Join(out, "/"), nil
		}
		rest = after
	}
}

// normalSegment returns the normal form of one segment of a path, and
// dots: 1 for the segment ".", 2 for "..", else 0.
func normalSegment(s string) (seg string, dots int, err error) {
	var b strings.Builder
	encoded := false // a character of s was percent-encoded
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", 0, errPathEscape
			}
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			encoded = true
			switch {
			case v == '/':
				return "", 0, errPathSlash
			case v == '\\':
				return "", 0, errPathBackslash
			case v == 0:
				return "", 0, errPathControl
			case unreserved(v):
				b.WriteByte(v)
			default:
				b.WriteByte('%')
				b.WriteByte(upperHex[v>>4])
				b.WriteByte(upperHex[v&15])
			}
		case c < 0x20 || c == 0x7f:
			return "", 0, errPathControl
		case c == '\\':
			return "", 0, errPathBackslash
		case c == '#':
			return "", 0, errPathFragment
		default:
			b.WriteByte(c)
		}
	}
	seg = b.String()
	name, _, param := strings.Cut(seg, ";")
	if name != "." && name != ".." {
		return seg, 0, nil
	}
	if encoded {
		return "", 0, errPathDot
	}
	if param {
		return "", 0, errPathDotParam
	}
	return seg, len(seg), nil
}

// plainPath reports whether p, which starts with '/', is in normal form
// and has nothing normalPath refuses: no percent-encoding, control
// character, backslash or '#', no empty segment but a trailing one, and
// no dot segment, with or without parameters. (Each '/' is followed by
// the segment it starts, so the first segment is checked too.)
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' || c == '\\' || c == '#' || c < 0x20 || c == 0x7f:
			return false
		case c == '/' && i+1 < len(p):
			if p[i+1] == '/' || dotSegmentAt(p, i+1) {
				return false
			}
		}
	}
	return true
}

// dotSegmentAt reports whether the segment of p that starts at i is "."
// or "..", possibly followed by parameters (";...").
func dotSegmentAt(p string, i int) bool {
	n := 0
	for i+n < len(p) && p[i+n] == '.' && n < 2 {
		n++
	}
	return n > 0 && (i+n == len(p) || p[i+n] == '/' || p[i+n] == ';')
}

// unreserved reports whether c is an unreserved character of RFC 3986
// (section 2.3), which percent-encoding does not change.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

const upperHex = "0123456789ABCDEF"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
