package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memstore"
)

// usageBoard is what a test's handler reports of each request: the
// usage it says the request cost (X-Id -> units), for a Limit's Usage.
type usageBoard struct {
	mu    sync.Mutex
	units map[string]int64
}

// handler answers every request and reports the units its X-Use field
// asks for (none without one), then runs after (if set).
func (b *usageBoard) handler(after func(r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Use"); u != "" {
			n, _ := strconv.ParseInt(u, 10, 64)
			b.mu.Lock()
			b.units[r.Header.Get("X-Id")] = n
			b.mu.Unlock()
		}
		w.Write([]byte("ok"))
		if after != nil {
			after(r)
		}
	})
}

func (b *usageBoard) usage(r *http.Request) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.units[r.Header.Get("X-Id")]
	return n, ok
}

type usageFixture struct {
	store *memstore.Store
	clock *teststore.Clock
	board *usageBoard
	h     http.Handler
	p     sluice.Policy
	// settlements are what OnSettle received.
	settlements []Settlement
	n           int
}

// newUsageFixture serves a fixed window of 100 tokens a minute per
// X-Key, whose cost (estimate) is settled with the usage the handler
// reports.
func newUsageFixture(t *testing.T, estimate int64, settleWithin time.Duration, after func(r *http.Request)) *usageFixture {
	t.Helper()
	f := &usageFixture{clock: teststore.NewClock(time.Unix(1_700_000_040, 0)), board: &usageBoard{units: map[string]int64{}}}
	f.store = memstore.New(memstore.Options{Now: f.clock.Now})
	f.p = sluice.FixedWindow(100, time.Minute).Named("tokens")
	mw, err := New(f.store, []Limit{{
		Policy: f.p, Key: Header("X-Key"), Cost: estimate, Usage: f.board.usage, SettleWithin: settleWithin,
	}}, &Options{OnSettle: func(s *Settlement) {
		c := *s
		c.Results = append([]LimitResult(nil), s.Results...)
		c.Request = nil
		f.settlements = append(f.settlements, c)
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.h = mw.Handler(f.board.handler(after))
	return f
}

// do sends a request of key that reports use units ("" for none), and
// returns its status.
func (f *usageFixture) do(key, use string) int {
	f.n++
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-Key", key)
	r.Header.Set("X-Id", strconv.Itoa(f.n))
	if use != "" {
		r.Header.Set("X-Use", use)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Code
}

// remaining peeks how many units key has left.
func (f *usageFixture) remaining(t *testing.T, key string) int64 {
	t.Helper()
	d, err := f.store.Peek(context.Background(), time.Time{}, sluice.Request{Policy: &f.p, Key: key, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestUsageBudget: with an estimate of 0, requests are admitted while the
// budget has a unit left and are charged what they report; the request
// that overspends it is charged in full, and the next is refused.
func TestUsageBudget(t *testing.T) {
	f := newUsageFixture(t, 0, 0, nil)
	steps := []struct {
		use       string
		code      int
		remaining int64
	}{
		{"30", 200, 70},
		{"60", 200, 10},
		{"25", 200, 0}, // 15 beyond the budget: admitted, it was not spent yet
		{"1", 429, 0},
	}
	for i, s := range steps {
		if code := f.do("k", s.use); code != s.code {
			t.Fatalf("step %d: status %d, want %d", i, code, s.code)
		}
		if got := f.remaining(t, "k"); got != s.remaining {
			t.Fatalf("step %d: remaining %d, want %d", i, got, s.remaining)
		}
	}
	if code := f.do("other", "5"); code != 200 {
		t.Errorf("another key: status %d, want 200", code)
	}
	// The debt is repaid when the window turns.
	f.clock.Advance(time.Minute)
	if code := f.do("k", "1"); code != 200 {
		t.Errorf("next window: status %d, want 200", code)
	}
	if len(f.settlements) != 5 {
		t.Fatalf("OnSettle called %d times, want 5 (not for the refusal)", len(f.settlements))
	}
	r := f.settlements[2].Results[0]
	if !f.settlements[2].Settled || !r.Settles || !r.Reported || r.Usage != 25 || r.Cost != 0 {
		t.Errorf("third settlement = %+v, want settled, usage 25 of an estimate of 0", f.settlements[2])
	}
}

// TestUsageRefundsAndStands: usage below the estimate gives the rest back;
// no usage keeps the estimate.
func TestUsageRefundsAndStands(t *testing.T) {
	f := newUsageFixture(t, 40, 0, nil)
	f.do("k", "10")
	if got := f.remaining(t, "k"); got != 90 {
		t.Errorf("after an estimate of 40 used 10: remaining %d, want 90", got)
	}
	f.do("k", "") // reports nothing
	if got := f.remaining(t, "k"); got != 50 {
		t.Errorf("after an estimate of 40 with no usage: remaining %d, want 50", got)
	}
	if s := f.settlements[1]; s.Results[0].Reported || !s.Settled {
		t.Errorf("the settlement without usage = %+v, want not reported, lease settled", s)
	}
	f.do("k", "50") // 10 beyond the estimate: debited
	if got := f.remaining(t, "k"); got != 0 {
		t.Errorf("after an estimate of 40 used 50: remaining %d, want 0", got)
	}
}

// TestUsageAfterSettleWithin: usage that comes after SettleWithin settles
// nothing; the estimate stays, and OnSettle says so.
func TestUsageAfterSettleWithin(t *testing.T) {
	var f *usageFixture
	f = newUsageFixture(t, 40, time.Second, func(*http.Request) { f.clock.Advance(2 * time.Second) })
	f.do("k", "5")
	if got := f.remaining(t, "k"); got != 60 {
		t.Errorf("remaining %d, want 60: the estimate stays", got)
	}
	if s := f.settlements[0]; s.Settled || s.Err != nil || !s.Results[0].Reported {
		t.Errorf("settlement = %+v, want reported but not settled", s)
	}
}

// TestUsageAfterPanic: a handler that aborts (as the reverse proxy does
// when the client goes away mid-response) is settled all the same.
func TestUsageAfterPanic(t *testing.T) {
	f := newUsageFixture(t, 40, 0, func(*http.Request) { panic(http.ErrAbortHandler) })
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler to go on", p)
			}
		}()
		f.do("k", "7")
	}()
	if got := f.remaining(t, "k"); got != 93 {
		t.Errorf("remaining %d, want 93", got)
	}
}

// TestUsageCheck: Check charges the estimate, which stays (it never sees
// the response), and answers as for any limit.
func TestUsageCheck(t *testing.T) {
	store := memstore.New(memstore.Options{})
	p := sluice.FixedWindow(100, time.Minute).Named("tokens")
	mw, err := New(store, []Limit{{Policy: p, Key: Header("X-Key"), Cost: 30, Usage: func(*http.Request) (int64, bool) { return 1, true }}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Key", "k")
	if w := httptest.NewRecorder(); !mw.Check(w, r) {
		t.Fatalf("Check refused: %d %s", w.Code, w.Body)
	}
	d, _ := store.Peek(context.Background(), time.Time{}, sluice.Request{Policy: &p, Key: "k"})
	if d.Remaining != 70 {
		t.Errorf("remaining %d after Check, want 70", d.Remaining)
	}
}

func TestUsageNewErrors(t *testing.T) {
	p := sluice.FixedWindow(100, time.Minute).Named("tokens")
	use := func(*http.Request) (int64, bool) { return 0, false }
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{Limit{Policy: p, Usage: use, Shadow: true}, "Usage cannot be combined with Shadow"},
		{Limit{Policy: p, Usage: use, ChargeOn: func(int) bool { return true }}, "Usage cannot be combined with ChargeOn"},
		{Limit{Policy: sluice.Concurrency(2, time.Minute).Named("c"), Usage: use}, "Usage cannot be combined with a concurrency policy"},
		{Limit{Policy: p, SettleWithin: time.Minute}, "SettleWithin needs Usage"},
		{Limit{Policy: p, Usage: use, SettleWithin: -1}, "SettleWithin must not be negative"},
		{Limit{Policy: p, Usage: use, Cost: 101}, "exceeds the policy's capacity"},
	} {
		if _, err := New(memstore.New(memstore.Options{}), []Limit{c.l}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", c.l, err, c.want)
		}
	}
}
