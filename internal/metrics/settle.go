package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lhrelay/internal/batch"
	"lhrelay/internal/settle"
)

// settleMetrics are the series of the relay's own settling (--settle-every).
type settleMetrics struct {
	Interval      prometheus.Gauge
	Rounds        *prometheus.CounterVec
	Rows          *prometheus.CounterVec
	LookupsFailed prometheus.Counter
	LastRound     prometheus.Gauge
	LastDuration  prometheus.Gauge
}

func newSettleMetrics(reg *prometheus.Registry) *settleMetrics {
	m := &settleMetrics{
		Interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_settle_interval_seconds",
			Help: "Seconds between the relay's settling rounds (--settle-every); 0 when it does not settle.",
		}),
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lhrelay_settle_rounds_total",
			Help: "Settling rounds by result: ran, locked (another relay on the ledger ran it), core_down (breaker open), failed.",
		}, []string{"result"}),
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lhrelay_settle_rows_total",
			Help: "UNKNOWN and stale SENT rows handled by the relay's settling, by outcome (as resolve's summary).",
		}, []string{"outcome"}),
		LookupsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lhrelay_settle_lookups_failed_total",
			Help: "Lookups that could not tell whether a request was posted (no answer, or an unusable one); the row stays for a later round.",
		}),
		LastRound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_settle_last_round_timestamp_seconds",
			Help: "When the last settling round that ran here or found another relay running it ended (Unix time); 0 before the first.",
		}),
		LastDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lhrelay_settle_last_round_duration_seconds",
			Help: "How long the last settling round took.",
		}),
	}
	for _, r := range settle.Results {
		m.Rounds.WithLabelValues(string(r))
	}
	// Every outcome of a round shown from the start, so that a dashboard
	// and an alert see zeros, not gaps.
	for _, o := range slices.Concat(batch.ResolveOutcomes, []string{batch.OutcomeUnverified}) {
		m.Rows.WithLabelValues(o)
	}
	reg.MustRegister(m.Interval, m.Rounds, m.Rows, m.LookupsFailed, m.LastRound, m.LastDuration)
	return m
}

// SettleEvery records the interval of the relay's settling (0: off).
func (m *Metrics) SettleEvery(d time.Duration) { m.settle.Interval.Set(d.Seconds()) }

// SettleRound records one settling round (settle.Metrics).
func (m *Metrics) SettleRound(result settle.Result, took time.Duration, end time.Time, s *batch.Summary) {
	m.settle.Rounds.WithLabelValues(string(result)).Inc()
	m.settle.LastDuration.Set(took.Seconds())
	if result == settle.Ran || result == settle.Locked {
		m.settle.LastRound.Set(float64(end.UnixNano()) / 1e9)
	}
	if s == nil {
		return
	}
	s.Each(func(outcome string, n int) {
		if outcome == "selected" {
			return
		}
		m.settle.Rows.WithLabelValues(outcome).Add(float64(n))
	})
	m.settle.LookupsFailed.Add(float64(s.Count("unreachable")))
}
