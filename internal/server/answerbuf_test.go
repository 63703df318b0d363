package server

import (
	"encoding/json"
	"testing"
)

// TestCheckAnswerBuffers checks the answers of /v1/check written from
// pooled buffers: a long answer (several checks) then a short one (one
// check) then the long one again, each whole and valid, and an answer
// already written unchanged by the next request.
func TestCheckAnswerBuffers(t *testing.T) {
	f := newFixture(t, testYAML)
	multi := `{"checks":[{"limit":"api-key","key":"a"},{"limit":"per-ip","key":"a"},{"limit":"leaky","key":"a"}]}`
	first := f.check(multi)
	firstBody := first.Body.String()
	single := f.check(`{"limit":"api-key","key":"k1","cost":1}`)
	want := `{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100}` + "\n"
	if got := single.Body.String(); got != want {
		t.Errorf("single check after several: body = %s, want %s", got, want)
	}
	again := f.check(multi)
	for _, rec := range []struct {
		name, body string
	}{{"first", first.Body.String()}, {"again", again.Body.String()}} {
		var v struct {
			Allowed *bool            `json:"allowed"`
			Results []map[string]any `json:"results"`
		}
		if err := json.Unmarshal([]byte(rec.body), &v); err != nil || v.Allowed == nil || len(v.Results) != 3 {
			t.Errorf("%s answer to several checks = %s (%v), want one decision with 3 results", rec.name, rec.body, err)
		}
	}
	if got := first.Body.String(); got != firstBody {
		t.Errorf("the first answer changed after later requests: %s, was %s", got, firstBody)
	}
}
