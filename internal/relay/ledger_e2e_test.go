package relay

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// These tests drive the relay end to end: real TCP channels on 127.0.0.1, a
// real ledger file in t.TempDir() (WAL, synchronous=FULL, group commit) and a
// real HTTP core (the simulator, behind httptest). They check the
// idempotency promises of SPEC §6 from the outside: what the channel gets,
// what reaches the core, and what the ledger file holds afterwards.

// rawAnswer is one answer read by a channel goroutine; the test goroutine
// checks it (assertions must not run on other goroutines).
type rawAnswer struct {
	raw []byte
	err error
}

// sendAsync writes frame on c and reads the answer, on its own goroutine,
// once start is closed.
func sendAsync(c net.Conn, frame []byte, start <-chan struct{}, out chan<- rawAnswer) {
	go func() {
		<-start
		if _, err := c.Write(frame); err != nil {
			out <- rawAnswer{err: fmt.Errorf("write: %w", err)}
			return
		}
		raw, err := wire.ReadFrame(c, nil)
		out <- rawAnswer{raw: raw, err: err}
	}()
}

// next receives one answer or fails the test at the deadline.
func next(t *testing.T, answers <-chan rawAnswer, deadline <-chan time.Time, what string) answer {
	t.Helper()
	select {
	case r := <-answers:
		assert.NilError(t, r.err, what)
		return parseAnswer(t, r.raw)
	case <-deadline:
		t.Fatalf("timed out waiting for %s", what)
		return answer{}
	}
}

// TestE2EOneGUIDHundredFrames: 100 channels send the same frame at once
// while the core holds the first call. Exactly one call reaches the core;
// the 99 others are answered E903 while that call is still held (so none of
// them waited for the core); once the core answers, the owner gets 0000 and
// the core has posted the GUID once.
func TestE2EOneGUIDHundredFrames(t *testing.T) {
	const n = 100
	// Room for every arrival, so that a broken relay sending duplicates
	// fails this test instead of blocking the core's handlers.
	core := testkit.NewGate(n)
	defer core.Open()
	sim := gatedSim(core)
	e := startEnv(t, envConfig{core: sim, ledger: true, timeout: 30 * time.Second})

	guid := testkit.GUID()
	frame := transferFrame(t, guid)
	start := make(chan struct{})
	answers := make(chan rawAnswer, n)
	for range n {
		sendAsync(e.dial(), frame, start, answers)
	}
	close(start) // all 100 write at once

	deadline := time.After(10 * time.Second)
	arrivals := 0
	arrived := func(g string) {
		t.Helper()
		arrivals++
		assert.Equal(t, g, guid)
		assert.Assert(t, arrivals == 1, "a second request reached the core")
	}
	for inProgress := 0; inProgress < n-1; {
		// The core is held: nothing but E903 can be answered yet. A
		// duplicate that reached the core would be held too, and the
		// count of 99 would never be reached.
		select {
		case g := <-core.Arrived():
			arrived(g)
		case r := <-answers:
			assert.NilError(t, r.err)
			a := parseAnswer(t, r.raw)
			inProgress++
			assert.Equal(t, a.code(), string(generated.RspInProgress), "answer %d of %d while the core call is held", inProgress, n)
			assert.Equal(t, a.hdr.GUID, guid)
			assert.Equal(t, len(a.raw), generated.HeaderLen, "E903 has no body")
		case <-deadline:
			t.Fatalf("timed out with %d E903 answers and %d requests at the core", inProgress, arrivals)
		}
	}
	// Still held: exactly one request is at the core, and it was this GUID.
	if arrivals == 0 {
		arrived(core.WaitArrival(t))
	}
	assert.Equal(t, len(core.Arrived()), 0, "a second request reached the core")
	assert.Equal(t, sim.Stats().Calls, 0, "the held call has not been let through yet")
	select {
	case r := <-answers:
		t.Fatalf("the owner was answered before the core answered: %q %v", r.raw, r.err)
	default:
	}

	core.Open()
	owner := next(t, answers, deadline, "the owner's answer")
	assert.Equal(t, owner.code(), string(generated.RspHTTP200))
	assert.Equal(t, sim.Stats().ByGUID[guid], 1)
	assert.Equal(t, sim.Stats().Calls, 1)
	assert.Equal(t, sim.PostCount(guid), 1)
	r := e.row(guid)
	assert.Equal(t, r.State, ledger.StateDone)
	assert.Equal(t, r.Attempts, 1)
	assert.DeepEqual(t, r.Response, owner.raw)
}

