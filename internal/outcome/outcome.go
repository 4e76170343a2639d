// Package outcome turns what came of a request — a core call's result, the
// ledger's or the relay's own answer without a call, or the answer to a
// lookup that settles an unknown one — into the one value that is both the
// channel's answer and the ledger's record: a ledger.Outcome. It also
// builds the answer to a frame that is not processed (Rejection). The
// relay, reprocess and resolve build every answer here and nowhere else, so
// a GUID's stored answer does not depend on who settled it, and an answer
// that will not encode falls back one way everywhere.
package outcome

import (
	"fmt"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/wire"
)

// Of is the record of src with the response frame as sent: the state
// SPEC §4 gives src, its code, the frame, and why (for the history).
func Of(src generated.Source, response []byte, why ledger.Why) ledger.Outcome {
	return ledger.Outcome{State: ledger.State(src.LedgerState()), RspCode: string(src.Code()), Response: response, Why: why}
}

// answeredHTTP[status] is WhyCall's reason for a call the core answered
// with status: made once, not for every call.
var answeredHTTP = func() (a [600]string) {
	for status := 100; status < len(a); status++ {
		a[status] = fmt.Sprintf("core answered HTTP %d", status)
	}
	return a
}()

// WhyCall is what the history says of a core call that ended in res.
func WhyCall(res corecall.Result) ledger.Why {
	var reason string
	switch {
	case res.Status >= 100 && res.Status < len(answeredHTTP):
		reason = answeredHTTP[res.Status]
	case res.Status != 0:
		reason = fmt.Sprintf("core answered HTTP %d", res.Status)
	case res.Source == generated.SourceConnectFail:
		reason = "core not reached"
	default:
		reason = "no answer from the core"
	}
	if res.Status == 0 && res.Err != nil {
		reason += ": " + res.Err.Error()
	}
	return ledger.Why{Reason: reason, HTTPStatus: res.Status, Took: res.Elapsed}
}

// OfCall appends to dst the response frame that answers the request with
// header req after a core call ended in res, and returns its record with
// the source it carries.
//
// The source is res.Source except in one case: a 200 whose body cannot be
// framed becomes READ_TIMEOUT (posted, answer unusable: settle by inquiry,
// SPEC §5.5). That cannot happen for a Result from corecall, which checks
// that the body encodes, but the frame must never claim a success it cannot
// show. OfCall never fails: should the decoded header itself not encode,
// the answer is built from it field by field, as for an unparseable frame.
func OfCall(dst []byte, req *generated.Header, res corecall.Result, now time.Time) (ledger.Outcome, generated.Source) {
	out, src := frame(dst, req, res.Source, res.Body, now)
	return Of(src, out, WhyCall(res)), src
}

// Answer appends to dst the empty-bodied answer with src's code to the
// request with header req, for an answer the relay gives without a core
// call's result (E901, E902, E903, E904), and returns its record. It falls
// back as OfCall does, so it never fails.
func Answer(dst []byte, req *generated.Header, src generated.Source, why ledger.Why, now time.Time) ledger.Outcome {
	out, got := frame(dst, req, src, nil, now)
	return Of(got, out, why)
}

// WhyNotCalled is what the history says of a call that was not made
// (refused before any byte was sent: an open breaker, a stopping relay),
// err saying why.
func WhyNotCalled(err error) ledger.Why {
	reason := "no error"
	if err != nil {
		reason = err.Error()
	}
	return ledger.Why{Reason: "core not called: " + reason}
}

// Rejection appends to dst the answer with src's code to a frame that is
// not processed (unparseable, an unknown transaction, refused before any
// claim, or a panic before its header was known): its header is built from
// the raw bytes at the header positions (wire.AppendRejection), so it
// exists however broken the frame is. Nothing is recorded for such a frame.
func Rejection(dst, frame []byte, src generated.Source, now time.Time) []byte {
	return wire.AppendRejection(dst, frame, src.Code(), now)
}

// OfLookup is the record that settles an unknown outcome of the request
// with header req from what its transaction's lookup found (SPEC §7):
// posted → DONE 0000 with a response frame carrying the body the core
// returned; never posted → FAILED E902. A body that cannot be framed is no
// settlement: ok is false and the row must stay as it is.
func OfLookup(req *generated.Header, found corecall.Lookup, now time.Time) (o ledger.Outcome, ok bool) {
	src := generated.SourceConnectFail
	if found.Posted {
		src = generated.SourceHTTP200
	}
	out, got := frame(nil, req, src, found.Body, now)
	why := ledger.Why{Reason: fmt.Sprintf("lookup %d: never posted", found.Status), HTTPStatus: found.Status, Took: found.Elapsed}
	if found.Posted {
		why.Reason = fmt.Sprintf("lookup %d: posted", found.Status)
	}
	return Of(got, out, why), got == src
}

// NotPosted is the record that settles an unknown outcome of a transaction
// with no lookup (a read, SettleAsNotPosted) without asking the core:
// FAILED E902, since sending it again is harmless.
func NotPosted(req *generated.Header, now time.Time) ledger.Outcome {
	out, src := frame(nil, req, generated.SourceConnectFail, nil, now)
	return Of(src, out, ledger.Why{Reason: "no lookup declared (a read): settled as never posted, without a core call"})
}

// AnswerBeforeRecord reports whether the answer src may go out to the
// channel before its outcome is recorded: whether, should the relay fail
// to record it (or die first), settling the row it leaves SENT by tx's own
// rule reaches the same answer.
//
//   - E901 stays a matter of inquiry, and E902 is what "never posted"
//     settles to: both agree with whatever tx's settlement finds.
//   - 0000 is found again only by a lookup, which finds the posting; a
//     transaction without one would be settled as never posted.
//   - A refusal or core error (B2xx, E500: DONE, not posted) is found by no
//     lookup: the row would become FAILED E902 and reprocess would send it
//     again, possibly posting what the channel was told was refused.
//
// An answer for which this is false goes out only once its row is
// recorded; if that fails, the channel is told E901.
func AnswerBeforeRecord(tx *generated.Transaction, src generated.Source) bool {
	switch {
	case ledger.State(src.LedgerState()) != ledger.StateDone:
		return true
	case src == generated.SourceHTTP200:
		return tx.Settle == generated.SettleByLookup
	}
	return false
}

// frame builds the answer with src's code, falling back as OfCall says.
func frame(dst []byte, req *generated.Header, src generated.Source, body generated.ResponseBody, now time.Time) ([]byte, generated.Source) {
	out, err := wire.AppendResponse(dst, req, src.Code(), body, now)
	if err == nil {
		return out, src
	}
	if src == generated.SourceHTTP200 {
		src = generated.SourceReadTimeout
		if out, err = wire.AppendResponse(dst, req, src.Code(), nil, now); err == nil {
			return out, src
		}
	}
	h := wire.ResponseHeader(req, src.Code(), now)
	return h.AppendRawTo(dst), src
}
