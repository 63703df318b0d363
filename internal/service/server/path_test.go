package server

import (
	"errors"
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestNormalPath(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		err      error
	}{
		{in: "/", want: "/"},
		{in: "/login", want: "/login"},
		{in: "/a/b/", want: "/a/b/"},
		{in: "/a;b=1/c", want: "/a;b=1/c"},
		{in: "/a/..b/.c/...", want: "/a/..b/.c/..."},
		{in: "/a%20b", want: "/a%20b"},
		{in: "/%2541", want: "/%2541"},
		{in: "/login%3Fx", want: "/login%3Fx"},

		// Repeated slashes are merged, dot segments removed.
		{in: "//login", want: "/login"},
		{in: "///", want: "/"},
		{in: "/./login", want: "/login"},
		{in: "/x/../login", want: "/login"},
		{in: "/x/./../login", want: "/login"},
		{in: "/../login", want: "/login"},
		{in: "/a/..", want: "/"},
		{in: "/a/b/..", want: "/a/"},
		{in: "/a/b/.", want: "/a/b/"},
		{in: "/a//b//", want: "/a/b/"},
		{in: "/a/..//b", want: "/b"},
		{in: "/.", want: "/"},

		// Unreserved characters are decoded, other escapes upper-cased.
		{in: "/%7Euser/%61%2D%5f", want: "/~user/a-_"},
		{in: "/%6Cogin", want: "/login"},
		{in: "/a%2eb", want: "/a.b"},
		{in: "/caf%c3%a9", want: "/caf%C3%A9"},
		{in: "/%2e%2e%2e", want: "/..."},

		// Ambiguous paths.
		{in: "/x/%2e%2e/login", err: errPathDot},
		{in: "/%2e/login", err: errPathDot},
		{in: "/api/%2e%2e/login", err: errPathDot},
		{in: "/x/.%2E/login", err: errPathDot},
		{in: "/x/%2e", err: errPathDot},
		{in: "/%2flogin", err: errPathSlash},
		{in: "/x/..%2flogin", err: errPathSlash},
		{in: "/api%2Fitems", err: errPathSlash},
		{in: "/a%5cb", err: errPathBackslash},
		{in: `/a\b`, err: errPathBackslash},
		{in: "/x/..;/login", err: errPathDotParam},
		{in: "/.;a=b/login", err: errPathDotParam},
		{in: "/login%00.png", err: errPathControl},
		{in: "/a\x00b", err: errPathControl},
		{in: "/a\nb", err: errPathControl},
		{in: "/a\x7f", err: errPathControl},
		{in: "/a#b", err: errPathFragment},
		{in: "/a%zz", err: errPathEscape},
		{in: "/a%4", err: errPathEscape},
		{in: "/a%", err: errPathEscape},
		{in: "", err: errPathNotAbsolute},
		{in: "login", err: errPathNotAbsolute},
		{in: "*", err: errPathNotAbsolute},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := normalPath(tt.in)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("normalPath(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestNormalPathAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		if _, err := normalPath("/api/v2/items/12345"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("normalPath of a normal path: %v allocations, want 0", n)
	}
}

// FuzzNormalPath checks that normalPath never panics, that what it
// returns is in normal form (normalPath returns it unchanged, and it has
// no empty segment, dot segment or encoded separator), and that it names
// the same resource as path.Clean of the decoded input, an independent
// reading.
func FuzzNormalPath(f *testing.F) {
	for _, s := range []string{
		"/", "/login", "//login", "/./login", "/x/../login", "/x/%2e%2e/login", "/%2e/login",
		"/%2flogin", "/x/..%2flogin", "/api/%2e%2e/login", "/a/b/.", "/%7Ea%20b/", "/x/..;/y", `/a\b`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := normalPath(in)
		if err != nil {
			if out != "" {
				t.Fatalf("normalPath(%q) = %q with error %v", in, out, err)
			}
			return
		}
		if again, err := normalPath(out); again != out || err != nil {
			t.Fatalf("normalPath(%q) = %q, but normalPath(%q) = %q, %v", in, out, out, again, err)
		}
		if !strings.HasPrefix(out, "/") || strings.Contains(out, "//") {
			t.Fatalf("normalPath(%q) = %q: not absolute, or has an empty segment", in, out)
		}
		for seg := range strings.SplitSeq(out[1:], "/") {
			if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
				t.Fatalf("normalPath(%q) = %q: has a dot segment", in, out)
			}
		}
		for _, bad := range []string{"%2F", "%5C", "%00", `\`, "#"} {
			if strings.Contains(strings.ToUpper(out), bad) {
				t.Fatalf("normalPath(%q) = %q: has %s", in, out, bad)
			}
		}
		din, err1 := url.PathUnescape(in)
		dout, err2 := url.PathUnescape(out)
		if err1 != nil || err2 != nil {
			t.Fatalf("normalPath(%q) = %q, which do not decode: %v, %v", in, out, err1, err2)
		}
		if path.Clean(din) != path.Clean(dout) || path.Clean(dout) != strings.TrimSuffix(dout, "/") && dout != "/" {
			t.Fatalf("normalPath(%q) = %q (decoded %q); path.Clean of the decoded input is %q", in, out, dout, path.Clean(din))
		}
	})
}
