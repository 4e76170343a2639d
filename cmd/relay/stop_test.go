package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// TestStopDropsAHalfArrivedFrame is SPEC 5.8 under a dripping channel: at
// SIGTERM one connection holds half a frame and another a transfer whose
// core call is in flight. The transfer is answered and recorded, the half
// frame is dropped unprocessed with a log line saying so at the stop's
// bound (--timeout), and the command exits 0 within --timeout plus a
// second, not "cut short".
func TestStopDropsAHalfArrivedFrame(t *testing.T) {
	const timeout = 2 * time.Second
	sim := coresim.New(coresim.Config{})
	atCore, release := make(chan struct{}, 1), make(chan struct{})
	held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			atCore <- struct{}{}
			<-release
		}
		sim.ServeHTTP(w, r)
	})
	r := startRunCore(t, held, "--timeout", "2", "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
	assert.Assert(t, r.lines.Scan(), "no metrics line; stderr:\n%s", r.stderr.String())
	metricsURL, _ := strings.CutPrefix(r.lines.Text(), "metrics listening on ")
	r.drain()

	const guid = "000000000000000000000000000d0001"
	answer := make(chan []byte, 1)
	go func() { answer <- sendTransfer(t, r.addr, guid) }()
	<-atCore

	const halfGUID = "000000000000000000000000000d0002"
	frame := testkit.Transfer(t, halfGUID, map[string]string{"memo": "half"})
	half, err := net.Dial("tcp", r.addr)
	assert.NilError(t, err)
	defer half.Close()
	const sent = 60 // the header's GUID and a little more
	_, err = half.Write(frame[:sent])
	assert.NilError(t, err)
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if _, body := httpGet(t, metricsURL+"/metrics"); !strings.Contains(body, "lhrelay_frames_in_flight 2\n") {
			return poll.Continue("the half frame is not being read yet")
		}
		return poll.Success()
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(5*time.Millisecond))

	stopped := time.Now()
	r.stop() // as SIGTERM does
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if !strings.Contains(r.stderr.String(), `"msg":"relay stopping`) {
			return poll.Continue("not stopping yet")
		}
		return poll.Success()
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(time.Millisecond))
	close(release)

	assert.Equal(t, string(generated.RawHeader(<-answer).RspCode), string(generated.RspHTTP200), "the transfer in flight is answered")
	bound := timeout + stopMargin
	select {
	case code := <-r.exit:
		assert.Equal(t, code, 0, r.stderr.String())
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("relay still running %s after the stop began; stderr:\n%s", time.Since(stopped), r.stderr.String())
	}
	assert.Assert(t, time.Since(stopped) < timeout+time.Second, "exited %s after the stop, bound %s", time.Since(stopped), timeout)

	log := r.stderr.String()
	assert.Assert(t, !strings.Contains(log, "cut short"), log)
	dropped := logLine(t, log, "frame dropped unprocessed: the relay stopped before it arrived whole")
	assert.Equal(t, dropped["bytes_received"], float64(sent))
	assert.Equal(t, logLine(t, log, "relay stopped")["dropped_unarrived"], float64(1))

	half.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := half.Read(make([]byte, 1))
	assert.Assert(t, n == 0 && (errors.Is(err, io.EOF) || isReset(err)), "no answer to the half frame: %d, %v", n, err)

	led, err := ledger.OpenExisting(r.db)
	assert.NilError(t, err)
	defer led.Close()
	row, err := led.Get(context.Background(), guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateDone)

	// The last head of the relay's history chain is in its log: an anchor
	// the database cannot rewrite. It is the head history_chain holds.
	head := logLine(t, log, "history chain head at stop")
	es, err := led.History(context.Background(), guid)
	assert.NilError(t, err)
	last := es[len(es)-1]
	assert.Equal(t, head["chain"], last.Chain)
	chains, err := led.Chains(context.Background())
	assert.NilError(t, err)
	for _, c := range chains {
		if c.Chain == last.Chain {
			assert.Equal(t, head["seq"], float64(c.Seq))
			assert.Equal(t, head["hash"], c.Hash)
		}
	}
	_, err = led.Get(context.Background(), halfGUID)
	assert.ErrorIs(t, err, ledger.ErrNotFound, "the half frame was never processed")
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
