package main

import (
	"strconv"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// rowDetail is a ledger row with its frames decoded, for show: list's
// columns, then the frames.
type rowDetail struct {
	listRow
	Request  *frameDetail `json:"request"`
	Response *frameDetail `json:"response"`
}

// frameDetail is one stored frame decoded field by field through the
// generated layouts. A frame that does not decode is shown raw with the
// decoder's error: the ledger keeps whatever was received.
type frameDetail struct {
	Role   string  `json:"-"`
	Bytes  int     `json:"bytes"`
	Header []field `json:"header"`
	Body   []field `json:"body,omitempty"`
	Error  string  `json:"error,omitempty"`
	Raw    string  `json:"raw,omitempty"`
}

type field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func describeRow(r ledger.Row) rowDetail {
	d := rowDetail{listRow: summarize(r), Request: decodeFrame("request", r.Request, true)}
	if len(r.Response) > 0 {
		d.Response = decodeFrame("response", r.Response, false)
	}
	return d
}

// decodeFrame decodes a stored frame. Response bodies are present only with
// the success code, as on the wire.
func decodeFrame(role string, frame []byte, request bool) *frameDetail {
	fd := &frameDetail{Role: role, Bytes: len(frame)}
	fail := func(err error) *frameDetail {
		fd.Error, fd.Raw = err.Error(), string(frame)
		return fd
	}
	if len(frame) < generated.HeaderLen {
		return fail(errShort(len(frame)))
	}
	s := string(frame)
	var h generated.Header
	if err := h.Decode(s[:generated.HeaderLen]); err != nil {
		return fail(err)
	}
	for _, v := range h.Fields() {
		fd.Header = append(fd.Header, field{v.Name, v.Value})
	}
	body := s[generated.HeaderLen:]
	if body == "" {
		return fd
	}
	tx, ok := generated.LookupTransaction(h.TxCode)
	if !ok {
		return fail(errUnknownTx(h.TxCode))
	}
	var values []generated.FieldValue
	if request {
		req := tx.NewRequest()
		if err := req.Decode(body); err != nil {
			return fail(err)
		}
		values = req.Fields()
	} else {
		rsp := tx.NewResponse()
		if err := rsp.Decode(body); err != nil {
			return fail(err)
		}
		values = rsp.Fields()
	}
	for _, v := range values {
		fd.Body = append(fd.Body, field{v.Name, v.Value})
	}
	return fd
}

type errShort int

func (e errShort) Error() string {
	return "frame of " + strconv.Itoa(int(e)) + " bytes is shorter than a header"
}

type errUnknownTx string

func (e errUnknownTx) Error() string {
	return "TX_CODE " + strconv.Quote(string(e)) + " is not registered"
}

// meaning describes a stored response code for people.
func meaning(code string) string {
	if code == "" {
		return ""
	}
	return generated.RspCode(code).Meaning()
}
