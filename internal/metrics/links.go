package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"lhrelay/internal/breaker"
	"lhrelay/internal/tlsconf"
)

// linkMetrics are the secured link's series: connections refused by
// --allow and channel TLS handshakes that failed.
type linkMetrics struct {
	NotAllowed      prometheus.Counter
	OverShare       prometheus.Counter
	HandshakeFailed prometheus.Counter
	LedgerLink      prometheus.Gauge
}

func newLinkMetrics(reg *prometheus.Registry) *linkMetrics {
	l := &linkMetrics{
		NotAllowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_connections_not_allowed_total",
			Help: "Connections closed unread because their address is not in --allow.",
		}),
		OverShare: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_connections_over_share_total",
			Help: "Connections closed unread because their address already held its share of --max-conns (--max-conns-per-addr).",
		}),
		HandshakeFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_tls_handshake_failures_total",
			Help: "Channel connections closed unread because their TLS handshake failed (no or an untrusted client certificate, a plain-TCP client, a timeout).",
		}),
	}
	l.LedgerLink = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lhrelay_ledger_link_unverified",
		Help: "1 when the link to a shared ledger on a host other than the loopback may be plaintext or take any certificate (an sslmode below verify-ca stated in --db), else 0.",
	})
	reg.MustRegister(l.NotAllowed, l.OverShare, l.HandshakeFailed, l.LedgerLink)
	return l
}

// ConnNotAllowed counts a connection refused by --allow.
func (m *Metrics) ConnNotAllowed() { m.links.NotAllowed.Inc() }

// ConnOverShare counts a connection refused by --max-conns-per-addr.
func (m *Metrics) ConnOverShare() { m.links.OverShare.Inc() }

// LedgerLinkUnverified exports whether the ledger's link is unverified.
func (m *Metrics) LedgerLinkUnverified(unverified bool) {
	v := 0.0
	if unverified {
		v = 1
	}
	m.links.LedgerLink.Set(v)
}

// TLSHandshakeFailed counts a channel connection whose TLS handshake failed.
func (m *Metrics) TLSHandshakeFailed() { m.links.HandshakeFailed.Inc() }

var (
	breakerStateDesc = prometheus.NewDesc("lhrelay_core_breaker_state",
		"State of the breaker in front of the core: 0 closed, 1 half-open (probing), 2 open (the core is not called; frames are answered E902).", []string{"core"}, nil)
	breakerOpensDesc = prometheus.NewDesc("lhrelay_core_breaker_opens_total",
		"Times the breaker in front of the core opened.", []string{"core"}, nil)
	breakerRefusedDesc = prometheus.NewDesc("lhrelay_core_breaker_refused_total",
		"Core calls the breaker did not let through (answered E902, nothing sent).", []string{"core"}, nil)
)

// WatchBreaker exports b's state, opens and refused calls, labelled with
// the core it guards. A nil b (breaker off) exports nothing.
func (m *Metrics) WatchBreaker(b *breaker.Breaker) {
	if b != nil {
		m.Registry.MustRegister(breakerCollector{b})
	}
}

type breakerCollector struct{ b *breaker.Breaker }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerStateDesc
	ch <- breakerOpensDesc
	ch <- breakerRefusedDesc
}

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	name := c.b.Name()
	ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, float64(c.b.State()), name)
	ch <- prometheus.MustNewConstMetric(breakerOpensDesc, prometheus.CounterValue, float64(c.b.Opens()), name)
	ch <- prometheus.MustNewConstMetric(breakerRefusedDesc, prometheus.CounterValue, float64(c.b.Refused()), name)
}

var certExpiryDesc = prometheus.NewDesc("lhrelay_tls_certificate_expiry_timestamp_seconds",
	"When each certificate the relay loaded expires (Unix time): its own on either link and the CAs it trusts. Files re-read on SIGHUP are shown as reloaded.",
	[]string{"flag", "subject"}, nil)

// WatchCerts exports the expiry time of the certificates certs lists,
// read at each scrape (so a reload shows at the next one).
func (m *Metrics) WatchCerts(certs func() []tlsconf.Cert) {
	m.Registry.MustRegister(certCollector(certs))
}

type certCollector func() []tlsconf.Cert

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[2]string]bool{}
	for _, cert := range c() {
		k := [2]string{cert.Flag, cert.Subject}
		if seen[k] {
			continue // one series per label set; a bundle may repeat a subject
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), cert.Flag, cert.Subject)
	}
}
