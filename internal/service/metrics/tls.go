package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TLS counts the life of the listeners' TLS material (listen.tls): when
// the serving certificate expires, and the replacements of its files.
type TLS struct {
	expiry  prometheus.Gauge
	reloads *prometheus.CounterVec // result: ok, refused
}

// TLS registers the TLS series, which only a service with listen.tls
// has. On failure it unregisters every collector of m.
func (m *Metrics) TLS() (*TLS, error) {
	t := &TLS{
		expiry: gauge("sluice_tls_certificate_expiry_timestamp_seconds",
			"When the serving certificate of the listeners (listen.tls.cert_file) expires, in seconds since the Unix epoch."),
		reloads: counterVec("sluice_tls_reloads_total",
			"Replacements of the TLS files seen while serving, by result: ok (put in use) or refused (unreadable, not matching, expired; the files in use stayed).",
			"result"),
	}
	if err := m.register(t.expiry, t.reloads); err != nil {
		return nil, err
	}
	t.reloads.WithLabelValues("ok")
	t.reloads.WithLabelValues("refused")
	return t, nil
}

// Loaded records material put in use, whose certificate expires at
// notAfter.
func (t *TLS) Loaded(notAfter time.Time) {
	t.expiry.Set(float64(notAfter.Unix()))
	t.reloads.WithLabelValues("ok").Inc()
}

// Refused counts replaced files that were refused; the material in use
// stayed.
func (t *TLS) Refused() { t.reloads.WithLabelValues("refused").Inc() }
