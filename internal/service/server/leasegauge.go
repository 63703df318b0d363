package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// heldCounter is a store that can count the units a concurrency policy
// holds over all its keys: the memory store (memstore.Store.Held). The
// Redis store cannot without reading every key, so on Redis the gauge is
// absent.
type heldCounter interface {
	Held(now time.Time, p *sluice.Policy) (units, leases int64, err error)
	Expired(p *sluice.Policy) (int64, error)
}

// leaseGauge reports, at each scrape, sluice_lease_units_held (the units
// each concurrency limit of the configuration in use holds, over all its
// keys) and sluice_lease_expired_total (the leases that ran out without a
// release). It is an unchecked collector (Describe yields nothing), since the
// limits change with every reload.
type leaseGauge struct {
	h             *Handler
	held, expired *prometheus.Desc
}

func newLeaseGauge(h *Handler) leaseGauge {
	return leaseGauge{h: h,
		held: prometheus.NewDesc("sluice_lease_units_held",
			"Units held by the leases of each concurrency limit, over all its keys, at the scrape (memory store only).", []string{"limit"}, nil),
		expired: prometheus.NewDesc("sluice_lease_expired_total",
			"Leases of each concurrency limit whose holds ran out without a release, counted when the store notices (memory store only).", []string{"limit"}, nil),
	}
}

func (g leaseGauge) Describe(chan<- *prometheus.Desc) {}

func (g leaseGauge) Collect(ch chan<- prometheus.Metric) {
	hc, ok := g.h.raw.(heldCounter)
	st := g.h.state.Load()
	if !ok || st == nil {
		return
	}
	for _, l := range st.cfg.Limits() {
		if l.Policy.Algorithm != sluice.ConcurrencyAlgorithm {
			continue
		}
		if units, _, err := hc.Held(time.Time{}, &l.Policy); err == nil {
			ch <- prometheus.MustNewConstMetric(g.held, prometheus.GaugeValue, float64(units), l.Name())
		}
		if n, err := hc.Expired(&l.Policy); err == nil {
			ch <- prometheus.MustNewConstMetric(g.expired, prometheus.CounterValue, float64(n), l.Name())
		}
	}
}