// stateCheck sends further requests for a GUID whose row exists.
type stateCheck struct {
	e     *env
	calls func() int64 // HTTP requests the core has received
	guid  string
}

// sendUnchanged asserts that frames which must not touch the row (replays,
// E901, E904) left it exactly as it was and did not call the core.
func (s stateCheck) sendUnchanged(t *testing.T, frame []byte, want generated.RspCode) answer {
	t.Helper()
	before := s.e.row(s.guid)
	calls := s.calls()
	a := s.e.roundTrip(frame)
	assert.Equal(t, a.code(), string(want))
	assert.Equal(t, a.hdr.GUID, s.guid)
	assert.Equal(t, s.calls(), calls, "the core was called for a %s answer", want)
	assert.DeepEqual(t, s.e.row(s.guid), before)
	return a
}

// guidReused sends the same GUID with a different amount, and with a
// different TX_CODE: E904 both times, no core call, row unchanged.
func (s stateCheck) guidReused(t *testing.T) {
	t.Helper()
	a := s.sendUnchanged(t, transferFrame(t, s.guid, amount(1)), generated.RspGUIDReused)
	assert.Equal(t, len(a.raw), generated.HeaderLen, "E904 has no body")
	s.sendUnchanged(t, inquiryFrame(t, s.guid, acctRich), generated.RspGUIDReused)
}

// newSentAt returns frame with another SENT_AT: a channel's retry of the
// same request.
func newSentAt(frame []byte, sentAt string) []byte {
	f := bytes.Clone(frame)
	copy(f[55:69], sentAt)
	return f
}

