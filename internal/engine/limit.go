package engine

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// Limit is what CheckLimit checks of one limit given to a front door's
// constructor (httplimit.New, httplimit.NewTransport, grpclimit.New).
type Limit struct {
	// Policy is the limit's policy, with its name set.
	Policy sluice.Policy
	// Cost is the limit's fixed cost as given (0 means 1).
	Cost int64
	// VariablePolicy and VariableCost report a policy or a cost chosen
	// per request (a PolicyFunc, a CostFunc): the policy is then not
	// validated here, and the cost is not compared with its capacity.
	VariablePolicy, VariableCost bool
	// Mode is how the door decides the limit: Shadow for a dry run,
	// Deferred for one charged after the response.
	Mode Mode
}

// CheckLimit checks limit i of a front door: its name is not that of an
// earlier limit (names holds those, and gets this one's), its policy is
// valid, a concurrency policy is enforced (see Leases), its cost is not
// negative and, when both are fixed, fits the policy's capacity (else no
// request could ever pass). Errors start with where; unit names what the
// door decides ("request", "call").
func CheckLimit(where, unit string, l Limit, i int, names map[string]int) error {
	p := l.Policy
	if j, dup := names[p.Name]; dup {
		return fmt.Errorf("%s: name already used by limit %d", where, j+1)
	}
	names[p.Name] = i
	if !l.VariablePolicy {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	if err := Leases(p, l.Mode, unit); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if l.Cost < 0 {
		return fmt.Errorf("%s: cost must not be negative, got %d", where, l.Cost)
	}
	if !l.VariablePolicy && !l.VariableCost && max(l.Cost, 1) > p.Capacity() {
		return fmt.Errorf("%s: cost %d exceeds the policy's capacity %d: no %s could pass", where, l.Cost, p.Capacity(), unit)
	}
	return nil
}

// Leases returns an error when a check of policy p in mode could not be
// decided: a concurrency policy holds a lease while the request runs,
// which only an enforced check takes and hands to its door to release. A
// dry run has nothing to hold, and a limit charged after the response
// would hold nothing while the request runs. unit names what the door
// decides ("request", "call").
func Leases(p sluice.Policy, mode Mode, unit string) error {
	if p.Algorithm != sluice.ConcurrencyAlgorithm {
		return nil
	}
	switch mode {
	case Shadow:
		return fmt.Errorf("%w: a concurrency policy cannot be a dry run: it holds a lease while the %s runs, and a dry run holds nothing", sluice.ErrNotSupported, unit)
	case Deferred:
		return fmt.Errorf("%w: a concurrency policy cannot be charged after the response: it holds a lease while the %s runs", sluice.ErrNotSupported, unit)
	}
	return nil
}
