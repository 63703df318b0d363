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
}

// leaseGauge reports, at each scrape, sluice_lease_units_held: the units
// each concurrency limit of the configuration in use holds, over all its
// keys. It is an unchecked collector (Describe yields nothing), since the
// limits change with every reload.
type leaseGauge struct {
	h    *Handler
	desc *prometheus.Desc
}

func newLeaseGauge(h *Handler) leaseGauge {
	return leaseGauge{h: h, desc: prometheus.NewDesc("sluice_lease_units_held",
		"Units held by the leases of each concurrency limit, over all its keys, at the scrape (memory store only).", []string{"limit"}, nil)}
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
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(units), l.Name())
		}
	}
}
