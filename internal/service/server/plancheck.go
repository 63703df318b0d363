package server

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/plans"
)

// planCheck validates a /v1/check body that checks the limits of a plan:
//
//	{"plan": "pro", "key": "k-1234", "cost": 1}
//	{"plan_table": "customers", "key": "k-1234"}
//
// The first names the plan; the second looks the key up in a plan table
// (its default plan for a key it does not hold). Every limit of the plan is
// charged to the key, all or nothing; the answer names the plan and each
// result its policy. An unlimited plan has no results and is allowed.
func (h *Handler) planCheck(r *http.Request, st *state, body *checkBody) ([]item, bool, string, *requestError) {
	switch {
	case body.Checks != nil || body.Limit != nil:
		return nil, true, "", badRequest(`"plan" and "plan_table" cannot be combined with "limit" or "checks"`)
	case body.Plan != nil && body.PlanTable != nil:
		return nil, true, "", badRequest(`"plan" and "plan_table" cannot be combined; give one`)
	case body.Key == nil:
		return nil, true, "", badRequest("key is missing: the client whose plan's limits are checked")
	case *body.Key == "":
		return nil, true, "", badRequest("key is empty")
	}
	key := *body.Key
	cost := int64(1)
	if body.Cost != nil {
		if *body.Cost < 0 {
			return nil, true, "", badRequest("cost must be 0 or more, got %d", *body.Cost)
		}
		cost = *body.Cost
	}
	var name string
	if body.Plan != nil {
		name = *body.Plan
	} else {
		t, ok := st.tables[*body.PlanTable]
		if !ok {
			return nil, true, "", &requestError{http.StatusNotFound, fmt.Sprintf("plan_table: no plan table named %q", *body.PlanTable)}
		}
		p, found := plans.Lookup(r.Context(), t.table, key, t.failed)
		switch {
		case found:
			name = p
		case t.cfg.Default != "":
			name = t.cfg.Default
		default:
			h.logger.LogAttrs(r.Context(), slog.LevelDebug, "check: key not in the plan table", slog.String("table", t.cfg.Name))
			return nil, true, "", &requestError{http.StatusNotFound, fmt.Sprintf("plan_table %q holds no plan for this key and has no default", t.cfg.Name)}
		}
	}
	cp, ok := st.cfg.Plan(name)
	if !ok {
		return nil, true, "", &requestError{http.StatusNotFound, fmt.Sprintf("plan: no plan named %q", name)}
	}
	items := make([]item, 0, len(cp.Limits))
	for _, ln := range cp.Limits {
		l, ok := st.cfg.Limit(ln)
		if !ok {
			return nil, true, "", &requestError{http.StatusInternalServerError, fmt.Sprintf("plan %q names no limit %q", name, ln)}
		}
		it := item{limit: l, key: key, cost: cost, named: true}
		if u, ok := cp.Usage[ln]; ok {
			// A budget charged by usage: its own estimate, settled by
			// the usage /v1/release reports.
			it.cost, it.settle = u.Cost, u.SettleWithin
		}
		items = append(items, it)
	}
	return items, true, name, nil
}
