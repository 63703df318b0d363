package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// fastCheckSeeds are bodies of /v1/check for FuzzFastCheck and
// TestFastCheck: what fastCheck must take, and what it must leave to
// encoding/json.
var fastCheckSeeds = []struct {
	body string
	fast bool
}{
	{`{"limit":"api-key","key":"k1","cost":1}`, true},
	{`{"key":"k1","limit":"api-key"}`, true},
	{" {\n\t\"cost\" : 25 ,\r\n \"limit\":\"a\", \"key\" :\"é ü\"} \n", true},
	{`{"limit":"a","key":"k","cost":0}`, true},
	{`{"limit":"a","key":"k","cost":123456789012345678}`, true},
	{`{"limit":"a","key":""}`, true},
	{`{"limit":"a","key":"k","cost":1234567890123456789}`, false},
	{`{"limit":"a","key":"k","cost":-1}`, false},
	{`{"limit":"a","key":"k","cost":01}`, false},
	{`{"limit":"a","key":"k","cost":1.0}`, false},
	{`{"limit":"a","key":"k","cost":1e2}`, false},
	{`{"limit":"a","key":"k\"q"}`, false},
	{`{"limit":"a","key":"k\u0041"}`, false},
	{"{\"limit\":\"a\",\"key\":\"\xff\"}", false},
	{"{\"limit\":\"a\",\"key\":\"a\tb\"}", false},
	{`{"Limit":"a","key":"k"}`, false},
	{`{"limit":"a","limit":"b","key":"k"}`, false},
	{`{"limit":"a","key":"a","key":"b"}`, false},
	{`{"limit":"a","key":"a","KEY":"b"}`, false},
	{`{"limit":"a","key":"k","cost":1,"cost":2}`, false},
	{`{"limit":"a","key":"k","extra":1}`, false},
	{`{"limit":"a","key":null}`, false},
	{`{"limit":"a"}`, false},
	{`{"limit":"a","key":"k"} {}`, false},
	{`{"limit":"a","key":"k",}`, false},
	{`{"checks":[{"limit":"a","key":"k"}]}`, false},
	{`{"plan":"free","key":"k"}`, false},
	{`[]`, false},
	{``, false},
}

// TestFastCheck checks which bodies take the fast path.
func TestFastCheck(t *testing.T) {
	for _, s := range fastCheckSeeds {
		if _, _, _, _, ok := fastCheck([]byte(s.body)); ok != s.fast {
			t.Errorf("fastCheck(%q) ok = %v, want %v", s.body, ok, s.fast)
		}
	}
	limit, key, cost, hasCost, ok := fastCheck([]byte(`{"cost":7,"key":"k1","limit":"api-key"}`))
	if !ok || string(limit) != "api-key" || key != "k1" || cost != 7 || !hasCost {
		t.Errorf("fastCheck = %q, %q, %d, %v, %v", limit, key, cost, hasCost, ok)
	}
}

// FuzzFastCheck checks fastCheck against encoding/json: whatever body
// fastCheck takes, encoding/json (as the handler runs it) decodes to the
// same limit, key and cost, with nothing else in the body, and the slow
// path's fieldProblem finds nothing wrong with its fields.
func FuzzFastCheck(f *testing.F) {
	for _, s := range fastCheckSeeds {
		f.Add([]byte(s.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		limit, key, cost, hasCost, ok := fastCheck(body)
		if !ok {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var cb checkBody
		if err := dec.Decode(&cb); err != nil {
			t.Fatalf("fastCheck took %q, encoding/json refuses it: %v", body, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("fastCheck took %q, encoding/json finds more after the object: %v", body, err)
		}
		if cb.Limit == nil || *cb.Limit != string(limit) || cb.Key == nil || *cb.Key != key || cb.Checks != nil || cb.Plan != nil || cb.PlanTable != nil {
			t.Fatalf("fastCheck(%q) = %q, %q; encoding/json: %+v", body, limit, key, cb)
		}
		if (cb.Cost != nil) != hasCost || (hasCost && *cb.Cost != cost) {
			t.Fatalf("fastCheck(%q) cost = %d (%v); encoding/json: %v", body, cost, hasCost, cb.Cost)
		}
		if msg := fieldProblem(body); msg != "" {
			t.Fatalf("fastCheck took %q, which the slow path refuses: %s", body, msg)
		}
	})
}
