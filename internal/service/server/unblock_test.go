package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

const unblockYAML = `
limits:
  guesses:
    algorithm: sliding_log
    limit: 1
    period: 1h
    penalty: {block_for: 10m, factor: 3, forget_after: 24h}
  plain: {algorithm: fixed_window, limit: 1, period: 1h}
admin: {token: ` + ovToken + `}
`

// TestUnblock checks POST /v1/unblock/{limit}/{key}: a blocked key is let
// in at once (block, offences and count forgotten), under the limit's
// policy and the override in force; a limit without a penalty, an
// unknown limit and a missing token are refused with what to do.
func TestUnblock(t *testing.T) {
	c := teststore.NewClock(start)
	ms := memstore.New(memstore.Options{Now: c.Now})
	reg := prometheus.NewRegistry()
	h, err := New(parse(t, unblockYAML), ms, Options{Registry: reg, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, store: ms, clock: c, auth: "Bearer " + ovToken}
	f.check(`{"limit":"guesses","key":"a"}`)
	rec := f.check(`{"limit":"guesses","key":"a"}`)
	if !strings.Contains(rec.Body.String(), `"retry_after_ms":3600000,"reset_after_ms":3600000,"blocked":true,"offence":true}`) {
		t.Fatalf("second check = %s, want refused (the log's hour beats the block's 10m)", rec.Body)
	}
	c.Advance(time.Hour)
	f.check(`{"limit":"guesses","key":"a"}`)
	// The second offence, remembered: 30 minutes, past the log's second.
	c.Advance(59*time.Minute + 59*time.Second)
	if rec := f.check(`{"limit":"guesses","key":"a"}`); !strings.Contains(rec.Body.String(), `"retry_after_ms":1800000`) {
		t.Fatalf("second offence = %s, want a block of 30m", rec.Body)
	}
	// Explain shows the block and the offences.
	rec = f.do("GET", "/v1/explain?limit=guesses&key=a", "")
	for _, want := range []string{`"blocked_for_ms":1800000`, `"offences":2`, `"penalty":{"block_for":"10m","factor":3,"max_block":"87660h","forget_after":"24h"}`,
		"blocked by the limit's penalty for 30m0s more", "It has 2 offences remembered, forgotten in 24h30m0s without another; the next blocks it for 1h30m0s."} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("explain = %s, want %s in it", rec.Body, want)
		}
	}
	// A flood during the block: refused, counted as refused by a block.
	for range 3 {
		f.check(`{"limit":"guesses","key":"a"}`)
	}
	if got := counter(t, reg, "sluice_penalty_blocks_total", "guesses"); got != 2 {
		t.Errorf("sluice_penalty_blocks_total{guesses} = %v, want 2 offences", got)
	}
	if got := counter(t, reg, "sluice_penalty_blocked_total", "guesses"); got != 3 {
		t.Errorf("sluice_penalty_blocked_total{guesses} = %v, want 3 refused by the block", got)
	}
	rec = f.do("POST", "/v1/unblock/guesses/a", "")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"unblocked":{"key":"a","limit":"guesses","was_blocked":true}}` {
		t.Fatalf("unblock = %d %s, want 200, was_blocked", rec.Code, rec.Body)
	}
	if rec := f.check(`{"limit":"guesses","key":"a"}`); !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Errorf("check after the unblock = %s, want allowed", rec.Body)
	}
	if rec := f.do("POST", "/v1/unblock/guesses/a", ""); !strings.Contains(rec.Body.String(), `"was_blocked":false`) {
		t.Errorf("second unblock = %s, want was_blocked false", rec.Body)
	}
	for _, tc := range []struct {
		path, auth string
		code       int
		says       string
	}{
		{"/v1/unblock/plain/a", "", http.StatusConflict, "has no penalty"},
		{"/v1/unblock/nope/a", "", http.StatusNotFound, `no limit named \"nope\"`},
		{"/v1/unblock/guesses/a", "Bearer wrong-token-0123456789abcdef", http.StatusUnauthorized, ""},
		{"/v1/unblock/guesses", "", http.StatusNotFound, "POST /v1/unblock/{limit}/{key}"},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		rec := f.do("POST", tc.path, "", hdr...)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("POST %s = %d %s, want %d saying %q", tc.path, rec.Code, rec.Body, tc.code, tc.says)
		}
	}
}

// TestStatusShowsBlocks checks that /v1/status lists a denied key's block
// and offences, for a limit with a penalty.
func TestStatusShowsBlocks(t *testing.T) {
	c := teststore.NewClock(start)
	ms := memstore.New(memstore.Options{Now: c.Now})
	h, err := New(parse(t, unblockYAML), ms, Options{Registry: prometheus.NewRegistry(), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, store: ms, clock: c, auth: "Bearer " + ovToken}
	for range 3 {
		f.check(`{"limit":"guesses","key":"mallory"}`)
	}
	rec := f.do("GET", "/v1/status", "")
	want := `{"limit":"guesses","key":"mallory","count":2,"error":0,"blocked_for_ms":600000,"offences":1,"block":"blocked 10m0s, 1 offence"}`
	if !strings.Contains(rec.Body.String(), want) {
		t.Errorf("status = %s, want %s in its top_denied", rec.Body, want)
	}
	if rec := f.do("GET", "/", ""); !strings.Contains(rec.Body.String(), `<td class="block">blocked 10m0s, 1 offence</td>`) {
		t.Errorf("the status page does not show mallory's block:\n%s", rec.Body)
	}
}
