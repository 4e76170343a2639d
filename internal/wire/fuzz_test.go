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
