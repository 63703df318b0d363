package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// usageCounter is a store that counts, per rate policy, the units debited
// and refunded and the estimates whose settlement time passed unsettled:
// the memory store (memstore.Store.Usage) and the Redis store
// (redisstore.Store.Usage, this instance's calls).
type usageCounter interface {
	Usage(p *sluice.Policy) (debited, refunded, unsettled int64, err error)
}

// usageGauge reports, at each scrape, for each rate limit of the
// configuration in use (and Envoy's, Options.OtherPolicies):
// sluice_usage_debited_units_total and sluice_usage_refunded_units_total
// (the units charged past the check, and given back, by every door:
// /v1/charge and /v1/refund, settled leases, Envoy's usage descriptors,
// the proxy's settlements) and sluice_usage_expired_total (the estimates
// whose settle_within passed before a release settled them, so that they
// stayed charged). It is an unchecked collector, as leaseGauge is.
type usageGauge struct {
	h                          *Handler
	debited, refunded, expired *prometheus.Desc
}

func newUsageGauge(h *Handler) usageGauge {
	return usageGauge{h: h,
		debited: prometheus.NewDesc("sluice_usage_debited_units_total",
			"Units charged to each rate limit as usage known after the fact, whether or not they fitted: charges, settlements above their estimate, Envoy usage descriptors (on Redis, this instance's).", []string{"limit"}, nil),
		refunded: prometheus.NewDesc("sluice_usage_refunded_units_total",
			"Units given back to each rate limit: refunds and settlements below their estimate (on Redis, this instance's).", []string{"limit"}, nil),
		expired: prometheus.NewDesc("sluice_usage_expired_total",
			"Estimates of each rate limit whose settle_within passed before a release settled them, so that they stayed charged, counted when the store notices (on Redis, only those released too late).", []string{"limit"}, nil),
	}
}

func (g usageGauge) Describe(chan<- *prometheus.Desc) {}

func (g usageGauge) Collect(ch chan<- prometheus.Metric) {
	uc, ok := g.h.raw.(usageCounter)
	st := g.h.state.Load()
	if !ok || st == nil {
		return
	}
	policies := make([]sluice.Policy, 0, len(st.names))
	for _, l := range st.cfg.Limits() {
		policies = append(policies, l.Policy)
	}
	if g.h.otherPolicies != nil {
		policies = append(policies, g.h.otherPolicies()...)
	}
	for i := range policies {
		p := &policies[i]
		if p.Algorithm == sluice.ConcurrencyAlgorithm {
			continue
		}
		debited, refunded, unsettled, err := uc.Usage(p)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(g.debited, prometheus.CounterValue, float64(debited), p.Name)
		ch <- prometheus.MustNewConstMetric(g.refunded, prometheus.CounterValue, float64(refunded), p.Name)
		ch <- prometheus.MustNewConstMetric(g.expired, prometheus.CounterValue, float64(unsettled), p.Name)
	}
}
