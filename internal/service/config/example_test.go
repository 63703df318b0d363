package config_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/service/config"
)

func ExampleParse() {
	_, err := config.Parse("sluice.yaml", []byte(`
limits:
  api-key:
    algorithm: token-bucket
    limit: 10
    period: 1 s
    burst: -1
proxy:
  rules:
    - limits: [{limit: apikey, key: "header:X-API-Key"}]
`), config.Formats{}) // cmd/sluice passes the checks of key sources and the like

	fmt.Println(err)
	// Output:
	// sluice.yaml:4: limits.api-key.algorithm: unknown algorithm "token-bucket" (want token_bucket, gcra, leaky_bucket, fixed_window, sliding_log, sliding_window or concurrency); did you mean "token_bucket"?
	// sluice.yaml:6: limits.api-key.period: invalid duration "1 s" (want a number and a unit, like 500ms, 10s, 1m, 1h or 1d)
	// sluice.yaml:7: limits.api-key.burst: must be from 0 to 1000000000, got -1
	// sluice.yaml:10: proxy.rules[0].limits[0].limit: no limit named "apikey" in the limits section
}

func ExampleConfig_Limit() {
	cfg, err := config.Parse("sluice.yaml", []byte(`
limits:
  per-ip: {algorithm: sliding_window, limit: 100, period: 1m}
`), config.Formats{})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, _ := cfg.Limit("per-ip")
	fmt.Println(l.Policy, l.Shadow)
	// Output:
	// per-ip: sliding_window 100/1m0s false
}
