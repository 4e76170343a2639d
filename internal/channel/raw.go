package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"lhrelay/internal/wire"
)

// ParseHex reads bytes written as hex digits, upper or lower case, with any
// white space between them ignored and an optional leading 0x.
func ParseHex(s string) ([]byte, error) {
	t := strings.TrimLeft(s, hexSpace)
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		t = t[2:]
	}
	off := len(s) - len(t) // of t's first byte in s, for error positions
	out := make([]byte, 0, len(t)/2)
	var hi byte
	digits := 0
	for i := 0; i < len(t); i++ {
		c := t[i]
		if strings.IndexByte(hexSpace, c) >= 0 {
			continue
		}
		v, ok := hexValue(c)
		if !ok {
			return nil, fmt.Errorf("hex: %q (character %d) is not a hex digit", c, off+i+1)
		}
		if digits%2 == 0 {
			hi = v
		} else {
			out = append(out, hi<<4|v)
		}
		digits++
	}
	if digits%2 != 0 {
		return nil, fmt.Errorf("hex: odd number of digits (%d): each byte needs two", digits)
	}
	if digits == 0 {
		return nil, errors.New("hex: no bytes")
	}
	return out, nil
}

// hexSpace is the white space ParseHex skips.
const hexSpace = " \t\r\n"

func hexValue(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ProbeResult is what came back for bytes sent as they are.
type ProbeResult struct {
	// Frames are the whole frames read, in order.
	Frames [][]byte
	// Rest holds bytes after the last whole frame that do not make one: a
	// bad length prefix and whatever followed it, or a cut-off frame.
	Rest []byte
	// End says why reading stopped: nil when the relay closed the
	// connection cleanly, else the read error (a timeout, a reset).
	End error
}

// Probe sends data as it is, without checking it, half-closes the sending
// side, and reads whatever comes back until the relay closes the connection
// or nothing arrives for timeout (zero means DefaultTimeout). It is for
// probing the relay with malformed input. Its error reports only a failure
// to connect or to send.
func Probe(ctx context.Context, addr string, data []byte, timeout time.Duration, opts ...DialOption) (ProbeResult, error) {
	var res ProbeResult
	c, err := Dial(ctx, addr, timeout, opts...)
	if err != nil {
		return res, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return res, fmt.Errorf("send to %s: %w", addr, err)
	}
	if _, err := c.nc.Write(data); err != nil {
		return res, fmt.Errorf("send to %s: %w", addr, err)
	}
	// The relay may already have answered and closed (an unparseable
	// prefix ends the connection), so a failed half-close is not an error:
	// what it sent back is still to be read.
	_ = c.CloseWrite()
	for {
		if err := c.nc.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
			res.End = err
			return res, nil
		}
		frame, err := wire.ReadFrame(c.r, nil)
		var pe *wire.PrefixError
		switch {
		case err == nil:
			res.Frames = append(res.Frames, frame)
			continue
		case errors.Is(err, io.EOF):
		case errors.As(err, &pe):
			// Framing is lost: keep the rest of the stream as it is.
			rest, rerr := io.ReadAll(c.r)
			res.Rest = append(frame, rest...)
			res.End = rerr
		default:
			res.Rest = frame
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				res.End = err
			}
		}
		if errors.Is(res.End, os.ErrDeadlineExceeded) {
			res.End = fmt.Errorf("nothing more within %v: %w", c.timeout, res.End)
		}
		return res, nil
	}
}
