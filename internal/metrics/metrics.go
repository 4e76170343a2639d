// Package metrics is the relay's Prometheus instrumentation and its
// operational HTTP endpoints: /metrics, /healthz (the process is alive) and
// /readyz (the ledger is usable). Each Metrics has its own registry, so
// tests and several relays in one process never share counters.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lhrelay/internal/ledger"
)

// Metrics holds the relay's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	// Frames counts answered frames by TX_CODE and response code. Frames
	// whose TX_CODE is not registered are counted under tx_code "unknown"
	// so a hostile channel cannot grow the label set.
	Frames *prometheus.CounterVec
	// CoreCalls is the latency of core calls by TX_CODE and outcome
	// (the response-code source, e.g. HTTP200, READ_TIMEOUT).
	CoreCalls *prometheus.HistogramVec
	// InFlight is the number of frames being handled right now.
	InFlight prometheus.Gauge
	// OpenConns is the number of open channel connections.
	OpenConns prometheus.Gauge
	// RejectedConns counts connections closed at once because --max-conns
	// were already open.
	RejectedConns prometheus.Counter
	// BatchRows counts rows handled by batch commands run in-process (the
	// demo) by command and outcome; the stand-alone commands write the same
	// series to a textfile (see WriteBatchFile).
	BatchRows *prometheus.CounterVec
}

// New creates the collectors and registers them, with the Go runtime and
// process collectors, on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lhrelay_frames_total",
			Help: "Frames answered, by transaction code and response code.",
		}, []string{"tx_code", "rsp_code"}),
		CoreCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lhrelay_core_call_seconds",
			Help: "Latency of calls to the core, by transaction code and outcome.",
			// From a fast in-memory core (~100µs) to the longest timeouts.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"tx_code", "outcome"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_frames_in_flight",
			Help: "Frames being handled right now.",
		}),
		OpenConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_connections_open",
			Help: "Open channel connections.",
		}),
		RejectedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_connections_rejected_total",
			Help: "Connections closed at once because --max-conns were open.",
		}),
		BatchRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lhrelay_batch_rows_total",
			Help: "Ledger rows handled by batch commands, by command and outcome.",
		}, []string{"command", "outcome"}),
	}
	reg.MustRegister(m.Frames, m.CoreCalls, m.InFlight, m.OpenConns, m.RejectedConns, m.BatchRows,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveCore records one core call.
func (m *Metrics) ObserveCore(txCode, outcome string, d time.Duration) {
	m.CoreCalls.WithLabelValues(txCode, outcome).Observe(d.Seconds())
}

// WatchLedger exports the ledger's rows by state, read at scrape time so
// that rows changed by batch commands in other processes are counted too.
func (m *Metrics) WatchLedger(l *ledger.Ledger) {
	m.Registry.MustRegister(&ledgerCollector{l: l})
}

var (
	rowsDesc = prometheus.NewDesc("lhrelay_ledger_rows",
		"Ledger rows by state.", []string{"state"}, nil)
	oldestUnknownDesc = prometheus.NewDesc("lhrelay_ledger_oldest_unknown_age_seconds",
		"Age of the oldest UNKNOWN row (0 when there is none): alert when resolve is not keeping up.", nil, nil)
	commitsDesc = prometheus.NewDesc("lhrelay_ledger_commits_total",
		"Ledger commits (fsyncs) by this process; shared by the transactions grouped into them.", nil, nil)
)

// ledgerCollector reads the ledger's counts at each scrape.
type ledgerCollector struct{ l *ledger.Ledger }

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rowsDesc
	ch <- oldestUnknownDesc
	ch <- commitsDesc
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(c.l.Commits()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.l.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(rowsDesc, err)
		return
	}
	for _, s := range ledger.States {
		ch <- prometheus.MustNewConstMetric(rowsDesc, prometheus.GaugeValue, float64(st.ByState[s]), string(s))
	}
	age := 0.0
	if !st.OldestUnknown.IsZero() {
		age = time.Since(st.OldestUnknown).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(oldestUnknownDesc, prometheus.GaugeValue, age)
}

// Handler serves /metrics, /healthz and /readyz. ready reports whether the
// relay can take frames (its ledger answers); nil means always ready.
func (m *Metrics) Handler(ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}