// TestE2EStoredStates: what a request finds in each state of SPEC §6, on
// its way through the real relay and ledger file.
func TestE2EStoredStates(t *testing.T) {
	t.Run("DONE replays byte for byte without a call", func(t *testing.T) {
		sim := simCore(0)
		core := &counting{h: sim}
		e := startEnv(t, envConfig{core: core, ledger: true})
		guid := testkit.GUID()
		frame := transferFrame(t, guid)
		first := e.roundTrip(frame)
		assert.Equal(t, first.code(), string(generated.RspHTTP200))
		r := e.row(guid)
		assert.Equal(t, r.State, ledger.StateDone)
		assert.Equal(t, r.RspCode, string(generated.RspHTTP200))
		assert.DeepEqual(t, r.Response, first.raw)
		assert.DeepEqual(t, r.Request, frame)

		s := stateCheck{e: e, calls: core.calls.Load, guid: guid}
		for _, retry := range [][]byte{frame, newSentAt(frame, "20261130000000"), newSentAt(frame, "20271231235959")} {
			again := s.sendUnchanged(t, retry, generated.RspHTTP200)
			assert.Assert(t, bytes.Equal(again.raw, first.raw), "replay differs:\n%q\n%q", again.raw, first.raw)
		}
		s.guidReused(t)
		assert.Equal(t, core.calls.Load(), int64(1))
		assert.Equal(t, sim.PostCount(guid), 1)
	})

	t.Run("UNKNOWN answers E901 without a call", func(t *testing.T) {
		// The core holds the call past the relay's timeout: E901, UNKNOWN.
		held := testkit.NewGate(16)
		defer held.Open()
		core := &counting{h: gatedSim(held)}
		e := startEnv(t, envConfig{core: core, ledger: true, timeout: 100 * time.Millisecond})
		guid := testkit.GUID()
		frame := transferFrame(t, guid)
		first := e.roundTrip(frame)
		assert.Equal(t, first.code(), string(generated.RspReadTimeout))
		assert.Equal(t, held.WaitArrival(t), guid)
		r := e.row(guid)
		assert.Equal(t, r.State, ledger.StateUnknown)
		assert.Equal(t, r.RspCode, string(generated.RspReadTimeout))
		assert.Equal(t, r.Attempts, 1)

		s := stateCheck{e: e, calls: core.calls.Load, guid: guid}
		again := s.sendUnchanged(t, newSentAt(frame, "20261130000000"), generated.RspReadTimeout)
		assert.Equal(t, len(again.raw), generated.HeaderLen)
		s.guidReused(t)
		assert.Equal(t, core.calls.Load(), int64(1))
		assert.Equal(t, len(held.Arrived()), 0, "never resent")

		es, err := e.led.History(context.Background(), guid)
		assert.NilError(t, err)
		assert.Equal(t, len(es), 2)
		assert.Check(t, es[1].StateAfter == ledger.StateUnknown && es[1].RspAfter == string(generated.RspReadTimeout))
		assert.Check(t, es[1].Took >= 100*time.Millisecond, "took %v", es[1].Took)
	})

	t.Run("FAILED is resent once and ends DONE with attempts 2", func(t *testing.T) {
		sim := simCore(0)
		core := &counting{h: sim}
		e := startEnv(t, envConfig{core: core, ledger: true, dial: refuseFirstDial()})
		guid := testkit.GUID()
		frame := transferFrame(t, guid)
		assert.Equal(t, e.roundTrip(frame).code(), string(generated.RspConnectFail))
		r := e.row(guid)
		assert.Equal(t, r.State, ledger.StateFailed)
		assert.Equal(t, r.RspCode, string(generated.RspConnectFail))
		assert.Equal(t, r.Attempts, 1)
		assert.Equal(t, core.calls.Load(), int64(0), "nothing reached the core")

		// A different request must not re-claim the FAILED row.
		s := stateCheck{e: e, calls: core.calls.Load, guid: guid}
		s.guidReused(t)

		resent := e.roundTrip(newSentAt(frame, "20261130000000"))
		assert.Equal(t, resent.code(), string(generated.RspHTTP200))
		r = e.row(guid)
		assert.Equal(t, r.State, ledger.StateDone)
		assert.Equal(t, r.RspCode, string(generated.RspHTTP200))
		assert.Equal(t, r.Attempts, 2)
		assert.DeepEqual(t, r.Response, resent.raw)
		assert.Equal(t, core.calls.Load(), int64(1))
		assert.Equal(t, sim.PostCount(guid), 1)

		// Now DONE: replayed, and still E904 for a different request.
		again := s.sendUnchanged(t, frame, generated.RspHTTP200)
		assert.Assert(t, bytes.Equal(again.raw, resent.raw))
		s.guidReused(t)

		// One entry per change, none for the refusals and the replay.
		es, err := e.led.History(context.Background(), guid)
		assert.NilError(t, err)
		assert.Equal(t, len(es), 4)
		for i, want := range []struct {
			before, after ledger.State
			reason        string
			status        int
		}{
			{"", ledger.StateSent, "claimed: new GUID", 0},
			{ledger.StateSent, ledger.StateFailed, "core not reached: ", 0},
			{ledger.StateFailed, ledger.StateSent, "re-claimed by the channel's resend", 0},
			{ledger.StateSent, ledger.StateDone, "core answered HTTP 200", 200},
		} {
			assert.Check(t, es[i].StateBefore == want.before && es[i].StateAfter == want.after, "entry %d: %+v", i, es[i])
			assert.Check(t, strings.HasPrefix(es[i].Reason, want.reason), "entry %d: %q", i, es[i].Reason)
			assert.Check(t, es[i].HTTPStatus == want.status, "entry %d: %+v", i, es[i])
			assert.Check(t, es[i].Chain == e.led.ChainHead().Chain)
		}
		assert.Check(t, es[3].Took > 0)
	})

	t.Run("E101 and E102 write no row and leave the GUID free", func(t *testing.T) {
		sim := simCore(0)
		core := &counting{h: sim}
		e := startEnv(t, envConfig{core: core, ledger: true})
		unknownTx, badBody := testkit.GUID(), testkit.GUID()

		f := transferFrame(t, unknownTx)
		copy(f[4:12], "BKZZ0001")
		assert.Equal(t, e.roundTrip(f).code(), string(generated.RspUnknownTx))
		e.noRow(unknownTx)

		f = transferFrame(t, badBody)
		copy(f[generated.HeaderLen+34:], "0000000000000") // AMOUNT 0
		assert.Equal(t, e.roundTrip(f).code(), string(generated.RspBadFrame))
		e.noRow(badBody)
		assert.Equal(t, core.calls.Load(), int64(0))

		// Neither left anything behind that a valid request could trip
		// on: both GUIDs are claimed afresh.
		for _, guid := range []string{unknownTx, badBody} {
			assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))
			r := e.row(guid)
			assert.Equal(t, r.State, ledger.StateDone)
			assert.Equal(t, r.Attempts, 1)
		}
		assert.Equal(t, core.calls.Load(), int64(2))
	})
}

