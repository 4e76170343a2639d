package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/testkit"
)

// logLine is one JSON log record.
type logLine map[string]any

func (oe *observedEnv) lines() []logLine {
	oe.t.Helper()
	var out []logLine
	for _, raw := range strings.Split(strings.TrimSpace(oe.log.String()), "\n") {
		if raw == "" {
			continue
		}
		var l logLine
		assert.NilError(oe.t, json.Unmarshal([]byte(raw), &l), "log line %q", raw)
		out = append(out, l)
	}
	return out
}

// frameLine returns the one "frame" line of guid (the GUID as found at its
// position, for rejected frames too).
func (oe *observedEnv) frameLine(guid string) logLine {
	oe.t.Helper()
	var found []logLine
	for _, l := range oe.lines() {
		if l["msg"] == "frame" && l["guid"] == guid {
			found = append(found, l)
		}
	}
	assert.Equal(oe.t, len(found), 1, "frame lines of %s in\n%s", guid, oe.log)
	return found[0]
}

// frameLines returns the "frame" lines of guid in order.
func (oe *observedEnv) frameLines(guid string) []logLine {
	var found []logLine
	for _, l := range oe.lines() {
		if l["msg"] == "frame" && l["guid"] == guid {
			found = append(found, l)
		}
	}
	return found
}

func TestFrameLogLine(t *testing.T) {
	oe := startObserved(t, observed{level: slog.LevelInfo})
	c := oe.dial()
	guid := testkit.GUID()
	assert.Equal(t, oe.send(c, transferFrame(t, guid)).code(), string(generated.RspHTTP200))

	l := oe.frameLine(guid)
	assert.Equal(t, l["level"], "INFO")
	assert.Equal(t, l["tx"], "BKTR0001")
	assert.Equal(t, l["rsp"], "0000")
	assert.Equal(t, l["state"], "DONE")
	assert.Equal(t, l["attempts"], float64(1))
	assert.Equal(t, l["claim"], "Owned")
	assert.Equal(t, l["status"], float64(200))
	assert.Equal(t, l["remote"], c.LocalAddr().String())
	latency, ok := l["latency_ms"].(float64)
	assert.Assert(t, ok && latency >= 0, "latency_ms %v", l["latency_ms"])
	_, ok = l["core_ms"].(float64)
	assert.Assert(t, ok, "core_ms %v", l["core_ms"])
	assert.DeepEqual(t, l["req"], map[string]any{
		"wdBank": "081", "wdAcct": "11********4005",
		"dpBank": "004", "dpAcct": "22********5006",
		"amount": "50000", "memo": "rent",
	})

	// The retry is answered from the ledger: one more line, the row found.
	assert.Equal(t, oe.send(c, transferFrame(t, guid)).code(), string(generated.RspHTTP200))
	lines := oe.frameLines(guid)
	assert.Equal(t, len(lines), 2)
	replay := lines[1]
	assert.Equal(t, replay["level"], "INFO")
	assert.Equal(t, replay["claim"], "Replay")
	assert.Equal(t, replay["state"], "DONE")
	assert.Equal(t, replay["attempts"], float64(1))
	assert.Equal(t, replay["status"], nil, "the core was not called")

	// The same GUID with another amount: E904 at warn, row unchanged.
	assert.Equal(t, oe.send(c, transferFrame(t, guid, amount(7))).code(), string(generated.RspGUIDReused))
	lines = oe.frameLines(guid)
	assert.Equal(t, len(lines), 3)
	assert.Equal(t, lines[2]["level"], "WARN")
	assert.Equal(t, lines[2]["rsp"], "E904")
	assert.Equal(t, lines[2]["claim"], "Reused")
	assert.Equal(t, lines[2]["state"], "DONE")

	all := oe.log.String()
	assert.Assert(t, !strings.Contains(all, acctRich) && !strings.Contains(all, acctOther), "full account number logged:\n%s", all)
	assert.Assert(t, strings.Contains(all, "11********4005"))
}

