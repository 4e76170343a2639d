package relay

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/metrics"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

var _ Metrics = (*metrics.Metrics)(nil)

// observed configures startObserved: a relay with a ledger in front of the
// simulated core, with a chosen log handler and, optionally, metrics served
// over HTTP.
type observed struct {
	core     http.Handler // default: the simulator
	coreURL  string       // used when core is nil and this is set
	level    slog.Level
	text     bool // a text handler instead of JSON
	metrics  bool
	maxConns int
	// more sets the rest of the env's configuration (TLS, allow-list,
	// breaker).
	more func(*envConfig)
}

// observedEnv is an env plus the metrics and their HTTP endpoint.
type observedEnv struct {
	*env
	m          *metrics.Metrics
	metricsURL string
	logW       *testkit.SyncBuffer // the relay's log, with When
}

func startObserved(t *testing.T, o observed) *observedEnv {
	t.Helper()
	oe := &observedEnv{}
	if o.metrics {
		oe.m = metrics.New()
	}
	if o.core == nil && o.coreURL == "" {
		o.core = simCore(0)
	}
	ec := envConfig{
		core: o.core, coreURL: o.coreURL, ledger: true, maxConns: o.maxConns, metrics: oe.m,
		logger: func(buf *testkit.SyncBuffer) *slog.Logger {
			oe.logW = buf
			opts := &slog.HandlerOptions{Level: o.level}
			if o.text {
				return slog.New(slog.NewTextHandler(oe.logW, opts))
			}
			return slog.New(slog.NewJSONHandler(oe.logW, opts))
		},
	}
	if o.more != nil {
		o.more(&ec)
	}
	oe.env = startEnv(t, ec)
	if o.metrics {
		oe.m.WatchLedger(oe.led)
		oe.m.WatchBreaker(ec.breaker)
		hs := httptest.NewServer(oe.m.Handler(oe.srv.Ready))
		t.Cleanup(hs.Close)
		oe.metricsURL = hs.URL
	}
	return oe
}

