package corecall

import (
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// Answer appends to dst the response frame that answers the request with
// header req after a call ended in res, and returns it with the source it
// carries. The relay answers and records exactly this frame, and reprocess
// records it, so a request's stored answer does not depend on who sent it.
//
// The source is res.Source except in one case: a 200 whose body cannot be
// framed becomes READ_TIMEOUT (posted, answer unusable: settle by inquiry,
// SPEC §5.5). That cannot happen for a Result from Send, which checks that
// the body encodes, but the frame must never claim a success it cannot show.
// Answer never fails: should the decoded header itself not encode, the
// answer is built from it field by field, as for an unparseable frame.
func Answer(dst []byte, req *generated.Header, res Result, now time.Time) ([]byte, generated.Source) {
	src := res.Source
	out, err := wire.AppendResponse(dst, req, src.Code(), res.Body, now)
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
