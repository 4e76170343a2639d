// Package metrics is the relay's Prometheus instrumentation and its
// operational HTTP endpoints: /metrics, /healthz (the process is alive) and
// /readyz (the relay can take frames: its ledger is usable and it is not
// stopping). Each Metrics has its own registry, so tests and several relays
// in one process never share counters. *Metrics implements relay.Metrics
// (relay.Config.Metrics).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/replwatch"
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
	// InFlight is the number of frames started (first byte read) and not
	// yet answered (answer ready, or the frame dropped).
	InFlight prometheus.Gauge
	// OpenConns is the number of open channel connections.
	OpenConns prometheus.Gauge
	// RejectedConns counts connections closed at once because --max-conns
	// were already open.
	RejectedConns prometheus.Counter

	links     *linkMetrics
	admit     *admitMetrics
	settle    *settleMetrics
	frames    *children[prometheus.Counter]
	coreCalls *children[prometheus.Observer]
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
			Help: "Frames started (first byte read) and not yet answered.",
		}),
		OpenConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_connections_open",
			Help: "Open channel connections.",
		}),
		RejectedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_connections_rejected_total",
			Help: "Connections closed at once because --max-conns were open.",
		}),
	}
	reg.MustRegister(m.Frames, m.CoreCalls, m.InFlight, m.OpenConns, m.RejectedConns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.links = newLinkMetrics(reg)
	m.admit = newAdmitMetrics(reg)
	m.settle = newSettleMetrics(reg)
	m.frames = newChildren(func(tx, rsp string) prometheus.Counter { return m.Frames.WithLabelValues(tx, rsp) })
	m.coreCalls = newChildren(func(tx, outcome string) prometheus.Observer { return m.CoreCalls.WithLabelValues(tx, outcome) })
	return m
}

// The relay's side (relay.Metrics). Each method is called on the hot path,
// so the labelled children are looked up once per label pair and kept (see
// children); label values come from finite sets (the registered TX_CODEs and
// "unknown", the response codes and sources of rspmap.csv), so what a channel
// sends can never grow the label set.

// FrameAnswered counts one answered frame. A txCode that is not registered
// is counted as "unknown", never as the bytes received.
func (m *Metrics) FrameAnswered(txCode string, rsp generated.RspCode) {
	m.frames.get(txLabel(txCode), rspLabel(rsp)).Inc()
}

// CoreCalled records the latency of one core call and how it ended.
func (m *Metrics) CoreCalled(txCode string, outcome generated.Source, elapsed time.Duration) {
	m.coreCalls.get(txLabel(txCode), sourceLabel(outcome)).Observe(elapsed.Seconds())
}

// FrameStarted and FrameEnded bracket a frame being handled.
func (m *Metrics) FrameStarted() { m.InFlight.Inc() }

// FrameEnded: see FrameStarted.
func (m *Metrics) FrameEnded() { m.InFlight.Dec() }

// ConnOpened and ConnClosed bracket an admitted channel connection.
func (m *Metrics) ConnOpened() { m.OpenConns.Inc() }

// ConnClosed: see ConnOpened.
func (m *Metrics) ConnClosed() { m.OpenConns.Dec() }

// ConnRejected counts a connection closed at once by --max-conns.
func (m *Metrics) ConnRejected() { m.RejectedConns.Inc() }

// UnknownLabel is the label value of a TX_CODE that is not registered (or a
// response code or source that is not in the table).
const UnknownLabel = "unknown"

func txLabel(code string) string {
	if tx, ok := generated.LookupTransaction(code); ok {
		return tx.Code
	}
	return UnknownLabel
}

func rspLabel(c generated.RspCode) string {
	if _, ok := c.Source(); ok {
		return string(c)
	}
	return UnknownLabel
}

func sourceLabel(s generated.Source) string {
	if s.Code() != "" {
		return string(s)
	}
	return UnknownLabel
}

// children caches the children of a two-label vector. A lookup that hits
// is one map read through an atomic pointer: no lock, no allocation. A miss
// (once per label pair in the life of the process) copies the map under a
// lock.
type children[T any] struct {
	with func(a, b string) T
	mu   sync.Mutex
	m    atomic.Pointer[map[labelPair]T]
}

type labelPair struct{ a, b string }

func newChildren[T any](with func(a, b string) T) *children[T] {
	c := &children[T]{with: with}
	c.m.Store(&map[labelPair]T{})
	return c
}