func TestFrameLogRejections(t *testing.T) {
	oe := startObserved(t, observed{level: slog.LevelInfo})
	c := oe.dial()

	badGUID := testkit.GUID()
	bad := transferFrame(t, badGUID)
	copy(bad[generated.HeaderLen+34:], "0000000005O00") // letter O in AMOUNT
	assert.Equal(t, oe.send(c, bad).code(), string(generated.RspBadFrame))
	l := oe.frameLine(badGUID)
	assert.Equal(t, l["level"], "WARN")
	assert.Equal(t, l["rsp"], "E102")
	assert.Equal(t, l["tx"], "BKTR0001")
	assert.Equal(t, l["why"], "bad body")
	assert.Equal(t, l["state"], "")
	assert.Equal(t, l["attempts"], float64(0))
	assert.Assert(t, strings.Contains(l["err"].(string), "AMOUNT"), l["err"])
	assert.Equal(t, l["req"], nil, "no fields of a body that did not decode")

	unknownGUID := testkit.GUID()
	unknown := transferFrame(t, unknownGUID)
	copy(unknown[4:12], "BKXX0009")
	assert.Equal(t, oe.send(c, unknown).code(), string(generated.RspUnknownTx))
	l = oe.frameLine(unknownGUID)
	assert.Equal(t, l["level"], "WARN")
	assert.Equal(t, l["rsp"], "E101")
	assert.Equal(t, l["tx"], "BKXX0009")
	assert.Equal(t, l["why"], "TX_CODE not registered")

	// An account field that does not decode: the bytes it refused are
	// masked in the error too.
	acctGUID := testkit.GUID()
	badAcct := transferFrame(t, acctGUID)
	copy(badAcct[generated.HeaderLen+3:], "1100200300400X") // WD_ACCT
	assert.Equal(t, oe.send(c, badAcct).code(), string(generated.RspBadFrame))
	l = oe.frameLine(acctGUID)
	assert.Assert(t, strings.Contains(l["err"].(string), "WD_ACCT"), l["err"])
	assert.Assert(t, strings.Contains(l["err"].(string), "11********400X"), l["err"])
	assert.Assert(t, !strings.Contains(oe.log.String(), "1100200300400X"), oe.log.String())

	// A frame whose framing is lost is answered, logged and closed.
	raw := oe.dial()
	_, err := raw.Write([]byte("x001"))
	assert.NilError(t, err)
	assert.Equal(t, oe.read(raw).code(), string(generated.RspBadFrame))
	expectClosed(t, raw)
	var framing int
	for _, l := range oe.lines() {
		if l["msg"] == "frame" && strings.HasPrefix(l["why"].(string), "length prefix") {
			framing++
			assert.Equal(t, l["level"], "WARN")
			assert.Equal(t, l["rsp"], "E102")
		}
	}
	assert.Equal(t, framing, 1)
}

// TestFrameLogCoreUnreachable: an E902 line (with the core's error) carries
// no account number.
func TestFrameLogCoreUnreachable(t *testing.T) {
	oe := startObserved(t, observed{level: slog.LevelInfo, coreURL: testkit.ClosedURL(t)})
	guid := testkit.GUID()
	assert.Equal(t, oe.roundTrip(inquiryFrame(t, guid, acctRich)).code(), string(generated.RspConnectFail))
	l := oe.frameLine(guid)
	assert.Equal(t, l["level"], "WARN")
	assert.Equal(t, l["state"], "FAILED")
	assert.Equal(t, l["status"], float64(0))
	assert.Assert(t, strings.Contains(l["err"].(string), "connection refused"), l["err"])
	assert.Assert(t, !strings.Contains(oe.log.String(), acctRich), oe.log.String())
}

// TestMaskedError: an error quoting the core call's URL (an inquiry puts the
// account in its path) or an account field's refused bytes is masked.
func TestMaskedError(t *testing.T) {
	tx, _ := generated.LookupTransaction("BKIQ0001")
	req := tx.NewRequest()
	assert.NilError(t, req.Decode("081"+acctRich))
	err := fmt.Errorf(`Get "http://core/v1/accounts/LHB/%s": EOF`, acctRich)
	assert.Equal(t, maskedError(err, tx, req), `Get "http://core/v1/accounts/LHB/11********4005": EOF`)

	err = req.Decode("0811100200300400X")
	assert.ErrorContains(t, err, "1100200300400X")
	assert.Assert(t, strings.Contains(maskedError(fmt.Errorf("bad body: %w", err), tx, nil), `got "11********400X"`))

	err = req.Decode("08X" + acctRich) // not an account field: kept
	assert.Assert(t, strings.Contains(maskedError(err, tx, nil), `got "08X"`))
}

