package httplimit

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/plans"
)

// PlanLimits returns limits that apply to each request the policies of
// its plan, counted under the client's key: the plan is the one pick
// names for the request and key (the set's default plan when it names
// none, or an unknown one). A request without a key is not counted by
// them; a request on an unlimited plan is not limited by them.
//
// The result has one limit per policy of the set's largest plan; the i-th
// applies the i-th policy of the request's plan, when it has one. Give
// New these limits, with any others (per IP, say) after them.
func PlanLimits(set *plans.Set, key KeyFunc, pick plans.Picker) []Limit {
	out := make([]Limit, set.Slots())
	for i := range out {
		out[i] = Limit{
			// The name of the slot, shown only if a policy had none.
			Policy: sluice.Policy{Name: fmt.Sprintf("plan-%d", i+1)},
			Key:    key,
			PolicyFunc: func(r *http.Request, k string) (sluice.Policy, bool) {
				return set.Policy(i, pick, r, k)
			},
		}
	}
	return out
}
