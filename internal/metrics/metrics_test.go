package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// gather reads m's registry as exposed: "name{label=\"v\",...}" → value,
// with histograms as their _count. Only lhrelay_ series are kept.
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	assert.NilError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "lhrelay_") {
			continue
		}
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			var v float64
			switch {
			case mt.GetCounter() != nil:
				v = mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				v = mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				name += "_count"
				v = float64(mt.GetHistogram().GetSampleCount())
			}
			var labels []string
			for _, lp := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out[name] = v
		}
	}
	return out
}

// only keeps the series of one metric.
func only(s map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

func TestFrameLabels(t *testing.T) {
	m := New()
	m.FrameAnswered("BKTR0001", generated.RspHTTP200)
	m.FrameAnswered("BKTR0001", generated.RspHTTP200)
	m.FrameAnswered("BKIQ0001", generated.RspNoAccount)
	m.FrameAnswered("BKXX0009", generated.RspUnknownTx)
	m.FrameAnswered("\x00\x01garbage", generated.RspBadFrame)
	m.FrameAnswered("", generated.RspBadFrame)
	m.FrameAnswered("BKTR0001", generated.RspCode("ZZZZ"))

	assert.DeepEqual(t, only(gather(t, m), "lhrelay_frames_total"), map[string]float64{
		`lhrelay_frames_total{rsp_code="0000",tx_code="BKTR0001"}`:    2,
		`lhrelay_frames_total{rsp_code="B202",tx_code="BKIQ0001"}`:    1,
		`lhrelay_frames_total{rsp_code="E101",tx_code="unknown"}`:     1,
		`lhrelay_frames_total{rsp_code="E102",tx_code="unknown"}`:     2,
		`lhrelay_frames_total{rsp_code="unknown",tx_code="BKTR0001"}`: 1,
	})
}

func TestCoreCalled(t *testing.T) {
	m := New()
	m.CoreCalled("BKTR0001", generated.SourceHTTP200, 2*time.Millisecond)
	m.CoreCalled("BKTR0001", generated.SourceReadTimeout, time.Second)
	m.CoreCalled("nope", generated.Source("WHATEVER"), time.Millisecond)
	assert.DeepEqual(t, only(gather(t, m), "lhrelay_core_call_seconds_count"), map[string]float64{
		`lhrelay_core_call_seconds_count{outcome="HTTP200",tx_code="BKTR0001"}`:      1,
		`lhrelay_core_call_seconds_count{outcome="READ_TIMEOUT",tx_code="BKTR0001"}`: 1,
		`lhrelay_core_call_seconds_count{outcome="unknown",tx_code="unknown"}`:       1,
	})
}

func TestGauges(t *testing.T) {
	m := New()
	m.FrameStarted()
	m.FrameStarted()
	m.FrameEnded()
	m.ConnOpened()
	m.ConnOpened()
	m.ConnClosed()
	m.ConnRejected()
	s := gather(t, m)
	assert.Equal(t, s["lhrelay_frames_in_flight"], 1.0)
	assert.Equal(t, s["lhrelay_connections_open"], 1.0)
	assert.Equal(t, s["lhrelay_connections_rejected_total"], 1.0)
}

// TestChildrenConcurrent: many goroutines counting through the cache lose
// nothing and share one child per label pair.
func TestChildrenConcurrent(t *testing.T) {
	m := New()
	codes := []generated.RspCode{generated.RspHTTP200, generated.RspBadFrame, generated.RspReadTimeout}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				m.FrameAnswered("BKTR0001", codes[(g+i)%len(codes)])
			}
		})
	}
	wg.Wait()
	var total float64
	for _, v := range only(gather(t, m), "lhrelay_frames_total") {
		total += v
	}
	assert.Equal(t, total, 8*300.0)
	assert.Equal(t, len(*m.frames.m.Load()), len(codes))
}

// TestHotPathAllocs: counting a frame and a core call allocates nothing
// once the label pair has been seen.
func TestHotPathAllocs(t *testing.T) {
	m := New()
	m.FrameAnswered("BKTR0001", generated.RspHTTP200)
	m.CoreCalled("BKTR0001", generated.SourceHTTP200, time.Millisecond)
	allocs := testing.AllocsPerRun(1000, func() {
		m.FrameStarted()
		m.FrameAnswered("BKTR0001", generated.RspHTTP200)
		m.CoreCalled("BKTR0001", generated.SourceHTTP200, time.Millisecond)
		m.FrameEnded()
	})
	assert.Equal(t, allocs, 0.0)
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	return resp.StatusCode, string(b)
}

