package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/wire"
)

// stage is how far a frame got; the panic policy (package comment) answers
// according to it.
type stage int

const (
	// stageValidating: nothing claimed, nothing sent.
	stageValidating stage = iota
	// stageNotOwned: the ledger answered the claim without giving this
	// request the GUID (replay, in progress, unknown, reused).
	stageNotOwned
	// stageClaimed: the request owns the GUID (or there is no ledger); the
	// core call has not started.
	stageClaimed
	// stageCalling: the core call may have started.
	stageCalling
	// stageRecorded: the outcome is recorded and the answer built.
	stageRecorded
)

func (st stage) String() string {
	switch st {
	case stageValidating:
		return "validating"
	case stageNotOwned:
		return "not-owned"
	case stageClaimed:
		return "claimed"
	case stageCalling:
		return "calling"
	case stageRecorded:
		return "recorded"
	}
	return fmt.Sprintf("stage(%d)", int(st))
}

// frameState follows one frame through handleFrame, and carries what its
// log line and its metrics report.
type frameState struct {
	stage stage
	frame []byte           // the request frame as received
	start time.Time        // when the whole frame had been read
	hdr   generated.Header // decoded once stage > stageValidating
	owned bool             // a ledger row was claimed for this request
	out   []byte           // the answer, once recorded

	// txCode and guid are the header's, or for a frame whose header did
	// not decode, the bytes at their positions.
	txCode, guid string
	tx           *generated.Transaction // once TX_CODE is known registered
	req          generated.RequestBody  // once the body has decoded
	rsp          generated.RspCode      // the code answered
	state        ledger.State           // the row's state, recorded or found; "" if none
	attempts     int                    // the row's attempts; 0 if no row
	claim        ledger.ClaimOutcome    // 0 when no claim was made
	why          string                 // why the frame was rejected (E101, E102)
	err          error                  // the rejection's, the claim's or the core call's error
	called       bool                   // the core was called; res holds the result
	res          corecall.Result
	permit       admit.Permit // the admitted call's slot, while admitted
	admitted     bool         // permit holds a slot not yet released
}

func (s *Server) at(st stage) {
	if s.hook != nil {
		s.hook(st)
	}
}

// handleFrame answers one whole frame: validate → claim → call → record →
// answer. keep is false when the connection must be closed after the
// answer (after a panic). The frame is counted and logged before it
// returns.
func (c *conn) handleFrame(frame []byte) (out []byte, keep bool) {
	st := frameState{frame: frame, start: time.Now()}
	out, keep = c.handleRecovered(&st)
	c.frameDone(&st)
	return out, keep
}

func (c *conn) handleRecovered(st *frameState) (out []byte, keep bool) {
	defer func() {
		if p := recover(); p != nil {
			out, keep = c.recoverFrame(st, p), false
		}
	}()
	return c.process(st), true
}

// rejectFraming answers a frame whose length prefix is not digits: framing
// is lost, so the answer has blank TX_CODE and GUID (the prefix is all
// there is) and the connection is closed after it.
func (c *conn) rejectFraming(prefix []byte, err error) []byte {
	st := frameState{frame: prefix, start: time.Now()}
	out := c.reject(&st, generated.SourceBadFrame, "length prefix not digits; closing: framing is lost", err)
	c.frameDone(&st)
	return out
}

