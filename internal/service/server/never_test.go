package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/teststore"
)

// testNever sends the requests that can never be admitted to /v1/check:
// one check whose cost exceeds the limit's capacity, and two checks on the
// same limit and key whose summed cost does (each alone would fit). Both
// are refusals (200, allowed false, retry_after_ms -1), never errors, and
// nothing is charged.
func testNever(t *testing.T, f *fixture) {
	t.Helper()
	tests := []struct{ name, body, want string }{
		{"single", `{"limit":"tiny","key":"a","cost":3}`,
			`{"allowed":false,"limit":2,"remaining":2,"retry_after_ms":-1,`},
		{"summed", `{"checks":[{"limit":"tiny","key":"a","cost":2},{"limit":"tiny","key":"a","cost":2}]}`,
			`{"allowed":false,"retry_after_ms":-1,"results":[{"allowed":false,"limit":2,"remaining":2,"retry_after_ms":-1,`},
		{"summed beside another limit", `{"checks":[{"limit":"per-ip","key":"a"},{"limit":"tiny","key":"a","cost":2},{"limit":"tiny","key":"a"}]}`,
			`{"allowed":false,"retry_after_ms":-1,"results":[{"allowed":true,"limit":100,"remaining":100,`},
	}
	for _, tt := range tests {
		rec := f.check(tt.body)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusOK || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: check(%s) = %d %s, want 200 %s", tt.name, tt.body, rec.Code, got, tt.want)
		}
		if got := rec.Header().Get("Retry-After"); got != "" {
			t.Errorf("%s: Retry-After = %q, want none (no retry can pass)", tt.name, got)
		}
	}
	// Nothing was charged: the window still holds both units.
	want := `{"allowed":true,"limit":2,"remaining":0,"retry_after_ms":0,`
	if got := f.check(`{"limit":"tiny","key":"a","cost":2}`).Body.String(); !strings.HasPrefix(got, want) {
		t.Errorf("after the refusals: %s, want %s...", got, want)
	}
	if got := f.check(`{"limit":"per-ip","key":"a"}`).Body.String(); !strings.Contains(got, `"remaining":99,`) {
		t.Errorf("per-ip after the refusals: %s, want 99 remaining", got)
	}
}

func TestCheckNever(t *testing.T) { testNever(t, newFixture(t, testYAML)) }

func TestCheckNeverRedis(t *testing.T) {
	h, err := New(parse(t, testYAML), teststore.Redis(t), Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	testNever(t, &fixture{h: h})
}