// get fetches path from the metrics endpoint and returns status and body.
func (oe *observedEnv) get(path string) (int, string) {
	oe.t.Helper()
	resp, err := http.Get(oe.metricsURL + path)
	assert.NilError(oe.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(oe.t, err)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics into series (name and labels, as exposed) → value.
func (oe *observedEnv) scrape() map[string]string {
	oe.t.Helper()
	status, body := oe.get("/metrics")
	assert.Equal(oe.t, status, http.StatusOK, body)
	series := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series[line[:i]] = line[i+1:]
	}
	return series
}

// withPrefix lists the series of one metric.
func withPrefix(series map[string]string, name string) map[string]string {
	out := map[string]string{}
	for k, v := range series {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// TestMetricsEndToEnd sends frames through a relay with a ledger and
// metrics, and reads the counters back over HTTP as Prometheus would.
func TestMetricsEndToEnd(t *testing.T) {
	gone := make(chan struct{}, 4)
	oe := startObserved(t, observed{metrics: true, maxConns: 1, more: func(ec *envConfig) {
		ec.noRoomFor = time.Nanosecond
		ec.connDone = func() { gone <- struct{}{} }
	}})
	c := oe.dial()

	guid := testkit.GUID()
	first := oe.send(c, transferFrame(t, guid))
	assert.Equal(t, first.code(), string(generated.RspHTTP200))

	bad := transferFrame(t, testkit.GUID())
	copy(bad[generated.HeaderLen+34:], "0000000005O00") // letter O in AMOUNT
	assert.Equal(t, oe.send(c, bad).code(), string(generated.RspBadFrame))

	unknown := transferFrame(t, testkit.GUID())
	copy(unknown[4:12], "BKXX0009")
	assert.Equal(t, oe.send(c, unknown).code(), string(generated.RspUnknownTx))

	assert.Equal(t, oe.send(c, transferFrame(t, guid)).code(), string(generated.RspHTTP200), "replay")

	// MaxConns is 1 and c is open: the next connection is refused.
	extra := oe.dial()
	extra.Write(transferFrame(t, testkit.GUID()))
	expectClosed(t, extra) // counted before it was closed

	s := oe.scrape()
	assert.DeepEqual(t, withPrefix(s, "lhrelay_frames_total"), map[string]string{
		`lhrelay_frames_total{rsp_code="0000",tx_code="BKTR0001"}`: "2",
		`lhrelay_frames_total{rsp_code="E102",tx_code="BKTR0001"}`: "1",
		`lhrelay_frames_total{rsp_code="E101",tx_code="unknown"}`:  "1",
	})
	assert.Equal(t, s[`lhrelay_core_call_seconds_count{outcome="HTTP200",tx_code="BKTR0001"}`], "1")
	assert.Equal(t, len(withPrefix(s, "lhrelay_core_call_seconds_count")), 1, "the replay and the rejections did not call the core")
	assert.Equal(t, s["lhrelay_frames_in_flight"], "0")
	assert.Equal(t, s["lhrelay_connections_open"], "1")
	assert.Equal(t, s["lhrelay_connections_rejected_total"], "1")
	assert.DeepEqual(t, withPrefix(s, "lhrelay_ledger_rows"), map[string]string{
		`lhrelay_ledger_rows{state="DONE"}`:     "1",
		`lhrelay_ledger_rows{state="SENT"}`:     "0",
		`lhrelay_ledger_rows{state="RECEIVED"}`: "0",
		`lhrelay_ledger_rows{state="UNKNOWN"}`:  "0",
		`lhrelay_ledger_rows{state="FAILED"}`:   "0",
	})
	assert.Equal(t, s["lhrelay_ledger_oldest_unknown_age_seconds"], "0")
	for k := range s {
		assert.Assert(t, !strings.Contains(k, "BKXX"), "raw TX_CODE in a label: %s", k)
	}

	status, _ := oe.get("/healthz")
	assert.Equal(t, status, http.StatusOK)
	status, _ = oe.get("/livez")
	assert.Equal(t, status, http.StatusOK)
	// Full (MaxConns 1, c open) and refusing: not ready, and it says why.
	status, body := oe.get("/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable)
	assert.Assert(t, strings.Contains(body, "no room"), body)
	c.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not notice the channel closing")
	}
	status, body = oe.get("/readyz")
	assert.Equal(t, status, http.StatusOK, body)

	// A ledger that no longer answers: not ready, and /metrics still
	// serves everything else. The database's own error is in the log only.
	assert.NilError(t, oe.led.Close())
	status, body = oe.get("/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable)
	assert.Assert(t, strings.Contains(body, "ledger does not answer"), body)
	assert.Assert(t, strings.Contains(oe.logW.String(), "ledger closed"), "the cause is logged")
	status, body = oe.get("/metrics")
	assert.Equal(t, status, http.StatusOK)
	assert.Assert(t, strings.Contains(body, `lhrelay_frames_total{rsp_code="0000",tx_code="BKTR0001"} 2`), body)
	status, _ = oe.get("/healthz")
	assert.Equal(t, status, http.StatusOK, "alive, though not ready")
}

// TestReadyzWhileStopping: /readyz says 503 from the moment the relay
// begins to stop; once stopped no connection is counted open.
func TestReadyzWhileStopping(t *testing.T) {
	oe := startObserved(t, observed{metrics: true})
	c := oe.dial()
	assert.Equal(t, oe.send(c, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, oe.scrape()["lhrelay_connections_open"], "1")

	assert.NilError(t, oe.srv.Shutdown(context.Background()))
	status, body := oe.get("/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable)
	assert.Assert(t, strings.Contains(body, "stopping"), body)
	s := oe.scrape()
	assert.Equal(t, s["lhrelay_connections_open"], "0")
	assert.Equal(t, s["lhrelay_frames_in_flight"], "0")
}

// TestMetricsFrameInFlight: a frame held at the core counts in flight; the
// other outcomes are counted by their source.
func TestMetricsFrameInFlight(t *testing.T) {
	g := testkit.NewGate(16)
	oe := startObserved(t, observed{core: gatedSim(g), metrics: true})
	slow := oe.dial()
	_, err := slow.Write(transferFrame(t, testkit.GUID()))
	assert.NilError(t, err)
	g.WaitArrival(t)
	assert.Equal(t, oe.scrape()["lhrelay_frames_in_flight"], "1")
	g.Open()
	assert.Equal(t, oe.read(slow).code(), string(generated.RspHTTP200))
	assert.Equal(t, oe.scrape()["lhrelay_frames_in_flight"], "0")
}

// BenchmarkRelayMetrics is BenchmarkRelayOverhead's relay leg with and
// without metrics (and with the per-frame info line written to
// io.Discard), at concurrency 1, to show what instrumentation costs.
//
//	go test -run '^$' -bench RelayMetrics -benchtime 2s ./internal/relay/
func BenchmarkRelayMetrics(b *testing.B) {
	for _, bc := range []struct {
		name    string
		metrics bool
		level   slog.Level
	}{
		{"plain", false, slog.LevelWarn},
		{"metrics", true, slog.LevelWarn},
		{"metrics+infolog", true, slog.LevelInfo},
	} {
		b.Run(bc.name, func(b *testing.B) {
			core := httptest.NewServer(simCore(0))
			defer core.Close()
			client, err := corecall.New(corecall.Config{BaseURL: core.URL, Timeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer client.CloseIdleConnections()
			cfg := Config{Core: client, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: bc.level}))}
			if bc.metrics {
				cfg.Metrics = metrics.New()
			}
			srv, addr := serveBench(b, cfg)
			defer srv.Close()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			var seq uint64
			frame := transferFrame(b, testkit.GUID(), amount(1))
			var answer []byte
			runLoad(b, 1, func(int) func() error {
				return func() error {
					seq++
					appendGUID(frame[12:12], seq%(1<<16))
					if _, err := conn.Write(frame); err != nil {
						return err
					}
					answer, err = wire.ReadFrame(br, answer[:0])
					return err
				}
			})
		})
	}
}
