package metrics

import "github.com/prometheus/client_golang/prometheus"

// LocalRefusals are the counts of a Redis store's local refusals (see
// docs/redis.md, "Refused floods"): requests refused without calling Redis
// because the state Redis last returned for their key still refuses them.
type LocalRefusals struct {
	// Decisions counts the store's decisions, and Local those of them
	// refused locally, which never reached Redis.
	Decisions, Local uint64
	// ByLimit counts local refusals by limit name.
	ByLimit map[string]uint64
	// Entries is the number of states held, and Bytes their size.
	Entries int
	Bytes   int64
}

// Share returns the share of decisions that never reached Redis.
func (l LocalRefusals) Share() float64 {
	if l.Decisions == 0 {
		return 0
	}
	return float64(l.Local) / float64(l.Decisions)
}

// localRefusalCollector exports LocalRefusals as metrics, read at each
// scrape.
type localRefusalCollector struct {
	stats            func() LocalRefusals
	total            *prometheus.Desc
	entries, bytes   *prometheus.Desc
	decisions, local *prometheus.Desc
}

func newLocalRefusalCollector(stats func() LocalRefusals) *localRefusalCollector {
	return &localRefusalCollector{
		stats: stats,
		total: prometheus.NewDesc("sluice_store_local_refusals_total",
			"Requests the Redis store refused without calling Redis (its cached state of the key refused them), by limit.", []string{"limit"}, nil),
		entries: prometheus.NewDesc("sluice_store_local_refusal_entries",
			"States of refused keys the Redis store holds for local refusals.", nil, nil),
		bytes: prometheus.NewDesc("sluice_store_local_refusal_bytes",
			"Bytes counted for the states of refused keys the Redis store holds.", nil, nil),
		decisions: prometheus.NewDesc("sluice_store_local_decisions_total",
			"Decisions of the Redis store (Allow, Peek, AllowAll calls), counted with local refusals on.", nil, nil),
		local: prometheus.NewDesc("sluice_store_local_refused_decisions_total",
			"Decisions of the Redis store that never reached Redis (local refusals).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *localRefusalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.total
	ch <- c.entries
	ch <- c.bytes
	ch <- c.decisions
	ch <- c.local
}

// Collect implements prometheus.Collector.
func (c *localRefusalCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for name, n := range s.ByLimit {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.Decisions))
	ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(s.Local))
}
