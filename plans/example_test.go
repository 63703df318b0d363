package plans_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/plans"
)

// Each client gets the limits of its plan, named by a header that an
// authenticating gateway sets; unknown plans get the default, and the
// RateLimit-Policy field names what applied.
func Example() {
	set, err := plans.NewSet("free",
		plans.Plan{Name: "free", Policies: []sluice.Policy{sluice.FixedWindow(1, time.Hour).Named("free-hourly")}},
		plans.Plan{Name: "pro", Policies: []sluice.Policy{sluice.FixedWindow(100, time.Hour).Named("pro-hourly")}},
		plans.Plan{Name: "internal"}, // unlimited
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := httplimit.New(memstore.New(memstore.Options{}),
		httplimit.PlanLimits(set, httplimit.Header("X-API-Key"), plans.FromHeader("X-Plan")), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, c := range []struct{ key, plan string }{
		{"alice", "free"}, {"alice", "free"}, {"bob", "pro"}, {"carol", "gold"}, {"dave", "internal"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", c.key)
		r.Header.Set("X-Plan", c.plan)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-5s %-8s %d %s\n", c.key, c.plan, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// alice free     200 "free-hourly";q=1;w=3600
	// alice free     429 "free-hourly";q=1;w=3600
	// bob   pro      200 "pro-hourly";q=100;w=3600
	// carol gold     200 "free-hourly";q=1;w=3600
	// dave  internal 200
}
