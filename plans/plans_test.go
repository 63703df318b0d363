package plans_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/plans"
)

func testSet(t *testing.T) *plans.Set {
	t.Helper()
	s, err := plans.NewSet("free",
		plans.Plan{Name: "free", Policies: []sluice.Policy{sluice.FixedWindow(2, time.Hour).Named("free-hourly")}},
		plans.Plan{Name: "pro", Policies: []sluice.Policy{
			sluice.FixedWindow(5, time.Hour).Named("pro-hourly"),
			sluice.FixedWindow(3, time.Second).Named("pro-second"),
		}},
		plans.Plan{Name: "internal"},
	)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewSetErrors(t *testing.T) {
	ok := sluice.FixedWindow(1, time.Second).Named("a")
	tests := []struct {
		name  string
		def   string
		plans []plans.Plan
		want  string
	}{
		{"no name", "x", []plans.Plan{{}}, "plan 1 has no name"},
		{"twice", "x", []plans.Plan{{Name: "x"}, {Name: "x"}}, `plan "x" is defined twice`},
		{"unnamed policy", "x", []plans.Plan{{Name: "x", Policies: []sluice.Policy{sluice.FixedWindow(1, time.Second)}}}, "policy 1 has no name"},
		{"same policy twice", "x", []plans.Plan{{Name: "x", Policies: []sluice.Policy{ok, ok}}}, `two policies are named "a"`},
		{"invalid policy", "x", []plans.Plan{{Name: "x", Policies: []sluice.Policy{sluice.FixedWindow(0, time.Second).Named("z")}}}, "limit must be at least 1"},
		{"no default", "y", []plans.Plan{{Name: "x"}}, `the default plan "y" is not defined`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plans.NewSet(tt.def, tt.plans...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewSet = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	s := testSet(t)
	for _, tt := range []struct {
		name string
		ok   bool
		want string
	}{{"pro", true, "pro"}, {"internal", true, "internal"}, {"gold", true, "free"}, {"pro", false, "free"}, {"", false, "free"}} {
		if got := s.Resolve(tt.name, tt.ok).Name; got != tt.want {
			t.Errorf("Resolve(%q, %v) = %q, want %q", tt.name, tt.ok, got, tt.want)
		}
	}
	if !s.Resolve("internal", true).Unlimited() || s.Default().Unlimited() {
		t.Error("internal should be unlimited and free not")
	}
	if got := strings.Join(s.Names(), ","); got != "free,pro,internal" {
		t.Errorf("Names = %s", got)
	}
}

// TestLimitsByHeader runs the plans behind the middleware: each client
// gets its plan's limit, counted under its own key, and the response's
// RateLimit-Policy names the policies applied.
func TestLimitsByHeader(t *testing.T) {
	s := testSet(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	m, err := httplimit.New(store, httplimit.PlanLimits(s, httplimit.Header("X-API-Key"), plans.FromHeader("X-Plan")), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(key, plan string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		if plan != "" {
			r.Header.Set("X-Plan", plan)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	tests := []struct {
		name, key, plan string
		admitted        int
		policy          string
	}{
		{"free", "k-free", "free", 2, `"free-hourly";q=2;w=3600`},
		{"pro has two limits; the per-second one binds", "k-pro", "pro", 3, `"pro-hourly";q=5;w=3600, "pro-second";q=3;w=1`},
		{"unknown plan gets the default", "k-gold", "gold", 2, `"free-hourly";q=2;w=3600`},
		{"no plan header gets the default", "k-none", "", 2, `"free-hourly";q=2;w=3600`},
		{"internal is unlimited", "k-int", "internal", 50, ""},
		{"no key is not limited", "", "free", 50, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admitted := 0
			for range 50 {
				w := send(tt.key, tt.plan)
				if w.Code == 200 {
					admitted++
					if got := w.Header().Get("RateLimit-Policy"); admitted == 1 && got != tt.policy {
						t.Errorf("RateLimit-Policy = %q, want %q", got, tt.policy)
					}
				}
			}
			if admitted != tt.admitted {
				t.Errorf("admitted %d of 50, want %d", admitted, tt.admitted)
			}
		})
	}
}

// mapTable is a Table over a map, failing when err is set.
type mapTable struct {
	m     map[string]string
	err   error
	calls int
}

func (t *mapTable) Plan(_ context.Context, key string) (string, bool, error) {
	t.calls++
	if t.err != nil {
		return "", false, t.err
	}
	p, ok := t.m[key]
	return p, ok, nil
}

func TestFromTable(t *testing.T) {
	s := testSet(t)
	tbl := &mapTable{m: map[string]string{"k1": "pro"}}
	var errs []error
	pick := plans.FromTable(tbl, func(err error) { errs = append(errs, err) })
	r := httptest.NewRequest("GET", "/", nil)
	if name, ok := pick(r, "k1"); s.Resolve(name, ok).Name != "pro" {
		t.Errorf("k1 gets %q, %v, want pro", name, ok)
	}
	if name, ok := pick(r, "k2"); s.Resolve(name, ok).Name != "free" {
		t.Errorf("k2 gets %q, %v, want the default", name, ok)
	}
	tbl.err = errors.New("down")
	if name, ok := pick(r, "k1"); ok || s.Resolve(name, ok).Name != "free" {
		t.Errorf("a failing table gives %q, %v, want the default", name, ok)
	}
	if len(errs) != 1 {
		t.Errorf("onError got %v, want one error", errs)
	}
}
