package relay

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/batch"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/testkit"
)

// These tests are about the core's answer as the truth (SPEC 5.5, 6): a
// 200 about another transfer proves nothing; a late answer beats an early
// settle; an answer for a row re-claimed since is reported, not recorded.

// resolveNow runs resolve's rules against e's core: UNKNOWN rows of any
// age, and SENT rows as if orphaned (the lookup that comes too early).
// SQLite keeps updated_at in whole seconds and rounds an age up, so a
// SENT row is selected once the second it was claimed in is past: the
// run is repeated until it selects something, within a deadline.
func resolveNow(t *testing.T, e *env) *batch.Summary {
	t.Helper()
	core, err := corecall.New(corecall.Config{BaseURL: e.core.URL})
	assert.NilError(t, err)
	defer core.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for {
		sum, err := batch.Resolve(context.Background(), e.led, core, batch.ResolveConfig{StaleSent: time.Nanosecond, Now: time.Now()})
		assert.NilError(t, err)
		if sum.Count("selected") > 0 {
			return sum
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("resolve selected no row within 5 s")
		}
	}
}

// aboutGUID answers every POST with the simulator's 200 rewritten to be
// about another GUID (about) or about none ("-"); lookups are the
// simulator's own.
func aboutGUID(sim http.Handler, about string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			sim.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, r)
		body := rec.Body.String()
		guid := `"guid":"` + r.Header.Get("X-GUID") + `"`
		if about == "-" {
			body = strings.Replace(body, guid+",", "", 1)
		} else {
			body = strings.Replace(body, guid, `"guid":"`+about+`"`, 1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		w.Write([]byte(body))
	})
}

func TestPost200AboutAnotherTransferIsUnknownThenSettledByLookup(t *testing.T) {
	for name, about := range map[string]string{"another guid": "fedcba9876543210fedcba9876543210", "no guid": "-"} {
		t.Run(name, func(t *testing.T) {
			sim := simCore(0)
			e := startEnv(t, envConfig{core: aboutGUID(sim, about), ledger: true})
			guid := testkit.GUID()
			frame := transferFrame(t, guid)

			assert.Equal(t, e.roundTrip(frame).code(), string(generated.RspReadTimeout))
			row := e.row(guid)
			assert.Equal(t, row.State, ledger.StateUnknown)
			assert.Equal(t, sim.PostCount(guid), 1)
			assert.Check(t, is.Contains(e.log.String(), "the answer is not about GUID "+guid))

			// The lookup is about this transfer: settled DONE, and the
			// retry replays it without a second POST.
			sum := resolveNow(t, e)
			assert.Equal(t, sum.Count("done"), 1)
			row = e.row(guid)
			assert.Equal(t, row.State, ledger.StateDone)
			retry := e.roundTrip(frame)
			assert.Equal(t, retry.code(), string(generated.RspHTTP200))
			assert.Assert(t, bytes.Equal(retry.raw, row.Response), "a replay, byte for byte")
			assert.Equal(t, sim.PostCount(guid), 1)
		})
	}
}

// holdFirst is a simulator holding at g the first POST for guid; a later
// one (the resend) passes.
func holdFirst(guid string) (*testkit.Gate, *coresim.Server) {
	var seen atomic.Bool
	g := testkit.NewGate(16).Only(func(r *http.Request) bool {
		return testkit.ForGUID(guid)(r) && r.Method == http.MethodPost && !seen.Swap(true)
	})
	return g, gatedSim(g)
}

// heldEarlySettled is a transfer whose POST the core holds at its door
// while a lookup settles its row FAILED/E902 too early (resolveNow):
// g.Open lets the core post it, and answered gets the channel's answer.
type heldEarlySettled struct {
	e        *env
	guid     string
	frame    []byte
	g        *testkit.Gate
	sim      *coresim.Server
	answered chan rawAnswer
	settled  *batch.Summary // the early lookup's
}

// settleEarly starts a relay with a ledger (and cfg's metrics) and a held
// transfer, and settles it too early.
func settleEarly(t *testing.T, cfg envConfig) heldEarlySettled {
	h := heldEarlySettled{guid: testkit.GUID(), answered: make(chan rawAnswer, 1)}
	h.g, h.sim = holdFirst(h.guid)
	h.e = startEnv(t, envConfig{core: h.sim, ledger: true, metrics: cfg.metrics})
	h.frame = transferFrame(t, h.guid)
	start := make(chan struct{})
	sendAsync(h.e.dial(), h.frame, start, h.answered)
	close(start)
	h.g.WaitArrival(t)
	// A lookup while the POST is held at the core's door: not posted yet.
	h.settled = resolveNow(t, h.e)
	return h
}

