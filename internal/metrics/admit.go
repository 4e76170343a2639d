package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lhrelay/internal/admit"
)

// admitMetrics are admission's series (SPEC §5.12): frames shed by reason
// and the wait of admitted calls; the limiter's gauges are read from it at
// scrape time (WatchLimiter).
type admitMetrics struct {
	Shed *prometheus.CounterVec
	Wait prometheus.Histogram
	shed map[string]prometheus.Counter
}

func newAdmitMetrics(reg *prometheus.Registry) *admitMetrics {
	a := &admitMetrics{
		Shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lhrelay_core_calls_shed_total",
			Help: "Frames that needed a core call and were not admitted (answered from the ledger's row, or E902 with nothing sent), by reason: limit (no slot within the wait), deadline (the core's recent latency leaves no room within --timeout).",
		}, []string{"reason"}),
		Wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lhrelay_core_call_admission_wait_seconds",
			Help:    "How long an admitted core call waited for its slot.",
			Buckets: []float64{.00001, .0001, .0005, .001, .002, .005, .01, .05},
		}),
		shed: map[string]prometheus.Counter{},
	}
	for _, r := range admit.Reasons {
		a.shed[string(r)] = a.Shed.WithLabelValues(string(r))
	}
	reg.MustRegister(a.Shed, a.Wait)
	return a
}

// CallShed counts a frame the limiter did not admit. The reasons are
// admit.Reasons, all created at start, so the map is only read here.
func (m *Metrics) CallShed(reason string) {
	if c, ok := m.admit.shed[reason]; ok {
		c.Inc()
	}
}

// CallAdmitted observes an admitted call's wait for its slot.
func (m *Metrics) CallAdmitted(wait time.Duration) { m.admit.Wait.Observe(wait.Seconds()) }

var (
	limiterInFlightDesc = prometheus.NewDesc("lhrelay_core_calls_in_flight",
		"Core calls admitted and not finished.", []string{"core"}, nil)
	limiterLimitDesc = prometheus.NewDesc("lhrelay_core_calls_limit",
		"The current limit on core calls in flight (adapted to the core's latency, at most --max-inflight).", []string{"core"}, nil)
	limiterMaxDesc = prometheus.NewDesc("lhrelay_core_calls_max",
		"--max-inflight: the ceiling of the limit.", []string{"core"}, nil)
	limiterLatencyDesc = prometheus.NewDesc("lhrelay_core_call_recent_latency_seconds",
		"The smoothed latency of recent core calls that admission decides with.", []string{"core"}, nil)
)

// WatchLimiter exports l's calls in flight, limit, ceiling and recent
// latency, labelled with the core it guards. A nil l (admission off)
// exports nothing.
func (m *Metrics) WatchLimiter(core string, l *admit.Limiter) {
	if l != nil {
		m.Registry.MustRegister(limiterCollector{core, l})
	}
}

type limiterCollector struct {
	core string
	l    *admit.Limiter
}

func (c limiterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- limiterInFlightDesc
	ch <- limiterLimitDesc
	ch <- limiterMaxDesc
	ch <- limiterLatencyDesc
}

func (c limiterCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(limiterInFlightDesc, prometheus.GaugeValue, float64(c.l.InFlight()), c.core)
	ch <- prometheus.MustNewConstMetric(limiterLimitDesc, prometheus.GaugeValue, float64(c.l.Limit()), c.core)
	ch <- prometheus.MustNewConstMetric(limiterMaxDesc, prometheus.GaugeValue, float64(c.l.Max()), c.core)
	ch <- prometheus.MustNewConstMetric(limiterLatencyDesc, prometheus.GaugeValue, c.l.Latency().Seconds(), c.core)
}
