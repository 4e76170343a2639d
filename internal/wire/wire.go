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
	n, err := generated.ParseLengthPrefix(string(buf))
	if err != nil {
		return buf, &PrefixError{Prefix: append([]byte(nil), buf...)}
	}
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
		SentAt:  fixedwidth.FormatTimestamp(now),
	}
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
		SentAt:  fixedwidth.FormatTimestamp(now),
	}
	return h.AppendRawTo(dst)
}

// DecodeRequest decodes a whole request frame — a stored one, or one built
// by a client — through the generated layouts: the header, the registered
// transaction it names, and that transaction's request body.
func DecodeRequest(frame []byte) (*generated.Transaction, generated.Header, generated.RequestBody, error) {
	var h generated.Header
	if len(frame) < generated.HeaderLen {
		return nil, h, nil, fmt.Errorf("request frame of %d bytes is shorter than the %d-byte header", len(frame), generated.HeaderLen)
	}
	s := string(frame)
	if err := h.Decode(s[:generated.HeaderLen]); err != nil {
		return nil, h, nil, fmt.Errorf("request header: %w", err)
	}
	if h.Len != len(frame)-generated.PrefixLen {
		return nil, h, nil, fmt.Errorf("request length prefix says %d bytes, %d follow it", h.Len, len(frame)-generated.PrefixLen)
	}
	tx, ok := generated.LookupTransaction(h.TxCode)
	if !ok {
		return nil, h, nil, fmt.Errorf("TX_CODE %q is not registered", h.TxCode)
	}
	body := tx.NewRequest()
	if err := body.Decode(s[generated.HeaderLen:]); err != nil {
		return nil, h, nil, err
	}
	return tx, h, body, nil
}