func (c *conn) process(st *frameState) []byte {
	s := c.s
	frame := st.frame
	s.at(stageValidating)
	// LEN was read and LEN bytes with it, so framing holds whatever is
	// wrong from here on: answer and go on reading.
	r, err := wire.ParseRequestInto(frame, c.body)
	if r.Body != nil {
		c.body = r.Body
	}
	if err != nil {
		var re *wire.RefusedError
		if !errors.As(err, &re) {
			re = &wire.RefusedError{Source: generated.SourceBadFrame, Why: "unparseable", Err: err}
		}
		st.hdr, st.txCode, st.guid, st.tx = r.Header, r.Header.TxCode, r.Header.GUID, r.Tx
		return c.reject(st, re.Source, re.Why, re.Err)
	}
	st.hdr, st.txCode, st.guid = r.Header, r.Header.TxCode, r.Header.GUID
	tx, req := r.Tx, r.Body
	st.tx, st.req = tx, req
	c.logReceived(st)
	if s.clientOrgs != nil && !c.orgs[st.hdr.SrcOrg] {
		// Authenticated is not authorised (SPEC 5.9): the frame line
		// carries the certificate's subject.
		return c.reject(st, generated.SourceBadFrame, "SRC_ORG not allowed for this client certificate (--tls-client-org)", fmt.Errorf("SRC_ORG %q", st.hdr.SrcOrg))
	}
	call := &c.call
	if err := corecall.PrepareInto(call, tx, st.hdr.GUID, req); err != nil {
		return c.reject(st, generated.SourceBadFrame, "body does not fit the core API", err)
	}

	lreq := ledger.Request{GUID: st.hdr.GUID, TxCode: tx.Code, Frame: frame, Body: frame[generated.HeaderLen:]}
	// Admission comes before the claim (package comment, Overload): a
	// frame shed here has written nothing.
	st.permit, err = s.limiter.Acquire()
	if err != nil {
		s.callShed(err)
		return c.answerFromRead(st, lreq, err)
	}
	st.admitted = true
	s.callAdmitted(st.permit.Waited)
	defer c.release(st, admit.Ignored, 0)

	if s.ledger != nil {
		claim, err := s.ledger.Claim(s.base, lreq)
		if err != nil {
			var uc *ledger.UnconfirmedClaimError
			if errors.As(err, &uc) {
				// The claim may have committed, unconfirmed: its row
				// (ours, if it exists) would read SENT. Nothing was
				// sent, so E902, and the row is made FAILED/E902 once the
				// database answers (package comment).
				st.err = err
				s.log.Error("ledger claim not confirmed; answering CONNECT_FAIL, nothing sent", "remote", c.remote, "guid", st.guid, "tx", tx.Code, "err", err)
				rec := c.answer(st, generated.SourceConnectFail,
					ledger.Why{Reason: "claim's commit not confirmed by the database; the core was not called: " + errText(err)})
				s.abandon(uc, tx.Code, rec)
				return rec.Response
			}
			// A full disk or a lost database fails every claim: one line
			// a second, with a running count, as for refused connections.
			// Each frame's own line has its GUID and the error.
			if n := s.claimFailed.Add(1); everySecond(&s.lastClaimLog) {
				s.log.Error("ledger claim failed; answering from the row as read, or CONNECT_FAIL: nothing sent", "remote", c.remote, "guid", st.guid, "tx", tx.Code, "err", err, "failed_total", n)
			}
			return c.answerFromRead(st, lreq, err)
		}
		st.claim, st.state, st.attempts = claim.Outcome, claim.State, claim.Attempts
		if claim.Outcome != ledger.Owned {
			st.stage = stageNotOwned
			return c.notOwned(st, claim)
		}
		st.owned = true
		st.state = ledger.StateSent
	}

	st.stage = stageClaimed
	s.at(stageClaimed)
	st.stage = stageCalling
	s.at(stageCalling)
	st.permit.Sending()
	res, sent := s.callCore(call)
	c.release(st, s.sample(res, sent), res.Elapsed)

	rec, src := outcome.OfCall(c.out[:0], &st.hdr, res, s.now())
	c.keepOut(rec.Response)
	if src != res.Source {
		res.Err = errors.Join(res.Err, fmt.Errorf("%s answer could not be framed; answering %s", res.Source.Code(), src.Code()))
	}
	st.called, st.res, st.err, st.rsp = sent, res, res.Err, src.Code()
	if s.metrics != nil && sent {
		s.metrics.CoreCalled(tx.Code, src, res.Elapsed)
	}
	out := rec.Response
	if st.owned {
		if !sent {
			rec.Why = outcome.WhyNotCalled(res.Err)
		}
		out = c.record(st, src, rec)
	}
	st.out = out
	st.stage = stageRecorded
	s.at(stageRecorded)
	return out
}

// notOwned answers a claim that did not give this request the GUID, without
// calling the core.
func (c *conn) notOwned(st *frameState, claim ledger.Claim) []byte {
	var src generated.Source
	switch claim.Outcome {
	case ledger.Replay:
		st.rsp = generated.RspCode(claim.RspCode)
		return claim.Response
	case ledger.InProgress:
		src = generated.SourceInProgress
	case ledger.Unknown:
		src = generated.SourceReadTimeout
	case ledger.Reused:
		src = generated.SourceGUIDReused
	default:
		// A ledger outcome this relay does not know: leave the row alone
		// and let the channel retry.
		src = generated.SourceInProgress
	}
	return c.answer(st, src, ledger.Why{}).Response
}