func TestLateAnswerAfterAnEarlySettleIsRecorded(t *testing.T) {
	h := settleEarly(t, envConfig{})
	e, guid, sim := h.e, h.guid, h.sim
	assert.Equal(t, h.settled.Count("failed"), 1)
	assert.Equal(t, e.row(guid).State, ledger.StateFailed)

	h.g.Open()
	a := next(t, h.answered, time.After(10*time.Second), "the held call's answer")
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	row := e.row(guid)
	assert.Equal(t, row.State, ledger.StateDone, "the core's late answer is recorded over the early settle")
	assert.Equal(t, row.Attempts, 1)
	assert.Assert(t, bytes.Equal(row.Response, a.raw))
	assert.Equal(t, e.led.LateAnswers(), uint64(1))

	// reprocess finds nothing to resend; the channel's retry is a replay.
	retry := e.roundTrip(h.frame)
	assert.Assert(t, bytes.Equal(retry.raw, a.raw))
	assert.Equal(t, sim.PostCount(guid), 1)
}

// TestLateAnswerAfterALookupFoundThePostingIsNoAlarm: a row settled
// FAILED too early and then DONE from a lookup that found the posting
// (reprocess does so before it would resend), not re-claimed: the core's
// late 200 for that very call finds the row holding it already. The row
// is left as it is, and the relay says so at info level: no error, no
// conflict, nothing posted twice.
func TestLateAnswerAfterALookupFoundThePostingIsNoAlarm(t *testing.T) {
	h := settleEarly(t, envConfig{})
	e, guid, sim := h.e, h.guid, h.sim
	settled := []byte("the row as a lookup 200 settled it")
	assert.NilError(t, e.led.TransitionOfAttempts(context.Background(), guid, ledger.StateFailed, 1, ledger.Outcome{
		State: ledger.StateDone, RspCode: string(generated.RspHTTP200), Response: settled,
		Why: ledger.Why{Reason: "test: lookup 200, posted already (as reprocess settles it)"}}))

	h.g.Open()
	a := next(t, h.answered, time.After(10*time.Second), "the held call's answer")
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	e.srv.WaitRecorded()
	row := e.row(guid)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.Equal(t, row.Attempts, 1)
	assert.Assert(t, bytes.Equal(row.Response, settled), "the row is left as the lookup settled it")
	assert.Equal(t, e.led.Conflicts(), uint64(0))
	assert.Check(t, is.Contains(e.log.String(), "level=INFO msg=\"ledger: outcome already recorded"))
	assert.Check(t, !strings.Contains(e.log.String(), "level=ERROR"), e.log.String())
	assert.Equal(t, sim.PostCount(guid), 1)
}

func TestLateAnswerAfterAReclaimIsReportedAndLeftAlone(t *testing.T) {
	m := metrics.New()
	h := settleEarly(t, envConfig{metrics: m})
	e, guid, sim, frame := h.e, h.guid, h.sim, h.frame
	m.WatchLedger(e.led)
	// The channel's resend re-claims the row and is posted.
	second := e.roundTrip(frame)
	assert.Equal(t, second.code(), string(generated.RspHTTP200))
	assert.Equal(t, e.row(guid).Attempts, 2)

	h.g.Open()
	next(t, h.answered, time.After(10*time.Second), "the held call's answer")
	e.srv.WaitRecorded()
	row := e.row(guid)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.Equal(t, row.Attempts, 2)
	assert.Assert(t, bytes.Equal(row.Response, second.raw), "the row re-claimed since is left alone")
	assert.Equal(t, e.led.Conflicts(), uint64(1))
	assert.Check(t, is.Contains(e.log.String(), "level=ERROR msg=\"ledger conflict"))
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Check(t, is.Contains(rec.Body.String(), "lhrelay_ledger_conflicts_total 1\n"))
	assert.Equal(t, sim.PostCount(guid), 2, "the double posting the report is about")
}
