// This file reads one series of a Prometheus registry, for the
// tests of internal/service/metrics and internal/service/server, or of
// the text a /metrics endpoint serves.

package testkit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue returns the value of the series of family name whose label values
// are exactly labels, in any order (the registry sorts labels by name): a
// counter's or a gauge's value, or a histogram's count of observations. It
// returns false when there is no such series, and fails t when the
// registry cannot be gathered.
func MetricValue(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			lp := m.GetLabel()
			if len(lp) != len(labels) {
				continue
			}
			for _, v := range labels {
				found := false
				for _, l := range lp {
					found = found || l.GetValue() == v
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// SeriesValue returns the value of series, a metric's name with its
// labels as they are written (`sluice_config_limits` or
// `sluice_decisions_total{limit="a",outcome="allowed"}`), in the
// Prometheus text exposition text; it reports false when text has none.
func SeriesValue(text, series string) (string, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
}