// record records an owned request's outcome and returns the answer. An
// answer that settling the row would reach too (outcome.AnswerBeforeRecord,
// by the transaction's own lookup declaration) goes out while its outcome's
// commit is on the way; any other waits for the commit and, if the outcome
// could not be recorded, becomes E901 (package comment).
func (c *conn) record(st *frameState, src generated.Source, rec ledger.Outcome) []byte {
	s := c.s
	st.state = rec.State
	if outcome.AnswerBeforeRecord(st.tx, src) {
		s.finishLater(st, c.remote, src, rec, &c.finishWait)
		return rec.Response
	}
	if err := s.finish(st.hdr.GUID, st.attempts, rec); err != nil {
		st.err = errors.Join(st.err, err)
		st.state = ledger.StateSent
		if errors.Is(err, ledger.ErrReclaimed) {
			s.logConflict(c.remote, st.guid, st.tx.Code, st.attempts, src, err)
		} else {
			s.log.Error("ledger: outcome not recorded; row stays SENT for resolve --stale-sent, answering READ_TIMEOUT: settling it would not find this answer",
				"remote", c.remote, "guid", st.guid, "tx", st.tx.Code, "core_rsp", string(src.Code()), "err", err)
		}
		return c.answer(st, generated.SourceReadTimeout, ledger.Why{}).Response
	}
	return rec.Response
}

// finish records an owned request's outcome and waits for the commit. It
// runs even while the server stops (no SENT row is left by a clean stop),
// bounded by LedgerTimeout.
func (s *Server) finish(guid string, attempts int, rec ledger.Outcome) error {
	ctx, cancel := context.WithTimeout(s.lasting, s.ledgerTimeout)
	defer cancel()
	return s.ledger.Finish(ctx, guid, attempts, rec)
}

// errText is err's text, or "no error".
func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// finishLater queues an owned request's outcome and returns at once, or
// within LedgerTimeout if the ledger's queue is full; a failure to record
// it is logged when it happens, with the GUID, and leaves the row SENT for
// resolve --stale-sent. Shutdown and Close wait for every queued outcome
// (no SENT row is left by a clean stop).
func (s *Server) finishLater(st *frameState, remote string, src generated.Source, rec ledger.Outcome, wait *boundedWait) {
	r := getLaterRecord()
	r.s, r.remote, r.guid, r.tx, r.attempts, r.src = s, remote, st.guid, st.tx.Code, st.attempts, src
	s.recording.add()
	wait.start(s.lasting, s.ledgerTimeout)
	defer wait.stop()
	err := s.ledger.FinishLater(wait, r.guid, r.attempts, rec, r.then)
	if err != nil {
		r.recycle()
		s.recording.done()
		st.err = errors.Join(st.err, err)
		st.state = ledger.StateSent
		s.logNotRecorded(remote, st.guid, st.tx.Code, src, err)
	}
}

// laterRecord is what finishLater's callback needs of its frame. Every
// transfer queues one, so they are pooled (laterRecords), each with its
// callback bound once (then is its done).
type laterRecord struct {
	s                *Server
	remote, guid, tx string
	attempts         int
	src              generated.Source
	then             func(error)
}

var laterRecords sync.Pool

func getLaterRecord() *laterRecord {
	if r, ok := laterRecords.Get().(*laterRecord); ok {
		return r
	}
	r := new(laterRecord)
	r.then = r.done
	return r
}

func (r *laterRecord) recycle() {
	*r = laterRecord{then: r.then}
	laterRecords.Put(r)
}

// done is the ledger's answer about the outcome queued.
func (r *laterRecord) done(err error) {
	s := r.s
	if err == nil {
		r.recycle()
		s.recording.done()
		return
	}
	remote, guid, tx, attempts, src := r.remote, r.guid, r.tx, r.attempts, r.src
	r.recycle()
	// This runs on the ledger's writer goroutine, which must not wait
	// for a log sink.
	go func() {
		switch {
		case errors.Is(err, ledger.ErrReclaimed):
			s.logConflict(remote, guid, tx, attempts, src, err)
		case settledPosted(err, attempts, src):
			s.log.Info("ledger: outcome already recorded: the row was settled DONE from the core's lookup while this call was under way, as the core's answer says",
				"remote", remote, "guid", guid, "tx", tx, "attempts", attempts, "core_rsp", string(src.Code()))
		default:
			s.logNotRecorded(remote, guid, tx, src, err)
		}
		s.recording.done()
	}()
}

