package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
)

func TestMetricsAddrArgs(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, run(context.Background(), []string{"--metrics-addr", "9300"}, &stdout, &stderr), 2)
	assert.Assert(t, strings.Contains(stderr.String(), "--metrics-addr"), stderr.String())

	o, err := parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.metricsAddr, "", "off by default")
}

// TestRunWithMetrics runs the command with --metrics-addr and a JSON log:
// the startup line names every setting, the endpoints answer, a frame is
// counted, and the stop is logged.
func TestRunWithMetrics(t *testing.T) {
	r := startRun(t, "--timeout", "1.5", "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--max-conns", "7")
	addr, stderr := r.addr, r.stderr
	assert.Assert(t, r.lines.Scan(), "no metrics line; stderr:\n%s", stderr.String())
	metricsURL, ok := strings.CutPrefix(r.lines.Text(), "metrics listening on ")
	assert.Assert(t, ok, r.lines.Text())
	r.drain()

	started := logLine(t, stderr.String(), "relay started")
	_, port, _ := net.SplitHostPort(addr)
	assert.Equal(t, started["addr"], addr)
	assert.Equal(t, started["port"], mustFloat(t, port))
	assert.Equal(t, started["core"], r.coreURL)
	assert.Equal(t, started["db"], r.db)
	assert.Equal(t, started["timeout"], "1.5s")
	assert.Equal(t, started["frame_timeout"], "10s")
	assert.Equal(t, started["idle_timeout"], "300s")
	assert.Equal(t, started["max_conns"], float64(7))
	assert.Equal(t, "http://"+started["metrics_addr"].(string), metricsURL)

	for _, path := range []string{"/healthz", "/readyz"} {
		status, body := httpGet(t, metricsURL+path)
		assert.Equal(t, status, http.StatusOK, "%s: %s", path, body)
	}

	guid := "00000000000000000000000000c0ffee"
	sendTransfer(t, addr, guid)

	// The 0000 goes out while its DONE is being committed, so the row
	// count may trail the answer by a commit.
	var body string
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		_, body = httpGet(t, metricsURL+"/metrics")
		if !strings.Contains(body, `lhrelay_ledger_rows{state="DONE"} 1`+"\n") {
			return poll.Continue("no DONE row counted yet")
		}
		return poll.Success()
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(5*time.Millisecond))
	for _, want := range []string{
		`lhrelay_frames_total{rsp_code="0000",tx_code="BKTR0001"} 1`,
		`lhrelay_core_call_seconds_count{outcome="HTTP200",tx_code="BKTR0001"} 1`,
	} {
		assert.Assert(t, strings.Contains(body, want+"\n"), "missing %q", want)
	}
	f := logLine(t, stderr.String(), "frame")
	assert.Equal(t, f["guid"], guid)
	assert.Equal(t, f["req"].(map[string]any)["wdAcct"], "11********4005")

	r.stopAndWait(t)
	stopped := logLine(t, stderr.String(), "relay stopped")
	assert.Equal(t, stopped["in_flight_finished"], float64(0))
	_, err := http.Get(metricsURL + "/healthz")
	assert.Assert(t, err != nil, "metrics listener closed at exit")
}

// logLine finds the JSON log line with message msg.
func logLine(t *testing.T, log, msg string) map[string]any {
	t.Helper()
	for _, raw := range strings.Split(log, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(raw), &l) == nil && l["msg"] == msg {
			return l
		}
	}
	t.Fatalf("no %q line in\n%s", msg, log)
	return nil
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	assert.NilError(t, json.Unmarshal([]byte(s), &f))
	return f
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	return resp.StatusCode, string(b)
}