// TestE2EManyChannelsOneLedger: 64 channels, each sending several frames
// with distinct GUIDs on one connection, against one ledger file, while a
// second handle on the same file (an operator's batch command) reads and
// takes the write lock too. Every frame is answered 0000, every row ends
// DONE, and "database is locked" never appears.
func TestE2EManyChannelsOneLedger(t *testing.T) {
	const (
		channels = 64
		frames   = 8
	)
	sim := simCore(0)
	e := startEnv(t, envConfig{core: sim, ledger: true, timeout: 10 * time.Second})

	// The batch command's handle: Stats on the read pool, and a purge that
	// deletes nothing (every row is newer) but takes the write lock on its
	// own connection, as purge does while the relay is serving.
	batch, err := ledger.OpenExisting(e.led.Path())
	assert.NilError(t, err)
	defer batch.Close()
	stop := make(chan struct{})
	batchErr := make(chan error, 1)
	go func() {
		var err error
		defer func() { batchErr <- err }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err = batch.Stats(context.Background()); err != nil {
				return
			}
			if _, err = batch.PurgeDone(context.Background(), time.Hour, false, "purged by the test"); err != nil {
				return
			}
		}
	}()

	commits0 := e.led.Commits()
	type result struct {
		guid string
		raw  []byte
		err  error
	}
	results := make(chan result, channels*frames)
	var wg sync.WaitGroup
	for range channels {
		c := e.dial()
		guids := make([]string, frames)
		reqs := make([][]byte, frames)
		for i := range guids {
			guids[i] = testkit.GUID()
			reqs[i] = transferFrame(t, guids[i], amount(1))
		}
		wg.Go(func() {
			for i, guid := range guids {
				raw, err := roundTripRaw(c, reqs[i])
				results <- result{guid, raw, err}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	close(results)
	assert.NilError(t, <-batchErr, "the batch command's handle")

	n := 0
	for r := range results {
		assert.NilError(t, r.err, r.guid)
		a := parseAnswer(t, r.raw)
		assert.Equal(t, a.hdr.GUID, r.guid)
		assert.Equal(t, a.code(), string(generated.RspHTTP200), "GUID %s", r.guid)
		assert.Equal(t, sim.Stats().ByGUID[r.guid], 1)
		n++
	}
	assert.Equal(t, n, channels*frames)
	assert.Equal(t, sim.Stats().Calls, channels*frames)

	st, err := e.led.Stats(context.Background())
	assert.NilError(t, err)
	assert.Equal(t, st.Total, int64(channels*frames))
	assert.Equal(t, st.ByState[ledger.StateDone], int64(channels*frames))

	log := e.log.String()
	assert.Assert(t, !strings.Contains(strings.ToLower(log), "locked"), "the relay logged a lock error")
	assert.Assert(t, !strings.Contains(log, "level=ERROR"), "the relay logged an error")
	t.Logf("%d transfers, %d group commits (%.2f per transfer)", n, e.led.Commits()-commits0, float64(e.led.Commits()-commits0)/float64(n))
}

// roundTripRaw writes frame on c and reads the answer without asserting, for
// use off the test goroutine.
func roundTripRaw(c net.Conn, frame []byte) ([]byte, error) {
	if _, err := c.Write(frame); err != nil {
		return nil, err
	}
	return wire.ReadFrame(c, nil)
}
