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
}

// CheckLimit checks limit i of a front door: its name is not that of an
// earlier limit (names holds those, and gets this one's), its policy is
// valid, its cost is not negative and, when both are fixed, fits the
// policy's capacity (else no request could ever pass). Errors start with
// where; unit names what the door decides ("request", "call").
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
	if p.Algorithm == sluice.ConcurrencyAlgorithm {
		return fmt.Errorf("%s: %w: a concurrency policy holds a lease while the %s runs, and this door releases none; "+
			"use a sluice.Limiter and Release the Decision's Lease when the %s ends", where, sluice.ErrNotSupported, unit, unit)
	}
	if l.Cost < 0 {
		return fmt.Errorf("%s: cost must not be negative, got %d", where, l.Cost)
	}
	if !l.VariablePolicy && !l.VariableCost && max(l.Cost, 1) > p.Capacity() {
		return fmt.Errorf("%s: cost %d exceeds the policy's capacity %d: no %s could pass", where, l.Cost, p.Capacity(), unit)
	}
	return nil
}
