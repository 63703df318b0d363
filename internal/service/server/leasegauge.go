package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// heldCounter is a store that counts the units a concurrency policy holds
// over all its keys in memory: the memory store (memstore.Store.Held).
type heldCounter interface {
	Held(now time.Time, p *sluice.Policy) (units, leases int64, err error)
	expiredCounter
}

// heldScanner is a store that finds the units its concurrency policies
// hold by reading their keys, at a bounded cost: the Redis store
// (redisstore.Store.ScanHeld, which reads at most maxKeys keys and says
// whether it read them all).
type heldScanner interface {
	ScanHeld(ctx context.Context, ps []*sluice.Policy, maxKeys int, units []int64) (complete bool, err error)
	expiredCounter
}

// expiredCounter counts the holds of a concurrency policy that ran out
// without a release.
type expiredCounter interface {
	Expired(p *sluice.Policy) (int64, error)
}

// heldScanTimeout bounds the held scan of one scrape on Redis.
const heldScanTimeout = 5 * time.Second

// leaseGauge reports, at each scrape, sluice_lease_units_held (the units
// each concurrency limit of the configuration in use holds, over all its
// keys) and sluice_lease_expired_total (the leases that ran out without a
// release). On Redis the held units come from a scan of the concurrency
// keys, bounded in keys: a scan that stops at its bound reports no
// sluice_lease_units_held (a lower bound would pass for the figure), counts
// sluice_lease_held_scan_incomplete_total and logs a warning. It is an
// unchecked collector (Describe yields nothing), since the limits change
// with every reload.
type leaseGauge struct {
	h                             *Handler
	held, expired, incompleteDesc *prometheus.Desc
	incomplete                    *atomic.Int64
	warned                        *logLimiter
}

func newLeaseGauge(h *Handler) leaseGauge {
	return leaseGauge{h: h,
		held: prometheus.NewDesc("sluice_lease_units_held",
			"Units held by the leases of each concurrency limit, over all its keys, at the scrape.", []string{"limit"}, nil),
		expired: prometheus.NewDesc("sluice_lease_expired_total",
			"Leases of each concurrency limit whose holds ran out without a release, counted when this instance's store notices.", []string{"limit"}, nil),
		incompleteDesc: prometheus.NewDesc("sluice_lease_held_scan_incomplete_total",
			"Scrapes whose scan of the Redis concurrency keys stopped at its bound, so that sluice_lease_units_held was left out.", nil, nil),
		incomplete: new(atomic.Int64),
		warned:     new(logLimiter),
	}
}

func (g leaseGauge) Describe(chan<- *prometheus.Desc) {}

func (g leaseGauge) Collect(ch chan<- prometheus.Metric) {
	st := g.h.state.Load()
	ec, ok := g.h.raw.(expiredCounter)
	if !ok || st == nil {
		return
	}
	var limits []limitName
	for _, l := range st.cfg.Limits() {
		if l.Policy.Algorithm == sluice.ConcurrencyAlgorithm {
			limits = append(limits, limitName{l.Name(), &l.Policy})
		}
	}
	switch hs := g.h.raw.(type) {
	case heldCounter:
		for _, l := range limits {
			if units, _, err := hs.Held(time.Time{}, l.p); err == nil {
				ch <- prometheus.MustNewConstMetric(g.held, prometheus.GaugeValue, float64(units), l.name)
			}
		}
	case heldScanner:
		g.scan(ch, hs, limits)
	}
	for _, l := range limits {
		if n, err := ec.Expired(l.p); err == nil {
			ch <- prometheus.MustNewConstMetric(g.expired, prometheus.CounterValue, float64(n), l.name)
		}
	}
}

// limitName is a concurrency limit of the configuration: its name and
// policy.
type limitName struct {
	name string
	p    *sluice.Policy
}

// scan reports the held units of limits by one scan of the store's keys.
func (g leaseGauge) scan(ch chan<- prometheus.Metric, hs heldScanner, limits []limitName) {
	defer func() {
		ch <- prometheus.MustNewConstMetric(g.incompleteDesc, prometheus.CounterValue, float64(g.incomplete.Load()))
	}()
	if len(limits) == 0 {
		return
	}
	ps := make([]*sluice.Policy, len(limits))
	for i, l := range limits {
		ps[i] = l.p
	}
	units := make([]int64, len(limits))
	ctx, cancel := context.WithTimeout(context.Background(), heldScanTimeout)
	defer cancel()
	complete, err := hs.ScanHeld(ctx, ps, 0, units)
	if err != nil || !complete {
		if !complete && err == nil {
			g.incomplete.Add(1)
		}
		if suppressed, ok := g.warned.allow(g.h.now(), storeErrorLogEvery); ok {
			msg := "the scan of the concurrency keys stopped at its bound: sluice_lease_units_held left out"
			attrs := []slog.Attr{slog.Int("suppressed", suppressed)}
			if err != nil {
				msg = "the scan of the concurrency keys failed: sluice_lease_units_held left out"
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			g.h.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
		}
		return
	}
	for i, l := range limits {
		ch <- prometheus.MustNewConstMetric(g.held, prometheus.GaugeValue, float64(units[i]), l.name)
	}
}
