// Package wire reads LH-STD frames off a stream and builds the response
// frames the relay and the batch commands send or store. Geometry and field
// rules come from the generated header (layouts/header.layout); this package
// only adds the protocol's behaviour: how a frame is delimited, and how an
// answer mirrors its request (SPEC §1).
package wire

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// PrefixError reports a length prefix that is not ASCII digits. Framing is
// lost after it: the relay answers E102 and closes the connection.
type PrefixError struct{ Prefix []byte }

func (e *PrefixError) Error() string {
	return fmt.Sprintf("length prefix %q is not %d ASCII digits", e.Prefix, generated.PrefixLen)
}

// ReadFrame reads one whole frame, the length prefix included, into buf
// (reused when large enough) however the bytes are split across reads.
//
// It returns io.EOF when the stream ends cleanly before a frame starts,
// io.ErrUnexpectedEOF when it ends inside one, and a *PrefixError (with the
// prefix bytes as the frame) when the prefix is not digits. The prefix caps
// a frame at PrefixLen+MaxFrameLen bytes, so a hostile length cannot make it
// allocate more than that.
func ReadFrame(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < generated.HeaderLen {
		buf = make([]byte, 0, generated.HeaderLen+128)
	}
	buf = buf[:generated.PrefixLen]
	if n, err := io.ReadFull(r, buf); err != nil {
		if n > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:n], err
	}
	// generated.ParseLengthPrefix's rule, on a string that stays on the
	// stack (its error would keep it: an allocation a frame).
	prefix := string(buf)
	if !fixedwidth.Digits(prefix) {
		return buf, &PrefixError{Prefix: append([]byte(nil), buf...)}
	}
	n64, _ := fixedwidth.ParseDigits(prefix)
	n := int(n64)
	total := generated.PrefixLen + n
	if cap(buf) < total {
		grown := make([]byte, total)
		copy(grown, buf)
		buf = grown
	}
	buf = buf[:total]
	if got, err := io.ReadFull(r, buf[generated.PrefixLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf[:generated.PrefixLen+got], err
	}
	return buf, nil
}

// ResponseHeader is the header of the answer to req: the same TX_CODE and
// GUID, FLAG R, the institutions swapped, the response code, and SENT_AT
// from the responder's clock.
func ResponseHeader(req *generated.Header, code generated.RspCode, now time.Time) generated.Header {
	return generated.Header{
		TxCode:  req.TxCode,
		GUID:    req.GUID,
		Flag:    generated.FlagResponse,
		SrcOrg:  req.DstOrg,
		DstOrg:  req.SrcOrg,
		RspCode: string(code),
		SentAt:  sentAt(now),
	}
}

// stamp is the SENT_AT of one second in one location.
type stamp struct {
	unix int64
	loc  *time.Location
	text string
}

// lastStamp is the SENT_AT formatted last: a relay answers many frames a
// second, and formatting each anew would cost every answer an allocation.
var lastStamp atomic.Pointer[stamp]

// sentAt is now as a SENT_AT value.
func sentAt(now time.Time) string {
	unix, loc := now.Unix(), now.Location()
	if st := lastStamp.Load(); st != nil && st.unix == unix && st.loc == loc {
		return st.text
	}
	st := &stamp{unix: unix, loc: loc, text: fixedwidth.FormatTimestamp(now)}
	lastStamp.Store(st)
	return st.text
}

// AppendResponse appends the answer to req. The body is sent only with the
// success code (RSP_CODE 0000); every other answer has an empty body.
func AppendResponse(dst []byte, req *generated.Header, code generated.RspCode, body generated.ResponseBody, now time.Time) ([]byte, error) {
	h := ResponseHeader(req, code, now)
	var enc generated.BodyEncoder
	if code == generated.RspHTTP200 {
		if body == nil {
			return dst, fmt.Errorf("wire: %s answer to %s needs a body", code, req.GUID)
		}
		enc = body
	}
	return generated.AppendFrame(dst, &h, enc)
}

