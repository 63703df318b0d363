package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func (f *fixture) status(t *testing.T) *statusJSON {
	t.Helper()
	rec := f.do("GET", "/v1/status", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/status = %d %s", rec.Code, rec.Body)
	}
	var s statusJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func findLimit(t *testing.T, s *statusJSON, name string) limitJSON {
	t.Helper()
	for _, l := range s.Limits {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no limit %q in the status", name)
	return limitJSON{}
}

// TestStatus makes decisions over two seconds and checks the per-second
// counts, the last-minute sums and the denied keys /v1/status reports.
func TestStatus(t *testing.T) {
	f := newFixture(t, testYAML)
	for range 3 {
		f.check(`{"limit":"tiny","key":"eve"}`) // 2 allowed, 1 denied
	}
	f.check(`{"limit":"dry","key":"bob"}`) // allowed
	f.check(`{"limit":"dry","key":"bob"}`) // shadow denied
	f.clock.Advance(time.Second)
	f.check(`{"limit":"tiny","key":"eve"}`) // denied
	f.check(`{"limit":"tiny","key":"ann"}`) // allowed
	// Through a rule too: tiny by IP, in the same second.
	if rec := f.do("GET", "/v1/forward-auth?rule=login", ""); rec.Code != http.StatusOK {
		t.Fatalf("forward-auth = %d", rec.Code)
	}
	f.clock.Advance(time.Second)

	s := f.status(t)
	if s.End != start.Unix()+1 || s.Seconds != statusSeconds || s.Now != start.Add(2*time.Second).UnixMilli() {
		t.Errorf("end %d, seconds %d, now %d; want %d, %d, %d", s.End, s.Seconds, s.Now, start.Unix()+1, statusSeconds, start.Add(2*time.Second).UnixMilli())
	}
	var names []string
	for _, l := range s.Limits {
		names = append(names, l.Name)
	}
	if want := []string{"api-key", "dry", "leaky", "per-ip", "tiny"}; !slices.Equal(names, want) {
		t.Errorf("limits %v, want %v", names, want)
	}
	tiny := findLimit(t, s, "tiny")
	tail := func(o string) []uint64 { return tiny.Series[o][statusSeconds-2:] }
	if got := tail("allowed"); !slices.Equal(got, []uint64{2, 2}) {
		t.Errorf("tiny allowed in the last two seconds = %v, want [2 2]", got)
	}
	if got := tail("denied"); !slices.Equal(got, []uint64{1, 1}) {
		t.Errorf("tiny denied in the last two seconds = %v, want [1 1]", got)
	}
	if tiny.LastMinute["allowed"] != 4 || tiny.LastMinute["denied"] != 2 || tiny.LastMinute["shadow_denied"] != 0 {
		t.Errorf("tiny last minute = %v, want 4 allowed, 2 denied", tiny.LastMinute)
	}
	if tiny.Algorithm != "fixed_window" || tiny.Limit != 2 || tiny.Period != "1m" || tiny.PeriodMS != 60000 || tiny.Burst != 0 {
		t.Errorf("tiny = %+v", tiny)
	}
	dry := findLimit(t, s, "dry")
	if dry.LastMinute["allowed"] != 1 || dry.LastMinute["shadow_denied"] != 1 || !dry.Shadow {
		t.Errorf("dry = %+v, want one allowed, one shadow denied, shadow", dry)
	}
	if l := findLimit(t, s, "leaky"); l.Burst != 5 {
		t.Errorf("leaky burst = %d, want 5", l.Burst)
	}
	want := []deniedJSON{{Limit: "tiny", Key: "eve", Count: 2}, {Limit: "dry", Key: "bob", Count: 1}}
	if !slices.Equal(s.Denied, want) {
		t.Errorf("top denied = %+v, want %+v", s.Denied, want)
	}
	if s.Store.Backend != "memory" || s.Store.Status != "in-process" || s.Store.Keys == nil || *s.Store.Keys != 4 || s.Store.Circuit != "" {
		t.Errorf("store = %+v, want memory, in-process, 4 keys", s.Store)
	}
}

// TestStatusRing checks that a second's slot is reused five minutes later
// and that the counts of seconds long gone are not reported.
func TestStatusRing(t *testing.T) {
	f := newFixture(t, testYAML)
	f.check(`{"limit":"api-key","key":"k"}`)
	f.clock.Advance(statusSeconds * time.Second)
	f.check(`{"limit":"api-key","key":"k"}`)
	f.check(`{"limit":"api-key","key":"k"}`)
	f.clock.Advance(time.Second)
	s := f.status(t)
	got := findLimit(t, s, "api-key").Series["allowed"]
	var sum uint64
	for _, v := range got {
		sum += v
	}
	if got[statusSeconds-1] != 2 || sum != 2 {
		t.Errorf("allowed series ends with %d and sums to %d, want 2 and 2 (the decision of 300 s ago is gone)", got[statusSeconds-1], sum)
	}
}

// TestStatusReload checks that a limit removed by a reload leaves the
// status, and its counts with it.
func TestStatusReload(t *testing.T) {
	f := newFixture(t, testYAML)
	f.check(`{"limit":"api-key","key":"k"}`)
	if err := f.h.Reload(parse(t, "limits:\n  other: {algorithm: gcra, limit: 1, period: 1s}\n")); err != nil {
		t.Fatal(err)
	}
	s := f.status(t)
	if len(s.Limits) != 1 || s.Limits[0].Name != "other" {
		t.Errorf("limits after reload = %+v, want only other", s.Limits)
	}
	if _, ok := (*f.h.board.rings.Load())["api-key"]; ok {
		t.Error("the board still keeps api-key's counts after it was removed")
	}
}

func TestStatusPageRender(t *testing.T) {
	f := newFixture(t, testYAML)
	for range 3 {
		f.check(`{"limit":"tiny","key":"<script>alert(1)</script>"}`)
	}
	f.clock.Advance(time.Second)
	rec := f.do("GET", "/", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`<article class="card" data-limit="tiny">`,
		`<p class="params">2 per 1m</p>`,
		`<p class="params">10 per 1s, burst 5</p>`, // leaky
		`&lt;script&gt;alert(1)&lt;/script&gt;`,    // the denied key, escaped
		`data-total="3"`,
		`<dd data-minute="denied">1</dd>`,
		`id="ratio">33.3%</div>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>alert(1)") {
		t.Error("the page holds a key unescaped")
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page refers to another site; it must be self-contained")
	}
}

func TestLinePath(t *testing.T) {
	if got := linePath([]uint64{0, 0, 0}, 1); got != "" {
		t.Errorf("linePath(zeros) = %q, want empty", got)
	}
	if got, want := linePath([]uint64{0, 1, 2, 5}, niceMax(5)), "M0,100L1,80L2,60L3,0"; got != want {
		t.Errorf("linePath = %q, want %q", got, want)
	}
	if got, want := linePath([]uint64{1, 2}, 3), "M0,66.7L1,33.3"; got != want {
		t.Errorf("linePath = %q, want %q", got, want)
	}
	for _, tt := range []struct{ in, want uint64 }{{0, 1}, {1, 1}, {2, 2}, {3, 5}, {6, 10}, {11, 20}, {999, 1000}, {1001, 2000}} {
		if got := niceMax(tt.in); got != tt.want {
			t.Errorf("niceMax(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestBoardConcurrent records decisions from several goroutines while
// others read the board, and checks that no count is lost (run with -race).
func TestBoardConcurrent(t *testing.T) {
	now := start
	b := newBoard(func() time.Time { return now })
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				b.record(now, "l", fmt.Sprint("k", (w*each+i)%50), (w+i)%numOutcomes)
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				b.counts("l", now.Unix(), 10)
				b.denied.top(5, now.Unix()/60)
				b.forget([]string{"l"})
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	var total uint64
	c := b.counts("l", now.Unix(), 1)
	for o := range c {
		total += c[o][0]
	}
	if total != writers*each {
		t.Errorf("the board counted %d decisions, want %d", total, writers*each)
	}
	var denied uint64
	for _, e := range b.denied.top(sketchCounters, now.Unix()/60) {
		denied += e.count
	}
	if want := uint64(c[iDenied][0] + c[iShadowDenied][0]); denied != want {
		t.Errorf("the sketch counted %d denials, want %d (50 keys fit its counters exactly)", denied, want)
	}
}
