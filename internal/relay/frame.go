package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
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

// frameState follows one frame through handleFrame.
type frameState struct {
	stage stage
	frame []byte           // the request frame as received
	hdr   generated.Header // decoded once stage > stageValidating
	owned bool             // a ledger row was claimed for this request
	out   []byte           // the answer, once recorded
}

func (s *Server) at(st stage) {
	if s.hook != nil {
		s.hook(st)
	}
}

// handleFrame answers one whole frame: validate → claim → call → record →
// answer. keep is false when the connection must be closed after the
// answer (after a panic).
func (c *conn) handleFrame(frame []byte) (out []byte, keep bool) {
	st := frameState{frame: frame}
	defer func() {
		if p := recover(); p != nil {
			out, keep = c.recoverFrame(frame, &st, p), false
		}
	}()
	return c.process(frame, &st), true
}

func (c *conn) process(frame []byte, st *frameState) []byte {
	s := c.s
	s.at(stageValidating)
	// LEN was read and LEN bytes with it, so framing holds whatever is
	// wrong from here on: answer and go on reading.
	if len(frame) < generated.HeaderLen {
		return c.reject(frame, generated.SourceBadFrame, "frame shorter than the header", nil)
	}
	if !fixedwidth.PrintableBytes(frame[generated.PrefixLen:]) {
		return c.reject(frame, generated.SourceBadFrame, "byte outside printable ASCII", nil)
	}
	text := string(frame)
	if err := st.hdr.Decode(text[:generated.HeaderLen]); err != nil {
		return c.reject(frame, generated.SourceBadFrame, "bad header", err)
	}
	if st.hdr.Flag != generated.FlagRequest {
		return c.reject(frame, generated.SourceBadFrame, "FLAG is not a request", nil)
	}
	tx, ok := generated.LookupTransaction(st.hdr.TxCode)
	if !ok {
		return c.reject(frame, generated.SourceUnknownTx, "TX_CODE not registered", nil)
	}
	req := tx.NewRequest()
	if err := req.Decode(text[generated.HeaderLen:]); err != nil {
		return c.reject(frame, generated.SourceBadFrame, "bad body", err)
	}
	call, err := corecall.Prepare(tx, st.hdr.GUID, req)
	if err != nil {
		return c.reject(frame, generated.SourceBadFrame, "body does not fit the core API", err)
	}

	var claim ledger.Claim
	if s.ledger != nil {
		claim, err = s.ledger.Claim(s.base, ledger.Request{
			GUID: st.hdr.GUID, TxCode: tx.Code, Frame: frame, Body: frame[generated.HeaderLen:],
		})
		if err != nil {
			// Nothing was sent: E902 is the truth (package comment).
			c.s.log.Error("ledger claim failed; answering CONNECT_FAIL, nothing sent", "remote", c.remote, "guid", st.hdr.GUID, "tx", tx.Code, "err", err)
			return c.answer(st, generated.SourceConnectFail)
		}
		if claim.Outcome != ledger.Owned {
			st.stage = stageNotOwned
			return c.notOwned(st, claim)
		}
		st.owned = true
	}

	st.stage = stageClaimed
	s.at(stageClaimed)
	st.stage = stageCalling
	s.at(stageCalling)
	res := s.core.Send(s.base, call)

	out, src := corecall.Answer(c.out[:0], &st.hdr, res, s.now())
	if src != res.Source {
		res.Err = errors.Join(res.Err, fmt.Errorf("%s answer could not be framed; answering %s", res.Source.Code(), src.Code()))
	}
	c.keepOut(out)
	if st.owned {
		if err := s.finish(st.hdr.GUID, src, out); err != nil {
			s.log.Error("ledger: outcome not recorded; row stays SENT for resolve --stale-sent", "remote", c.remote, "guid", st.hdr.GUID, "tx", tx.Code, "rsp", string(src.Code()), "err", err)
		}
	}
	st.out = out
	st.stage = stageRecorded
	s.at(stageRecorded)
	c.logCall(st, tx, src, res, claim.Attempts)
	return out
}

// notOwned answers a claim that did not give this request the GUID, without
// calling the core.
func (c *conn) notOwned(st *frameState, claim ledger.Claim) []byte {
	var src generated.Source
	switch claim.Outcome {
	case ledger.Replay:
		c.logLedger(slog.LevelInfo, "replayed stored answer", st, claim, claim.RspCode)
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
	c.logLedger(slog.LevelWarn, "answered from the ledger, core not called", st, claim, string(src.Code()))
	return c.answer(st, src)
}

// finish records an owned request's outcome. It runs even while the server
// stops (no SENT row is left by a clean stop), bounded by LedgerTimeout.
func (s *Server) finish(guid string, src generated.Source, out []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.base), s.ledgerTimeout)
	defer cancel()
	return s.ledger.Finish(ctx, guid, ledger.State(src.LedgerState()), string(src.Code()), out)
}

