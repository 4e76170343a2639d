// Package outcome turns what came of a request — a core call's result, or
// the answer to a lookup that settles an unknown one — into the one value
// that is both the channel's answer and the ledger's record: a
// ledger.Outcome. The relay, reprocess and resolve build it here and
// nowhere else, so a GUID's stored answer does not depend on who settled
// it.
package outcome

import (
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/wire"
)

// Of is the record of src with the response frame as sent: the state
// SPEC §4 gives src, its code, and the frame.
func Of(src generated.Source, response []byte) ledger.Outcome {
	return ledger.Outcome{State: ledger.State(src.LedgerState()), RspCode: string(src.Code()), Response: response}
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
	return Of(src, out), src
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
