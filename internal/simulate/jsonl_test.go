package simulate

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// jsonFields returns the field names of a JSON object in the order they
// appear, and the object decoded.
func jsonFields(t *testing.T, line string) ([]string, map[string]any) {
	t.Helper()
	names := testkit.JSONKeys(t, line)
	obj := make(map[string]any)
	d2 := json.NewDecoder(strings.NewReader(line))
	d2.UseNumber()
	if err := d2.Decode(&obj); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return names, obj
}

var jsonlFields = []string{"t", "key", "cost", "allowed", "remaining", "retry_after_ms", "delay_ms", "reset_after_ms"}

func TestJSONLWriter(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		d    sluice.Decision
		want string
	}{
		{"allowed", Request{T: 1767268859000, Key: "client-1", Cost: 1}, sluice.Decision{Allowed: true, Remaining: 99, ResetAfter: 600 * time.Millisecond},
			`{"t":1767268859000,"key":"client-1","cost":1,"allowed":true,"remaining":99,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":600}`},
		{"denied", Request{T: 5, Key: "a", Cost: 2}, sluice.Decision{RetryAfter: 200 * time.Millisecond, ResetAfter: 59600 * time.Millisecond},
			`{"t":5,"key":"a","cost":2,"allowed":false,"remaining":0,"retry_after_ms":200,"delay_ms":0,"reset_after_ms":59600}`},
		{"never", Request{T: 5, Key: "a", Cost: 7}, sluice.Decision{Remaining: 3, RetryAfter: sluice.Never},
			`{"t":5,"key":"a","cost":7,"allowed":false,"remaining":3,"retry_after_ms":-1,"delay_ms":0,"reset_after_ms":0}`},
		{"delay rounded up", Request{T: 5, Key: "a", Cost: 1}, sluice.Decision{Allowed: true, Delay: 1001 * time.Microsecond, ResetAfter: 3 * time.Millisecond},
			`{"t":5,"key":"a","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"delay_ms":2,"reset_after_ms":3}`},
		{"sub-millisecond delay", Request{T: 5, Key: "a", Cost: 1}, sluice.Decision{Allowed: true, Delay: time.Microsecond},
			`{"t":5,"key":"a","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"delay_ms":1,"reset_after_ms":0}`},
		{"escaped key", Request{T: 5, Key: `a\b"c` + "\x01é", Cost: 1}, sluice.Decision{Allowed: true},
			`{"t":5,"key":"a\\b\"c\u0001é","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"delay_ms":0,"reset_after_ms":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			jw := NewJSONLWriter(&buf)
			if err := jw.Write(tt.req, tt.d); err != nil {
				t.Fatal(err)
			}
			if err := jw.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want+"\n" {
				t.Errorf("Write(%v, %+v) = %s, want %s", tt.req, tt.d, got, tt.want)
			}
			names, obj := jsonFields(t, buf.String())
			if !slices.Equal(names, jsonlFields) {
				t.Errorf("fields %q, want %q", names, jsonlFields)
			}
			if obj["key"] != tt.req.Key {
				t.Errorf("key decodes to %q, want %q", obj["key"], tt.req.Key)
			}
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `"quoted"`, `back\slash`, "tab\tnew\nline\r", "\x00\x1f\x7f", "ключ 🙂", "bad\xffutf8", "\u2028"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("appendJSONString(%q) = %s: %v", s, b, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if got != want {
			t.Errorf("appendJSONString(%q) decodes to %q, want %q", s, got, want)
		}
	}
}
