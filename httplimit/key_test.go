package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type ctxKey struct{}

type tenant string

func (t tenant) String() string { return "tenant-" + string(t) }

func TestParseKey(t *testing.T) {
	r := httptest.NewRequest("POST", "http://API.Example.com:8080/v1/items?k=abc&x=%2Fy&empty=&k=second&a+b=c", nil)
	r.RemoteAddr = "10.0.0.1:555"
	r.Header.Set("X-API-Key", "key-1")
	r.Header.Set("X-Forwarded-For", "203.0.113.4")
	r.Header.Set("X-Tenant", "a|b")
	opts := &KeyOptions{
		ClientIP: &ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")},
		Sources: map[string]KeySource{
			"form": func(arg string) (KeyFunc, error) {
				if arg == "" {
					return nil, errors.New("needs a field name")
				}
				return Constant("form-" + arg), nil
			},
		},
	}
	tests := []struct {
		spec string
		key  string
		ok   bool
	}{
		{"ip", "203.0.113.4", true},
		{"header:X-API-Key", "key-1", true},
		{"header:x-api-key", "key-1", true},
		{"header:X-Missing", "", false},
		{"query:k", "abc", true},
		{"query:x", "/y", true},
		{"query:a b", "", false}, // spaces are not allowed: see the error cases
		{"query:empty", "", false},
		{"query:missing", "", false},
		{"path", "/v1/items", true},
		{"method", "POST", true},
		{"host", "api.example.com:8080", true},
		{"route", "POST /v1/items", true},
		{"const:all", "all", true},
		{"ip+path", "203.0.113.4|/v1/items", true},
		{"header:X-Tenant+method", `a\|b|POST`, true},
		{"ip+header:X-Missing", "", false},
		{"form:user", "form-user", true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			fn, err := ParseKey(tt.spec, opts)
			if tt.spec == "query:a b" {
				if err == nil {
					t.Fatal("ParseKey accepted a space")
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.spec, err)
			}
			key, ok := fn(r)
			if key != tt.key || ok != tt.ok {
				t.Errorf("ParseKey(%q)(r) = %q, %v, want %q, %v", tt.spec, key, ok, tt.key, tt.ok)
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	opts := &KeyOptions{Sources: map[string]KeySource{
		"json":   func(arg string) (KeyFunc, error) { return nil, errors.New("json needs a field") },
		"tenant": func(arg string) (KeyFunc, error) { return Constant("t"), nil },
	}}
	tests := []struct {
		spec string
		want string
	}{
		{"", "key spec is empty"},
		{"ipp", `unknown source "ipp" (want ip, header:NAME, query:NAME, path, method, host, route, const:VALUE, json:NAME or tenant)`},
		{"ip+", `key spec "ip+": empty source`},
		{"+ip", "empty source"},
		{"ip++path", "empty source"},
		{"header", `source "header" needs name: header:NAME`},
		{"header:", `source "header" needs name`},
		{"header:X Key", "contains a space"},
		{"header:X(Key)", `header name "X(Key)" is not a valid HTTP field name`},
		{"query:", `source "query" needs name`},
		{"const:", `source "const" needs value`},
		{"ip:x", `source "ip" takes no argument (got "x")`},
		{"path:x", "takes no argument"},
		{"json:", `source "json:": json needs a field`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := ParseKey(tt.spec, opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseKey(%q) = %v, want an error containing %q", tt.spec, err, tt.want)
			}
		})
	}
	if _, err := ParseKey("ip", &KeyOptions{ClientIP: &ClientIP{IPv4Prefix: 33}}); err == nil {
		t.Error("ParseKey accepted an invalid ClientIP")
	}
}

func TestContextKey(t *testing.T) {
	fn := Context(ctxKey{})
	tests := []struct {
		name string
		val  any
		key  string
		ok   bool
	}{
		{"string", "u-42", "u-42", true},
		{"stringer", tenant("acme"), "tenant-acme", true},
		{"empty", "", "", false},
		{"missing", nil, "", false},
		{"other type", 42, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tt.val != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tt.val))
			}
			key, ok := fn(r)
			if key != tt.key || ok != tt.ok {
				t.Errorf("Context(ctxKey{})(r) = %q, %v, want %q, %v", key, ok, tt.key, tt.ok)
			}
		})
	}
}

func TestJoinIsUnambiguous(t *testing.T) {
	// Different part lists never join to the same key.
	parts := [][2]string{{"a|b", "c"}, {"a", "b|c"}, {`a\`, "|c"}, {`a\|`, "c"}, {"a", `\|c`}}
	seen := map[string][2]string{}
	for _, p := range parts {
		fn := Join(Constant(p[0]), Constant(p[1]))
		k, _ := fn(&http.Request{})
		if prev, dup := seen[k]; dup {
			t.Errorf("Join(%q) = Join(%q) = %q", p, prev, k)
		}
		seen[k] = p
	}
}

func TestQueryValue(t *testing.T) {
	tests := []struct {
		q, name, want string
	}{
		{"a=1&b=2", "b", "2"},
		{"a=1&a=2", "a", "1"},
		{"a%20b=x", "a b", "x"},
		{"a+b=x+y", "a b", "x y"},
		{"a=%zz", "a", ""},
		{"a", "a", ""},
		{"b=1;a=2", "a", ""},
		{"", "a", ""},
	}
	for _, tt := range tests {
		if got := queryValue(tt.q, tt.name); got != tt.want {
			t.Errorf("queryValue(%q, %q) = %q, want %q", tt.q, tt.name, got, tt.want)
		}
	}
}
