package server

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// ests builds estimates from name, cost pairs.
func ests(kv ...any) []estimate {
	var out []estimate
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, estimate{kv[i].(string), int64(kv[i+1].(int))})
	}
	return out
}

func TestUsageLeaseRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		store string
		ests  []estimate
	}{
		{"m1.AAAA", ests("tokens", 500)},
		{"r1.x-_y", ests("", 0, "tokens", 0, "requests", 1, "", 0)},
		{"m1.a", ests("a-b", 1, "c_d", 9223372036854775807, "tokens", 3)},
		{"any printable ~!. lease", ests("", 0)},
	} {
		lease := encodeUsageLease(tt.store, tt.ests)
		if !strings.HasPrefix(lease, usageLeasePrefix) || strings.ContainsAny(lease, "+/=\n ") {
			t.Errorf("encodeUsageLease(%q, %v) = %q, want u1. and base64url", tt.store, tt.ests, lease)
		}
		store, got, ok := decodeUsageLease(lease)
		if !ok || store != tt.store || !slices.Equal(got, tt.ests) {
			t.Errorf("decodeUsageLease(%q) = %q, %v, %v; want %q, %v", lease, store, got, ok, tt.store, tt.ests)
		}
	}
	// A store's own lease passes through, without estimates.
	if store, got, ok := decodeUsageLease("m1.abc"); !ok || store != "m1.abc" || got != nil {
		t.Errorf("decodeUsageLease(m1.abc) = %q, %v, %v", store, got, ok)
	}
	for _, bad := range []string{"u1.", "u1.!!!", "u1.AA", "u1." + strings.Repeat("A", 2*maxLeaseBody), "u1.BQ",
		"u1.AQB__________________8B" /* an estimate beyond 63 bits */} {
		if _, _, ok := decodeUsageLease(bad); ok {
			t.Errorf("decodeUsageLease(%q) is ok, want refused", bad)
		}
	}
}

func FuzzUsageLease(f *testing.F) {
	f.Add("m1.AAAA", "tokens", int64(5))
	f.Add("", "", int64(0))
	f.Add("u1.AQZ0b2tlbnMF", "a,b", int64(1<<40))
	f.Fuzz(func(t *testing.T, lease, joined string, cost int64) {
		// Whatever a client sends, decoding never fails but by saying so,
		// and what decodes encodes back to the same store lease and
		// estimates.
		store, es, ok := decodeUsageLease(lease)
		if ok && len(es) > 0 {
			s2, e2, ok2 := decodeUsageLease(encodeUsageLease(store, es))
			if !ok2 || s2 != store || !slices.Equal(e2, es) {
				t.Fatalf("re-encoding %q: %q %v %v, want %q %v", lease, s2, e2, ok2, store, es)
			}
		}
		if joined == "" || cost < 0 {
			return
		}
		names := strings.Split(joined, ",")
		if len(names) > maxChecks {
			return
		}
		es = es[:0]
		for _, n := range names {
			es = append(es, estimate{n, cost})
		}
		s3, e3, ok3 := decodeUsageLease(encodeUsageLease(lease+"x", es))
		if !ok3 || s3 != lease+"x" || !slices.Equal(e3, es) {
			t.Fatalf("round trip of %q %v: %q %v %v", lease+"x", es, s3, e3, ok3)
		}
	})
}

