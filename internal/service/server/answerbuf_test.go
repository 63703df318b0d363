package server

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"
)

// TestCheckAnswerBuffers checks the answers of /v1/check written from
// pooled buffers: a long answer (several checks) then a short one (one
// check) then the long one again, each whole and valid; then the same from
// several goroutines at once, where a buffer put back in the pool before
// its answer was written would hand one answer's bytes to another request
// (and the race detector, under make test, would see it).
func TestCheckAnswerBuffers(t *testing.T) {
	f := newFixture(t, testYAML)
	multi := `{"checks":[{"limit":"api-key","key":"a"},{"limit":"per-ip","key":"a"},{"limit":"leaky","key":"a"}]}`
	first := f.check(multi)
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

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				key := strconv.Itoa(g) + "-" + strconv.Itoa(i)
				if got := f.check(`{"limit":"api-key","key":"` + key + `","cost":1}`).Body.String(); got != want {
					t.Errorf("goroutine %d, request %d: single check = %s, want %s", g, i, got, want)
					return
				}
				body := f.check(`{"checks":[{"limit":"api-key","key":"m` + key + `"},{"limit":"per-ip","key":"m` + key + `"},{"limit":"leaky","key":"m` + key + `"}]}`).Body.Bytes()
				var v struct {
					Allowed *bool            `json:"allowed"`
					Results []map[string]any `json:"results"`
				}
				if err := json.Unmarshal(body, &v); err != nil || v.Allowed == nil || !*v.Allowed || len(v.Results) != 3 {
					t.Errorf("goroutine %d, request %d: several checks = %s (%v), want one admission with 3 results", g, i, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