// TestFrameLogDebugUnmasked: at debug level the request is logged as
// received, unmasked, in its own debug line; the info line stays masked.
func TestFrameLogDebugUnmasked(t *testing.T) {
	oe := startObserved(t, observed{level: slog.LevelDebug})
	guid := testkit.GUID()
	assert.Equal(t, oe.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))

	var full int
	for _, l := range oe.lines() {
		raw, _ := json.Marshal(l)
		if !strings.Contains(string(raw), acctRich) {
			continue
		}
		full++
		assert.Equal(t, l["level"], "DEBUG", "full account number above debug: %s", raw)
		assert.Equal(t, l["msg"], "frame received")
		assert.Equal(t, l["guid"], guid)
		assert.Equal(t, l["req"].(map[string]any)["wdAcct"], acctRich)
	}
	assert.Equal(t, full, 1)
	assert.DeepEqual(t, oe.frameLine(guid)["req"].(map[string]any)["wdAcct"], "11********4005")
}

// TestFrameLogText: the text handler gets the same line.
func TestFrameLogText(t *testing.T) {
	oe := startObserved(t, observed{level: slog.LevelInfo, text: true})
	guid := testkit.GUID()
	assert.Equal(t, oe.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))
	log := oe.log.String()
	for _, want := range []string{"level=INFO msg=frame guid=" + guid, " tx=BKTR0001 rsp=0000 state=DONE attempts=1 latency_ms=", " req.wdAcct=11********4005 "} {
		assert.Assert(t, strings.Contains(log, want), "missing %q in\n%s", want, log)
	}
}

// TestShutdownLogLines: Shutdown says how many frames were in flight and
// that they were finished.
func TestShutdownLogLines(t *testing.T) {
	g := testkit.NewGate(16)
	oe := startObserved(t, observed{core: gatedSim(g), level: slog.LevelInfo})
	c := oe.dial()
	guid := testkit.GUID()
	_, err := c.Write(transferFrame(t, guid))
	assert.NilError(t, err)
	g.WaitArrival(t)

	stopping := oe.logW.When("relay stopping")
	stopped := make(chan error, 1)
	go func() { stopped <- oe.srv.Shutdown(context.Background()) }()
	<-stopping
	g.Open()
	assert.Equal(t, oe.read(c).code(), string(generated.RspHTTP200))
	assert.NilError(t, <-stopped)

	var begin, end logLine
	for _, l := range oe.lines() {
		switch l["msg"] {
		case "relay stopping: not accepting; finishing the frames in flight":
			begin = l
		case "relay stopped":
			end = l
		}
	}
	assert.Assert(t, begin != nil && end != nil, oe.log.String())
	assert.Equal(t, begin["in_flight"], float64(1))
	assert.Equal(t, end["in_flight_finished"], float64(1))
	_, ok := end["took_ms"].(float64)
	assert.Assert(t, ok, "took_ms %v", end["took_ms"])
	assert.Equal(t, oe.row(guid).State, ledger.StateDone)
}

func TestMaskAccount(t *testing.T) {
	for in, want := range map[string]string{
		"11002003004005": "11********4005",
		"1234567":        "12*4567",
		"123456":         "******",
		"12":             "**",
		"":               "",
	} {
		assert.Equal(t, maskAccount(in), want, in)
	}
}

// BenchmarkFrameLine is the cost of one frame's info line (JSON, to
// io.Discard) and its metrics, after a core call.
func BenchmarkFrameLine(b *testing.B) {
	for _, bc := range []struct {
		name  string
		level slog.Level
	}{{"warn", slog.LevelWarn}, {"info", slog.LevelInfo}} {
		b.Run(bc.name, func(b *testing.B) {
			benchFrameDone(b, &Server{log: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: bc.level})), base: context.Background(), metrics: metrics.New()},
				0, corecall.Result{})
		})
	}
}