// reject answers a frame that is not processed (E101, E102). The answer is
// built from the raw header positions, so it works whatever is broken.
func (c *conn) reject(frame []byte, src generated.Source, why string, err error) []byte {
	if c.logEnabled(slog.LevelWarn) {
		raw := generated.RawHeader(frame)
		attrs := []slog.Attr{
			slog.String("remote", c.remote),
			slog.String("rsp", string(src.Code())),
			slog.String("why", why),
			slog.String("tx", raw.TxCode),
			slog.String("guid", raw.GUID),
			slog.Int("len", len(frame)),
		}
		if err != nil {
			attrs = append(attrs, slog.String("err", err.Error()))
		}
		c.s.log.LogAttrs(c.s.base, slog.LevelWarn, "frame rejected", attrs...)
	}
	return c.keepOut(wire.AppendRejection(c.out[:0], frame, src.Code(), c.s.now()))
}

// answer builds an empty-bodied answer with src's code from the decoded
// header, or from the raw header positions if that fails.
func (c *conn) answer(st *frameState, src generated.Source) []byte {
	out, err := wire.AppendResponse(c.out[:0], &st.hdr, src.Code(), nil, c.s.now())
	if err != nil {
		out = wire.AppendRejection(c.out[:0], st.frame, src.Code(), c.s.now())
	}
	return c.keepOut(out)
}

// recoverFrame answers a frame whose handling panicked, claiming no more
// than is known (package comment, Panics), and records that in the ledger.
func (c *conn) recoverFrame(frame []byte, st *frameState, p any) []byte {
	s := c.s
	s.log.Error("panic handling frame; answering conservatively and closing the connection",
		"remote", c.remote, "guid", st.hdr.GUID, "tx", st.hdr.TxCode, "stage", st.stage.String(),
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	var src generated.Source
	switch st.stage {
	case stageValidating:
		return c.keepOut(wire.AppendRejection(c.out[:0], frame, generated.SourceConnectFail.Code(), s.now()))
	case stageNotOwned:
		return c.answer(st, generated.SourceInProgress)
	case stageClaimed:
		src = generated.SourceConnectFail
	case stageRecorded:
		return st.out
	default: // stageCalling
		src = generated.SourceReadTimeout
	}
	out := c.answer(st, src)
	if st.owned {
		if err := s.finish(st.hdr.GUID, src, out); err != nil {
			s.log.Error("ledger: panic outcome not recorded; row stays SENT for resolve --stale-sent", "guid", st.hdr.GUID, "rsp", string(src.Code()), "err", err)
		}
	}
	return out
}

// logCall logs a frame that went to the core: one line per call.
func (c *conn) logCall(st *frameState, tx *generated.Transaction, src generated.Source, res corecall.Result, attempts int) {
	level := slog.LevelInfo
	if src == generated.SourceReadTimeout || src == generated.SourceConnectFail {
		level = slog.LevelWarn
	}
	if !c.logEnabled(level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("remote", c.remote),
		slog.String("guid", st.hdr.GUID),
		slog.String("tx", tx.Code),
		slog.String("rsp", string(src.Code())),
		slog.Int("status", res.Status),
		slog.Duration("elapsed", res.Elapsed.Round(time.Microsecond)),
	}
	if attempts > 1 {
		attrs = append(attrs, slog.Int("attempts", attempts))
	}
	if res.ConnReused && res.Status == 0 {
		attrs = append(attrs, slog.Bool("conn_reused", true))
	}
	if res.Err != nil {
		attrs = append(attrs, slog.String("err", res.Err.Error()))
	}
	c.s.log.LogAttrs(c.s.base, level, "core called", attrs...)
}

func (c *conn) logLedger(level slog.Level, msg string, st *frameState, claim ledger.Claim, rsp string) {
	if !c.logEnabled(level) {
		return
	}
	c.s.log.LogAttrs(c.s.base, level, msg,
		slog.String("remote", c.remote),
		slog.String("guid", st.hdr.GUID),
		slog.String("tx", st.hdr.TxCode),
		slog.String("claim", claim.Outcome.String()),
		slog.String("row_state", string(claim.State)),
		slog.String("rsp", rsp),
	)
}