// settledPosted reports whether err, a posting's outcome refused, says the
// row was settled DONE while the call was under way and not re-claimed
// since: a lookup found the posting this answer is about (resolve, or
// reprocess finding a row settled FAILED too early posted after all). The
// row holds it already; nothing is lost and nothing may be posted twice.
func settledPosted(err error, attempts int, src generated.Source) bool {
	var se *ledger.StateError
	return src == generated.SourceHTTP200 && errors.As(err, &se) &&
		se.Found == ledger.StateDone && se.FoundAttempts == attempts && !se.Reclaimed
}

// logConflict reports the core's answer to a claim whose row was settled
// FAILED while the call was under way and re-claimed since (SPEC 6): the
// row is left alone, and the transfer may now be posted twice. Someone
// must look (the ledger counts it: lhrelay_ledger_conflicts_total).
func (s *Server) logConflict(remote, guid, tx string, attempts int, src generated.Source, err error) {
	s.log.Error("ledger conflict: the core answered a call whose row was settled and re-claimed since; row left alone, the transfer may be posted twice: check it with the core",
		"remote", remote, "guid", guid, "tx", tx, "attempts", attempts, "core_rsp", string(src.Code()), "err", err)
}

// logNotRecorded logs an answered outcome the ledger did not record.
func (s *Server) logNotRecorded(remote, guid, tx string, src generated.Source, err error) {
	s.log.Error("ledger: outcome not recorded; row stays SENT for resolve --stale-sent",
		"remote", remote, "guid", guid, "tx", tx, "rsp", string(src.Code()), "err", err)
}

// reject answers a frame that is not processed (E101, E102). The answer is
// built from the raw header positions, so it works whatever is broken.
func (c *conn) reject(st *frameState, src generated.Source, why string, err error) []byte {
	if st.txCode == "" && st.guid == "" {
		raw := generated.RawHeader(st.frame)
		st.txCode, st.guid = raw.TxCode, raw.GUID
	}
	st.rsp, st.why, st.err = src.Code(), why, err
	return c.keepOut(outcome.Rejection(c.out[:0], st.frame, src, c.s.now()))
}

// answer builds the empty-bodied answer with src's code to the decoded
// header, and its record (outcome.Answer); why is the history's reason,
// for an answer that is recorded (zero for one that is not).
func (c *conn) answer(st *frameState, src generated.Source, why ledger.Why) ledger.Outcome {
	rec := outcome.Answer(c.out[:0], &st.hdr, src, why, c.s.now())
	st.rsp = generated.RspCode(rec.RspCode)
	c.keepOut(rec.Response)
	return rec
}

// recoverFrame answers a frame whose handling panicked, claiming no more
// than is known (package comment, Panics), and records that in the ledger.
func (c *conn) recoverFrame(st *frameState, p any) []byte {
	s := c.s
	s.log.Error("panic handling frame; answering conservatively and closing the connection",
		"remote", c.remote, "guid", st.hdr.GUID, "tx", st.hdr.TxCode, "stage", st.stage.String(),
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if st.txCode == "" && st.guid == "" {
		raw := generated.RawHeader(st.frame)
		st.txCode, st.guid = raw.TxCode, raw.GUID
	}
	st.err = fmt.Errorf("panic at stage %s: %v", st.stage, p)
	var src generated.Source
	switch st.stage {
	case stageValidating:
		st.rsp = generated.SourceConnectFail.Code()
		return c.keepOut(outcome.Rejection(c.out[:0], st.frame, generated.SourceConnectFail, s.now()))
	case stageNotOwned:
		return c.answer(st, generated.SourceInProgress, ledger.Why{}).Response
	case stageClaimed:
		src = generated.SourceConnectFail
	case stageRecorded:
		return st.out
	default: // stageCalling
		src = generated.SourceReadTimeout
	}
	rec := c.answer(st, src, ledger.Why{Reason: fmt.Sprintf("relay panicked at stage %s: %v", st.stage, p)})
	if st.owned {
		if err := s.finish(st.hdr.GUID, st.attempts, rec); err != nil {
			s.log.Error("ledger: panic outcome not recorded; row stays SENT for resolve --stale-sent", "guid", st.hdr.GUID, "rsp", rec.RspCode, "err", err)
		} else {
			st.state = rec.State
		}
	}
	return rec.Response
}