func (c *children[T]) get(a, b string) T {
	if v, ok := (*c.m.Load())[labelPair{a, b}]; ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if v, ok := old[labelPair{a, b}]; ok {
		return v
	}
	next := make(map[labelPair]T, len(old)+1)
	maps.Copy(next, old)
	v := c.with(a, b)
	next[labelPair{a, b}] = v
	c.m.Store(&next)
	return v
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
		"Ledger commits by this process: SQLite group commits (one fsync each, shared by the transactions grouped into them), PostgreSQL write transactions.", nil, nil)
	conflictsDesc = prometheus.NewDesc("lhrelay_ledger_conflicts_total",
		"Core answers for a call whose row was settled FAILED while the call was under way and re-claimed since: the row is left alone and the transfer may be posted twice (see the relay's error log line \"ledger conflict\").", nil, nil)
	lateAnswersDesc = prometheus.NewDesc("lhrelay_ledger_late_answers_total",
		"Core answers recorded over a row settled FAILED while the call was under way (a lookup that came too early).", nil, nil)
	errorsDesc = prometheus.NewDesc("lhrelay_ledger_errors_total",
		"Ledger operations of this process that failed (the database unreachable, a lost connection, a timeout), by operation; refusals by the state machine are not errors.", []string{"op"}, nil)
	historyHeadDesc = prometheus.NewDesc("lhrelay_ledger_history_head_seq",
		"Sequence number of the last history entry this process appended to its chain: with lhrelay_ledger_history_head_hash, the chain's head kept outside the database, to anchor ledger audit.", []string{"chain"}, nil)
	historyHashDesc = prometheus.NewDesc("lhrelay_ledger_history_head_hash",
		"The first 32 bits of the hash of that entry, as a number (the whole hash is in the relay's log at every stop and every settling round).", []string{"chain"}, nil)
)

// WatchReplication exports what w last found about the ledger's
// replication (SPEC 6a): the standbys attached, the synchronous ones, and
// whether a failover could forget acknowledged claims.
func (m *Metrics) WatchReplication(w *replwatch.Watcher) {
	m.Registry.MustRegister(&replicationCollector{w: w})
}

var (
	standbysDesc = prometheus.NewDesc("lhrelay_ledger_standbys",
		"Standbys streaming from the ledger's PostgreSQL primary, by mode (sync: counted by a commit; async: not), as last checked.", []string{"mode"}, nil)
	replUnsafeDesc = prometheus.NewDesc("lhrelay_ledger_replication_unsafe",
		"1 while the ledger's replication is unsafe, by reason: async (standbys attached, synchronous_standby_names empty: a failover forgets acknowledged claims) or sync_lost (no synchronous standby attached: commits wait).", []string{"reason"}, nil)
)

type replicationCollector struct{ w *replwatch.Watcher }

func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- standbysDesc
	ch <- replUnsafeDesc
}

func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	r, ok := c.w.Status()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(standbysDesc, prometheus.GaugeValue, float64(r.SyncStandbys), "sync")
	ch <- prometheus.MustNewConstMetric(standbysDesc, prometheus.GaugeValue, float64(r.Standbys-r.SyncStandbys), "async")
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(replUnsafeDesc, prometheus.GaugeValue, b(r.Async()), "async")
	ch <- prometheus.MustNewConstMetric(replUnsafeDesc, prometheus.GaugeValue, b(r.SyncLost()), "sync_lost")
}

// ledgerCollector reads the ledger's counts at each scrape.
type ledgerCollector struct{ l *ledger.Ledger }

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rowsDesc
	ch <- oldestUnknownDesc
	ch <- commitsDesc
	ch <- conflictsDesc
	ch <- lateAnswersDesc
	ch <- errorsDesc
	ch <- historyHeadDesc
	ch <- historyHashDesc
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(c.l.Commits()))
	ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(c.l.Conflicts()))
	ch <- prometheus.MustNewConstMetric(lateAnswersDesc, prometheus.CounterValue, float64(c.l.LateAnswers()))
	head := c.l.ChainHead()
	ch <- prometheus.MustNewConstMetric(historyHeadDesc, prometheus.GaugeValue, float64(head.Seq), head.Chain)
	var prefix uint64
	if len(head.Hash) >= 8 {
		prefix, _ = strconv.ParseUint(head.Hash[:8], 16, 32)
	}
	ch <- prometheus.MustNewConstMetric(historyHashDesc, prometheus.GaugeValue, float64(prefix), head.Chain)
	for i, n := range c.l.Errors() {
		ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(n), ledger.ErrorOps[i])
	}
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
		age = st.Now.Sub(st.OldestUnknown).Seconds() // by the database's clock
	}
	ch <- prometheus.MustNewConstMetric(oldestUnknownDesc, prometheus.GaugeValue, age)
}

// Handler serves /metrics, /healthz (also as /livez) and /readyz. ready reports whether the
// relay can take frames (its ledger answers, it is not stopping); nil means
// always ready.
//
// /metrics is served even when a collector fails (an unusable ledger): the
// other series are what an operator needs most at that moment. The failure
// is counted in promhttp_metric_handler_errors_total.
func (m *Metrics) Handler(ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{
		Registry:      m.Registry,
		ErrorHandling: promhttp.ContinueOnError,
	}))
	// /livez is the Kubernetes name of the same probe.
	alive := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", alive)
	mux.HandleFunc("GET /livez", alive)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			err := ready(ctx)
			var warn *replwatch.Warning
			if errors.As(err, &warn) {
				// Ready, and an operator should know why it is not safe.
				fmt.Fprintf(w, "ready; warning: %v\n", warn)
				return
			}
			if err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}

// Serve listens on addr and serves Handler(ready) in the background, logging
// server errors to log. The caller closes the returned server; the relay
// commands close it only after the relay has stopped, so that /readyz
// answers 503 while the relay drains.
func (m *Metrics) Serve(addr string, ready func(context.Context) error, log *slog.Logger) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	srv := &http.Server{
		Handler:           m.Handler(ready),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go srv.Serve(ln)
	return srv, ln.Addr(), nil
}
