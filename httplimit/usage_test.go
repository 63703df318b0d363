package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestUsage runs a token budget of 100 per hour, checked at an estimate
// of 0 and settled by what the handler reports, beside a request rate: a
// usage that goes past the budget is charged in full, and the next
// request is refused with 429 and a Retry-After, charging the rate
// nothing; a handler that reports nothing keeps the estimate; a handler
// that panics is settled too.
func TestUsage(t *testing.T) {
	st := memstore.New(memstore.Options{})
	tokens := sluice.FixedWindow(100, time.Hour).Named("tokens")
	calls := sluice.FixedWindow(50, time.Hour).Named("calls")
	key := func(*http.Request) (string, bool) { return "client", true }
	m := mustNew(t, st, []Limit{
		{Policy: calls, Key: key},
		{Policy: tokens, Key: key, Usage: true},
	}, nil)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch used := r.URL.Query().Get("used"); used {
		case "":
		case "panic":
			ReportUsage(r.Context(), 5)
			panic(http.ErrAbortHandler)
		default:
			n, _ := strconv.ParseInt(used, 10, 64)
			ReportUsage(r.Context(), n/2)
			ReportUsage(r.Context(), n-n/2) // in parts
		}
	})
	h := m.Handler(inner)
	serve := func(query string) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		func() {
			defer func() { recover() }()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/?"+query, nil))
		}()
		return w
	}
	state := func(p sluice.Policy) sluice.Decision {
		t.Helper()
		d, err := st.Peek(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: "client", Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if w := serve("used=60"); w.Code != 200 {
		t.Fatalf("first request = %d, want 200", w.Code)
	}
	if d := state(tokens); d.Remaining != 40 {
		t.Fatalf("after a usage of 60: %d tokens remaining, want 40", d.Remaining)
	}
	if w := serve("used=60"); w.Code != 200 {
		t.Fatalf("second request, 40 tokens left = %d, want 200", w.Code)
	}
	if d := state(tokens); d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 120 of 100 tokens: %+v, want spent", d)
	}
	w := serve("used=1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "tokens") {
		t.Fatalf("third request, budget spent = %d %q %s, want 429 naming tokens with a Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if d := state(calls); d.Remaining != 48 {
		t.Fatalf("calls remaining = %d, want 48: the refused request charged nothing", d.Remaining)
	}
	// The estimate stands when the handler reports nothing, and a panic
	// still settles.
	st2 := memstore.New(memstore.Options{})
	m2 := mustNew(t, st2, []Limit{{Policy: tokens, Key: key, Cost: 10, Usage: true}}, nil)
	h = m2.Handler(inner)
	st = st2
	serve("")
	if d := state(tokens); d.Remaining != 90 {
		t.Fatalf("a handler that reports nothing: %d remaining, want 90 (the estimate)", d.Remaining)
	}
	serve("used=panic")
	if d := state(tokens); d.Remaining != 85 {
		t.Fatalf("a handler that reported 5 and panicked: %d remaining, want 85", d.Remaining)
	}
}

func TestUsageInvalid(t *testing.T) {
	st := memstore.New(memstore.Options{})
	tokens := sluice.FixedWindow(100, time.Hour)
	for _, tt := range []struct {
		name string
		l    Limit
		want string
	}{
		{"with ChargeOn", Limit{Policy: tokens, Usage: true, ChargeOn: func(int) bool { return true }}, "cannot be combined"},
		{"with Shadow", Limit{Policy: tokens, Usage: true, Shadow: true}, "cannot be combined"},
		{"concurrency", Limit{Policy: sluice.Concurrency(3, time.Minute), Usage: true}, "needs a rate policy"},
		{"negative estimate", Limit{Policy: tokens, Usage: true, Cost: -1}, "must not be negative"},
	} {
		if _, err := New(st, []Limit{tt.l}, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error = %v, want one saying %q", tt.name, err, tt.want)
		}
	}
}