// TestReadRelease checks the bodies of POST /v1/release: a lease alone,
// a lease with the usage of its estimates by limit name, and every
// malformed body answered 400 problem+json naming the field.
func TestReadRelease(t *testing.T) {
	lease := encodeUsageLease("m1.xyz", ests("tokens", 10, "", 0, "api-calls", 1, "tokens", 10))
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	tests := []struct {
		name, body string
		want       []int64 // the usage; nil: none
		err        string  // a part of the 400's detail
	}{
		{"lease alone", `{"lease":` + q(lease) + `}`, nil, ""},
		{"store lease alone", `{"lease":"m1.abc"}`, nil, ""},
		{"usage of one", `{"lease":` + q(lease) + `,"usage":{"api-calls":3}}`, []int64{-1, -1, 3, -1}, ""},
		{"usage of a limit twice in the lease", `{"lease":` + q(lease) + `,"usage":{"tokens":812}}`, []int64{812, -1, -1, 812}, ""},
		{"usage of 0", `{"lease":` + q(lease) + `,"usage":{"tokens":0,"api-calls":1}}`, []int64{0, -1, 1, 0}, ""},
		{"empty usage", `{"lease":` + q(lease) + `,"usage":{}}`, []int64{-1, -1, -1, -1}, ""},
		{"negative usage", `{"lease":` + q(lease) + `,"usage":{"tokens":-1}}`, nil, "usage.tokens must be 0 or more, got -1"},
		{"fractional usage", `{"lease":` + q(lease) + `,"usage":{"tokens":1.5}}`, nil, "usage: each limit's usage must be a whole number, not number 1.5"},
		{"usage as a string", `{"lease":` + q(lease) + `,"usage":{"tokens":"5"}}`, nil, "usage: each limit's usage must be a whole number, not string"},
		{"usage not an object", `{"lease":` + q(lease) + `,"usage":[1]}`, nil, "usage must be an object"},
		{"usage null", `{"lease":` + q(lease) + `,"usage":null}`, nil, "usage is null"},
		{"usage of a limit null", `{"lease":` + q(lease) + `,"usage":{"tokens":null}}`, nil, "usage.tokens is null"},
		{"usage twice", `{"lease":` + q(lease) + `,"usage":{"tokens":1,"tokens":2}}`, nil, "usage.tokens is given twice"},
		{"usage of another limit", `{"lease":` + q(lease) + `,"usage":{"requests":1}}`, nil, `usage.requests: the lease holds no estimate of limit "requests" (it holds "tokens", "api-calls", "tokens")`},
		{"usage of the empty name", `{"lease":` + q(lease) + `,"usage":{"":1}}`, nil, `usage.: the lease holds no estimate of limit ""`},
		{"usage without estimates", `{"lease":"m1.abc","usage":{"tokens":1}}`, nil, "the lease holds no estimate to settle"},
		{"usage too large", `{"lease":` + q(lease) + `,"usage":{"tokens":99999999999999999999}}`, nil, "too large"},
		{"no lease", `{"usage":{"tokens":1}}`, nil, "missing lease"},
		{"malformed lease", `{"lease":"u1.!!"}`, nil, "not one this Sluice made"},
		{"unknown field", `{"lease":"m1.abc","settle":true}`, nil, `unknown field "settle" (want lease and usage)`},
		{"lease in capitals", `{"LEASE":"m1.abc"}`, nil, `unknown field "LEASE"`},
		{"two objects", `{"lease":"m1.abc"} {}`, nil, "one JSON object"},
		{"not JSON", `lease`, nil, "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/v1/release", strings.NewReader(tt.body))
			rel, ok := readRelease(rec, req)
			if tt.err != "" {
				var p struct{ Detail string }
				json.Unmarshal(rec.Body.Bytes(), &p)
				if ok || rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, tt.err) {
					t.Fatalf("readRelease(%s) = ok %v, %d %s %s; want 400 problem+json with %q", tt.body, ok, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.err)
				}
				return
			}
			if !ok {
				t.Fatalf("readRelease(%s) refused: %d %s", tt.body, rec.Code, rec.Body)
			}
			if !slices.Equal(rel.usage, tt.want) || rel.lease == "" || strings.HasPrefix(rel.lease, usageLeasePrefix) {
				t.Errorf("readRelease(%s) = %q %v, want the store's lease and usage %v", tt.body, rel.lease, rel.usage, tt.want)
			}
		})
	}
}
