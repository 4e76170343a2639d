package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// FuzzReadFrame: any byte stream is split into frames without panicking;
// each frame is exactly its prefix plus LEN bytes; and every answer the
// relay can build for a broken frame is a well-formed, printable header.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("0076BKTR00010123456789abcdef0123456789abcdefS081999    20261129103000           "))
	f.Add([]byte("00050123400"))
	f.Add([]byte("abcd"))
	f.Add([]byte("9999"))
	f.Add([]byte("0000"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bytes.NewReader(stream)
		var buf []byte
		for i := 0; i < 100; i++ {
			frame, err := ReadFrame(r, buf)
			var pe *PrefixError
			switch {
			case err == nil:
				n, perr := generated.ParseLengthPrefix(string(frame[:generated.PrefixLen]))
				if perr != nil || len(frame) != generated.PrefixLen+n {
					t.Fatalf("frame %q does not match its prefix", frame)
				}
			case errors.As(err, &pe), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			default:
				t.Fatalf("unexpected error %v", err)
			}
			out := AppendRejection(nil, frame, generated.RspBadFrame, time.Now())
			if len(out) != generated.HeaderLen || !fixedwidth.PrintableBytes(out) {
				t.Fatalf("rejection %q is not a printable header", out)
			}
			if err != nil {
				return
			}
			buf = frame
		}
	})
}

// FuzzParseRequest: any frame is parsed or refused without panicking; a
// refusal is a *RefusedError naming BAD_FRAME or UNKNOWN_TX; a frame that
// parses re-encodes to its own body bytes exactly (nothing truncated or
// silently changed; only the header's FILLER, ignored on input, may come
// back as spaces), and parsing that again gives the same request.
func FuzzParseRequest(f *testing.F) {
	for _, tx := range generated.Transactions() {
		h := generated.Header{TxCode: tx.Code, GUID: "0123456789abcdef0123456789abcdef", Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129103000"}
		body := tx.NewRequest()
		for _, fs := range tx.RequestFields {
			if fs.HasDefault {
				_ = body.Set(fs.JSON, fs.Default)
			}
		}
		if frame, err := generated.AppendFrame(nil, &h, body); err == nil {
			f.Add(frame)
		}
	}
	f.Add([]byte("0076BKZZ99990123456789abcdef0123456789abcdefS081999    20261129103000           "))
	f.Add([]byte("0010short"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := ParseRequest(frame)
		if err != nil {
			var re *RefusedError
			if !errors.As(err, &re) || (re.Source != generated.SourceBadFrame && re.Source != generated.SourceUnknownTx) {
				t.Fatalf("refusal %v is not a BAD_FRAME or UNKNOWN_TX RefusedError", err)
			}
			return
		}
		if r.Body.TxCode() != r.Header.TxCode || r.Tx.Code != r.Header.TxCode {
			t.Fatalf("parsed %s with a %s body", r.Header.TxCode, r.Body.TxCode())
		}
		out, err := generated.AppendFrame(nil, &r.Header, r.Body)
		if err != nil {
			t.Fatalf("a parsed request does not encode: %v", err)
		}
		if !bytes.Equal(out[generated.HeaderLen:], frame[generated.HeaderLen:]) {
			t.Fatalf("re-encoded body %q, parsed %q", out[generated.HeaderLen:], frame[generated.HeaderLen:])
		}
		again, err := ParseRequest(out)
		if err != nil || again.Header != r.Header {
			t.Fatalf("re-encoded frame %q parses as %+v, %v; first %+v", out, again.Header, err, r.Header)
		}
	})
}
