package sluicetest_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// A seed names a trace for good: the same seed and config give the same
// steps in every Go release, so a failing seed can be replayed.
func ExampleRandomTrace() {
	tr := sluicetest.RandomTrace(42, sluicetest.TraceConfig{
		Steps:    4,
		Keys:     2,
		MaxGap:   time.Minute,
		Policies: []sluice.Policy{sluice.TokenBucket(10, time.Second, 5).Named("api"), sluice.FixedWindow(100, time.Hour).Named("hourly")},
	})
	for _, st := range tr.Steps {
		fmt.Println(st)
	}
	// Output:
	// 2025-01-01T00:00:02.763859Z Allow("user-0" cost 1, api: token_bucket 10/1s burst 5)
	// 2025-01-01T00:00:02.763867Z AllowAll("user-0" cost 5, api: token_bucket 10/1s burst 5; "user-0" cost 66, hourly: fixed_window 100/1h0m0s)
	// 2025-01-01T00:00:02.763870Z AllowAll("{user}:1" cost 2, hourly: fixed_window 100/1h0m0s; "{user}:1" cost 4, api: token_bucket 10/1s burst 5)
	// 2025-01-01T00:00:02.861664Z Peek("user-0" cost 3, api: token_bucket 10/1s burst 5)
}