func TestHandler(t *testing.T) {
	m := New()
	m.FrameAnswered("BKTR0001", generated.RspHTTP200)
	status, body := get(t, m.Handler(nil), "/metrics")
	assert.Equal(t, status, http.StatusOK)
	assert.Assert(t, strings.Contains(body, "lhrelay_frames_total{rsp_code=\"0000\",tx_code=\"BKTR0001\"} 1\n"), body)
	assert.Assert(t, strings.Contains(body, "go_goroutines "), "runtime collector")

	status, _ = get(t, m.Handler(nil), "/healthz")
	assert.Equal(t, status, http.StatusOK)
	status, _ = get(t, m.Handler(nil), "/readyz")
	assert.Equal(t, status, http.StatusOK)

	notReady := func(context.Context) error { return errors.New("ledger gone") }
	status, body = get(t, m.Handler(notReady), "/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable)
	assert.Assert(t, strings.Contains(body, "ledger gone"), body)
	status, _ = get(t, m.Handler(notReady), "/healthz")
	assert.Equal(t, status, http.StatusOK)

	status, _ = get(t, m.Handler(nil), "/nope")
	assert.Equal(t, status, http.StatusNotFound)
}

// TestWatchLedger: rows by state are read at each scrape; a ledger that
// fails does not take the other series down.
func TestWatchLedger(t *testing.T) {
	led, err := ledger.Open(filepath.Join(t.TempDir(), "relay.db"))
	assert.NilError(t, err)
	defer led.Close()
	m := New()
	m.WatchLedger(led)
	m.FrameAnswered("BKTR0001", generated.RspHTTP200)

	ctx := context.Background()
	for i, to := range []ledger.State{ledger.StateDone, ledger.StateDone, ledger.StateUnknown, ""} {
		guid := strings.Repeat("0", 31) + string(rune('a'+i))
		f := testkit.Transfer(t, guid, nil)
		_, err := led.Claim(ctx, ledger.Request{GUID: guid, TxCode: testkit.TransferTx().Code, Frame: f, Body: f[generated.HeaderLen:]})
		assert.NilError(t, err)
		if to != "" {
			assert.NilError(t, led.Finish(ctx, guid, 1, ledger.Outcome{Why: ledger.Why{Reason: "test"}, State: to, RspCode: "0000", Response: f}))
		}
	}
	assert.DeepEqual(t, only(gather(t, m), "lhrelay_ledger_rows"), map[string]float64{
		`lhrelay_ledger_rows{state="DONE"}`:     2,
		`lhrelay_ledger_rows{state="FAILED"}`:   0,
		`lhrelay_ledger_rows{state="RECEIVED"}`: 0,
		`lhrelay_ledger_rows{state="SENT"}`:     1,
		`lhrelay_ledger_rows{state="UNKNOWN"}`:  1,
	})

	assert.NilError(t, led.Close())
	status, body := get(t, m.Handler(led.Ping), "/metrics")
	assert.Equal(t, status, http.StatusOK, "served despite the ledger")
	assert.Assert(t, strings.Contains(body, "lhrelay_frames_total{rsp_code=\"0000\",tx_code=\"BKTR0001\"} 1\n"), body)
	assert.Assert(t, !strings.Contains(body, "lhrelay_ledger_rows{"), body)
	_, body = get(t, m.Handler(led.Ping), "/metrics")
	assert.Assert(t, strings.Contains(body, "promhttp_metric_handler_errors_total{cause=\"gathering\"} 1"), "the failed scrape counted:\n%s", body)
	status, _ = get(t, m.Handler(led.Ping), "/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable)
}

func BenchmarkFrameAnswered(b *testing.B) {
	m := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.FrameAnswered("BKTR0001", generated.RspHTTP200)
		}
	})
}

// BenchmarkPerFrame is what the relay adds per frame that calls the core:
// in flight up and down, the frame counted, the call observed.
func BenchmarkPerFrame(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.FrameStarted()
		m.CoreCalled("BKTR0001", generated.SourceHTTP200, time.Millisecond)
		m.FrameAnswered("BKTR0001", generated.RspHTTP200)
		m.FrameEnded()
	}
}

// BenchmarkPerFrameUncached is the same with WithLabelValues on every call,
// for comparison with the cache.
func BenchmarkPerFrameUncached(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.InFlight.Inc()
		m.CoreCalls.WithLabelValues("BKTR0001", "HTTP200").Observe(0.001)
		m.Frames.WithLabelValues("BKTR0001", "0000").Inc()
		m.InFlight.Dec()
	}
}