// AppendRejection appends the answer to a frame that could not be parsed
// (E102) or whose transaction is unknown: the header is built from the raw
// bytes found at the header positions, institutions swapped, missing or
// unprintable bytes as spaces, with an empty body. It never fails, so a
// channel always gets an answer however broken its frame was.
func AppendRejection(dst []byte, frame []byte, code generated.RspCode, now time.Time) []byte {
	raw := generated.RawHeader(frame)
	h := generated.Header{
		TxCode:  raw.TxCode,
		GUID:    raw.GUID,
		Flag:    generated.FlagResponse,
		SrcOrg:  raw.DstOrg,
		DstOrg:  raw.SrcOrg,
		RspCode: string(code),
		SentAt:  sentAt(now),
	}
	return h.AppendRawTo(dst)
}

// Request is a request frame parsed through the generated layouts: its
// header, the registered transaction it names, and that transaction's body.
type Request struct {
	Header generated.Header
	Tx     *generated.Transaction
	Body   generated.RequestBody
}

// RefusedError says why ParseRequest refused a frame, and with which
// source the relay answers it: BAD_FRAME (E102) or UNKNOWN_TX (E101).
type RefusedError struct {
	Source generated.Source
	Why    string // what was wrong, for people: "bad header", "TX_CODE not registered", …
	Err    error  // the layout's own error, if any
}

func (e *RefusedError) Error() string {
	if e.Err == nil {
		return e.Why
	}
	return e.Why + ": " + e.Err.Error()
}

func (e *RefusedError) Unwrap() error { return e.Err }

// ParseRequest parses a whole request frame — as the relay received it, as
// the ledger stored it, or as a client built it — in the one way the whole
// system does: the header (printable ASCII, fields valid, LEN matching the
// bytes after the prefix, FLAG S), the registered transaction it names, and
// that transaction's request body. Every refusal is a *RefusedError. What
// was parsed before a refusal stays in r — the header once it decoded, the
// transaction once it was found — so the answer and the log can name the
// request (and mask its account fields).
func ParseRequest(frame []byte) (r Request, err error) {
	return ParseRequestInto(frame, nil)
}

// ParseRequestInto is ParseRequest decoding the body into reuse, rather
// than into a new body, when reuse is a body of the transaction the frame
// names: for a caller that parses frame after frame and is done with the
// previous body (the relay, per connection). Whatever reuse held is lost,
// whether the frame parses or not.
func ParseRequestInto(frame []byte, reuse generated.RequestBody) (r Request, err error) {
	refuse := func(src generated.Source, why string, err error) (Request, error) {
		return r, &RefusedError{Source: src, Why: why, Err: err}
	}
	if len(frame) < generated.HeaderLen {
		return refuse(generated.SourceBadFrame, fmt.Sprintf("frame of %d bytes is shorter than the %d-byte header", len(frame), generated.HeaderLen), nil)
	}
	if !fixedwidth.PrintableBytes(frame[generated.PrefixLen:]) {
		return refuse(generated.SourceBadFrame, "byte outside printable ASCII", nil)
	}
	text := string(frame)
	if err := r.Header.Decode(text[:generated.HeaderLen]); err != nil {
		r.Header = generated.Header{} // half decoded: name nothing
		return refuse(generated.SourceBadFrame, "bad header", err)
	}
	if r.Header.Len != len(frame)-generated.PrefixLen {
		return refuse(generated.SourceBadFrame, fmt.Sprintf("length prefix says %d bytes, %d follow it", r.Header.Len, len(frame)-generated.PrefixLen), nil)
	}
	if r.Header.Flag != generated.FlagRequest {
		return refuse(generated.SourceBadFrame, "FLAG is not a request", nil)
	}
	tx, ok := generated.LookupTransaction(r.Header.TxCode)
	if !ok {
		return refuse(generated.SourceUnknownTx, "TX_CODE not registered", nil)
	}
	r.Tx = tx
	body := reuse
	if body == nil || body.TxCode() != tx.Code {
		body = tx.NewRequest()
	}
	if err := body.Decode(text[generated.HeaderLen:]); err != nil {
		return refuse(generated.SourceBadFrame, "bad body", err)
	}
	r.Body = body
	return r, nil
}
