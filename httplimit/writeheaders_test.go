package httplimit

import (
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestWriteHeadersIETF checks the IETF fields of two results, their
// independence (adding a value to one leaves the other as it was), and
// that writing them allocates twice: one string holding both values and
// one slice holding both fields.
func TestWriteHeadersIETF(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	results := []LimitResult{
		{Policy: sluice.TokenBucket(10, time.Second, 10).Named("per-ip"), Applied: true,
			Decision: sluice.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 300 * time.Millisecond}},
		{Policy: sluice.FixedWindow(100, time.Minute).Named("per-key"), Applied: true,
			Decision: sluice.Decision{Allowed: true, Limit: 100, Remaining: 40, ResetAfter: 20 * time.Second}},
	}
	h := http.Header{}
	WriteHeaders(h, HeadersIETF, results, now)
	wantPolicy := `"per-ip";q=10;w=1, "per-key";q=100;w=60`
	if got := h.Values("RateLimit-Policy"); len(got) != 1 || got[0] != wantPolicy {
		t.Errorf("RateLimit-Policy = %q, want [%q]", got, wantPolicy)
	}
	rl := h.Values("RateLimit")
	if len(rl) != 1 || rl[0] == "" {
		t.Fatalf("RateLimit = %q, want one value", rl)
	}
	want := rl[0] // the string, not the slice that holds it
	h.Add("RateLimit-Policy", "extra")
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != want {
		t.Errorf("after adding a policy value, RateLimit = %q, want [%q]", got, want)
	}
	if n := testing.AllocsPerRun(200, func() { WriteHeaders(h, HeadersIETF, results, now) }); n > 2 {
		t.Errorf("WriteHeaders(IETF): %v allocations, want at most 2", n)
	}
}

// TestWriteHeadersSharedPolicy: with the middleware's prebuilt
// RateLimit-Policy value, that value is shared as is, and a response
// allocates only its RateLimit value and a slice of one to hold it (40
// bytes here: a 24-byte string and a 16-byte slice), not the two-value
// slice of the unshared case.
func TestWriteHeadersSharedPolicy(t *testing.T) {
	p := sluice.TokenBucket(10, time.Second, 10).Named("per-ip")
	results := []LimitResult{{Policy: p, Applied: true,
		Decision: sluice.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 300 * time.Millisecond}}}
	pf := []string{string(AppendPolicy(nil, p))}[:1:1]
	h := http.Header{}
	write := func() { writeHeaders(h, HeadersIETF, results, pf, time.Now) }
	write()
	if got := h[hdrPolicy]; len(got) != 1 || &got[0] != &pf[0] {
		t.Errorf("RateLimit-Policy = %q, want the shared value %q", got, pf)
	}
	if got, want := h.Values("RateLimit"), `"per-ip";r=7;t=1`; len(got) != 1 || got[0] != want {
		t.Errorf("RateLimit = %q, want [%q]", got, want)
	}
	const runs = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		write()
	}
	runtime.ReadMemStats(&after)
	if n, b := (after.Mallocs-before.Mallocs)/runs, (after.TotalAlloc-before.TotalAlloc)/runs; n > 2 || b > 40 {
		t.Errorf("writeHeaders with the shared field: %d allocations of %d bytes per response, want at most 2 of 40", n, b)
	}
}
