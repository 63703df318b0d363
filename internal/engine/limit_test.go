package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestCheckLimitConcurrency(t *testing.T) {
	conc := sluice.Concurrency(2, time.Minute).Named("c")
	for _, tt := range []struct {
		name string
		l    Limit
		want string // "" for no error
	}{
		{"enforced", Limit{Policy: conc}, ""},
		{"enforced cost 2", Limit{Policy: conc, Cost: 2}, ""},
		{"cost over the limit", Limit{Policy: conc, Cost: 3}, "exceeds the policy's capacity"},
		{"dry run", Limit{Policy: conc, Mode: Shadow}, "cannot be a dry run"},
		{"charged after the response", Limit{Policy: conc, Mode: Deferred}, "cannot be charged after the response"},
		{"rate dry run", Limit{Policy: sluice.GCRA(1, time.Second, 0), Mode: Shadow}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLimit("door", "request", tt.l, 0, map[string]int{})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckLimit = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckLimit = %v, want an error containing %q", err, tt.want)
			case tt.want != "" && tt.l.Mode != Enforced && !errors.Is(err, sluice.ErrNotSupported):
				t.Errorf("CheckLimit = %v, want it to wrap ErrNotSupported", err)
			}
		})
	}
}
