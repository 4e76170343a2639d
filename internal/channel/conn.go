package channel

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// DefaultTimeout bounds connecting and waiting for each answer when no
// timeout is given. It is longer than any relay --timeout worth using, so
// the relay's own E901 arrives before the channel gives up.
const DefaultTimeout = 10 * time.Second

var (
	// ErrNoAnswer wraps every failure after a frame was written: the request
	// may have reached the relay, but no whole answer came back.
	ErrNoAnswer = errors.New("no answer")
	// ErrMalformed wraps an answer that arrived but is not a valid LH-STD
	// response (see Decode).
	ErrMalformed = errors.New("malformed answer")
	// ErrBroken is returned by Send on a connection whose framing an earlier
	// failure left unknown.
	ErrBroken = errors.New("connection unusable after an earlier failure")
)

// Conn is a persistent connection to the relay carrying one frame at a time:
// each Send writes a request and reads its answer before the next one (SPEC
// §1). A Conn is not safe for concurrent Sends; Close may be called from
// another goroutine to interrupt one.
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	buf     []byte
	addr    string
	timeout time.Duration
	broken  error
}

// DialOption changes how Dial connects.
type DialOption func(*dialConfig)

type dialConfig struct{ tls *tls.Config }

// WithTLS speaks TLS with cfg to a relay that serves channels over TLS
// (SPEC 5.9): cfg holds the CAs to trust and, when the relay requires
// one, the client certificate. A nil cfg means plain TCP.
func WithTLS(cfg *tls.Config) DialOption { return func(d *dialConfig) { d.tls = cfg } }

// Dial connects to the relay at addr (HOST:PORT). timeout bounds the connect
// (and the TLS handshake) and, later, each Send; zero means DefaultTimeout.
func Dial(ctx context.Context, addr string, timeout time.Duration, opts ...DialOption) (*Conn, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var dc dialConfig
	for _, o := range opts {
		o(&dc)
	}
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach relay: %w", err)
	}
	if dc.tls != nil {
		cfg := dc.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with relay %s: %w", addr, err)
		}
		nc = tc
	}
	return &Conn{
		nc:      nc,
		r:       bufio.NewReaderSize(nc, generated.PrefixLen+generated.MaxFrameLen),
		addr:    addr,
		timeout: timeout,
	}, nil
}

// Send writes one frame and reads the relay's answer, a whole frame with its
// length prefix, however the bytes are split across TCP segments. The answer
// is the caller's to keep. Send neither checks the frame it sends nor
// decodes the answer: see Decode.
//
// A failure after the frame was written wraps ErrNoAnswer; an answer whose
// length prefix is not digits wraps ErrMalformed. Either leaves the
// connection unusable (its framing is lost): close it and dial again.
func (c *Conn) Send(frame []byte) ([]byte, error) {
	if c.broken != nil {
		return nil, fmt.Errorf("%w: %w", ErrBroken, c.broken)
	}
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, c.fail(fmt.Errorf("send to %s: %w", c.addr, err))
	}
	if _, err := c.nc.Write(frame); err != nil {
		return nil, c.fail(fmt.Errorf("send to %s: %w", c.addr, err))
	}
	ans, err := wire.ReadFrame(c.r, c.buf)
	if err != nil {
		return nil, c.fail(c.readError(ans, err))
	}
	c.buf = ans[:0]
	return append([]byte(nil), ans...), nil
}

// readError words a failure to read an answer.
func (c *Conn) readError(got []byte, err error) error {
	var pe *wire.PrefixError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%w from %s: %w", ErrMalformed, c.addr, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w from %s: connection closed before an answer", ErrNoAnswer, c.addr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w from %s: connection closed after %d bytes of the answer: %q", ErrNoAnswer, c.addr, len(got), got)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w from %s within %v: %w", ErrNoAnswer, c.addr, c.timeout, err)
	}
	return fmt.Errorf("%w from %s: %w", ErrNoAnswer, c.addr, err)
}

func (c *Conn) fail(err error) error {
	c.broken = err
	return err
}

// CloseWrite half-closes the sending side, telling the relay no more frames
// follow; answers can still be read (SPEC §1).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection, interrupting a Send in progress.
func (c *Conn) Close() error { return c.nc.Close() }
