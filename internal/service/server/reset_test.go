package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestReset checks POST /v1/reset/{limit}/{key}: the key starts afresh,
// debt and all, under the limit's policy and the override in force for
// it; other keys keep their state; it needs the admin token, and names
// what is wrong otherwise.
func TestReset(t *testing.T) {
	f, logs := ovFixture(t, "", nil)
	for range 2 {
		f.check(`{"limit":"tiny","key":"a"}`)
		f.check(`{"limit":"tiny","key":"b"}`)
	}
	if rec := f.check(`{"limit":"tiny","key":"a"}`); !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Fatalf("third check of tiny = %s, want refused", rec.Body)
	}
	// An override for a, spent too: the reset forgets both states.
	if rec := f.do("PUT", "/v1/overrides/tiny/a", `{"limit":1,"period":"1m"}`); rec.Code != http.StatusCreated {
		t.Fatalf("PUT override = %d %s", rec.Code, rec.Body)
	}
	f.check(`{"limit":"tiny","key":"a"}`)

	rec := f.do("POST", "/v1/reset/tiny/a", "")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"reset":{"key":"a","limit":"tiny"}}` {
		t.Fatalf("reset = %d %s, want 200 naming the limit and key", rec.Code, rec.Body)
	}
	if rec := f.check(`{"limit":"tiny","key":"a"}`); !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Errorf("check under the override after the reset = %s, want allowed", rec.Body)
	}
	f.do("DELETE", "/v1/overrides/tiny/a", "")
	var a map[string]any
	json.Unmarshal(f.check(`{"limit":"tiny","key":"a"}`).Body.Bytes(), &a)
	if a["allowed"] != true || a["remaining"] != 1.0 {
		t.Errorf("check under the limit's own policy after the reset = %v, want allowed, 1 left", a)
	}
	if rec := f.check(`{"limit":"tiny","key":"b"}`); !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Errorf("check of b = %s, want still refused (only a was reset)", rec.Body)
	}
	if !strings.Contains(logs.String(), `"msg":"key reset"`) || !strings.Contains(logs.String(), `"policies":2`) {
		t.Errorf("log = %s, want a line saying the key was reset under two policies", logs)
	}

	for _, tt := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"POST", "/v1/reset/nope/a", 404, `no limit named \"nope\"`},
		{"POST", "/v1/reset/tiny", 404, "use POST /v1/reset/{limit}/{key}"},
		{"POST", "/v1/reset/tiny/a/b", 404, "use POST /v1/reset/{limit}/{key}"},
		{"GET", "/v1/reset/tiny/a", 405, "use POST"},
	} {
		rec := f.do(tt.method, tt.path, "")
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("%s %s = %d %s, want %d with %q", tt.method, tt.path, rec.Code, rec.Body, tt.code, tt.want)
		}
	}
	f.auth = ""
	if rec := f.do("POST", "/v1/reset/tiny/b", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("reset without the token = %d %s, want 401", rec.Code, rec.Body)
	}
}

// TestResetNeedsAToken: without an admin token configured, a reset is 404
// saying how to turn it on.
func TestResetNeedsAToken(t *testing.T) {
	f := newFixture(t, usageYAML)
	rec := f.do("POST", "/v1/reset/tokens/a", "")
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "admin.token_file") {
		t.Errorf("reset without an admin token configured = %d %s, want 404 saying how to turn it on", rec.Code, rec.Body)
	}
}
