package relay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// connState is where a connection's goroutine is, as far as Shutdown cares.
type connState int

const (
	// stateIdle: waiting for the first byte of the next frame. Shutdown
	// closes such a connection at once.
	stateIdle connState = iota
	// stateBusy: a frame has started; Shutdown lets it be answered.
	stateBusy
	// stateClosed: closed by Shutdown while idle.
	stateClosed
)

// conn is one channel connection. Its buffers live as long as it does, so a
// frame costs no new buffer once the first has grown to size.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	client string // the channel's verified TLS client certificate subject, if any
	br     *bufio.Reader
	frame  []byte // the frame being handled (ReadFrame's buffer)
	out    []byte // the answer being built

	mu    sync.Mutex
	state connState
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{
		s:      s,
		nc:     nc,
		remote: nc.RemoteAddr().String(),
		br:     bufio.NewReader(nc),
		frame:  make([]byte, 0, generated.HeaderLen+256),
		out:    make([]byte, 0, generated.HeaderLen+256),
	}
}

// toIdle is called before waiting for a frame; false means stop. The
// stopping flag is read under c.mu, which beginStop's sweep (closeIfIdle)
// also takes after setting it: either this sees the flag, or the sweep
// sees this connection idle and closes it. Reading it before taking c.mu
// would let a connection slip into idle unseen and hold Shutdown up.
func (c *conn) toIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s.stopFlag.Load() || c.state == stateClosed {
		return false
	}
	c.state = stateIdle
	return true
}

// toBusy is called once a frame's first byte is in; false means Shutdown
// closed the connection meanwhile, and the frame must not be handled.
func (c *conn) toBusy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return false
	}
	c.state = stateBusy
	return true
}

// closeIfIdle closes the connection if it waits for a frame. A busy one
// sees the server stopping when it next calls toIdle.
func (c *conn) closeIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateIdle {
		c.state = stateClosed
		c.nc.Close()
	}
}

func (c *conn) serve() {
	defer c.s.forget(c)
	defer c.nc.Close()
	defer func() {
		// handleFrame recovers its own panics and answers them; this
		// catches one in the framing code around it, where there is no
		// frame to answer.
		if p := recover(); p != nil {
			c.s.log.Error("panic serving connection; closing it", "remote", c.remote, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	log := c.s.log
	log.Debug("connection opened", "remote", c.remote)
	if !c.handshake() {
		return
	}
	for {
		if !c.toIdle() {
			log.Debug("connection closed: relay stopping", "remote", c.remote)
			return
		}
		c.nc.SetReadDeadline(time.Now().Add(c.s.idleTimeout))
		if _, err := c.br.Peek(1); err != nil {
			c.logReadEnd(err, "between frames")
			return
		}
		if !c.toBusy() {
			return
		}
		out, keep, err := c.next()
		if err != nil {
			c.logReadEnd(err, "inside a frame")
			return
		}
		c.nc.SetWriteDeadline(time.Now().Add(c.s.frameTimeout))
		if _, err := c.nc.Write(out); err != nil {
			log.Warn("answer not delivered: write failed", "remote", c.remote, "err", err)
			return
		}
		if !keep {
			c.lingerClose()
			return
		}
	}
}

// next reads the frame whose first byte has arrived and answers it. From
// its first byte a frame has FrameTimeout to arrive whole; an error means
// it did not (or the connection failed) and nothing of it was handled. The
// frame counts as in flight until its answer is ready.
func (c *conn) next() (out []byte, keep bool, err error) {
	c.s.frameStarted()
	defer c.s.frameEnded()
	c.nc.SetReadDeadline(time.Now().Add(c.s.frameTimeout))
	frame, err := wire.ReadFrame(c.br, c.frame[:0])
	c.frame = frame[:0]
	switch {
	case err == nil:
		out, keep = c.handleFrame(frame)
		return out, keep, nil
	case isPrefixError(err):
		return c.rejectFraming(frame, err), false, nil
	}
	return nil, false, err
}

// Bounds on lingerClose: how long and how much unread input it discards.
const (
	lingerTimeout = time.Second
	lingerMax     = 64 << 10
)

// lingerClose ends a connection the relay gives up on right after an
// answer (a lost framing, a panic). Closing a TCP socket with unread input
// sends a reset, which can destroy the answer in flight before the channel
// reads it. So the sending side is shut first (the channel sees the answer
// and then end of stream), and input is discarded for a short while, as
// net/http does for the same reason; then serve closes the socket.
func (c *conn) lingerClose() {
	tc, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || tc.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(min(lingerTimeout, c.s.frameTimeout)))
	io.Copy(io.Discard, io.LimitReader(c.br, lingerMax))
}

// keepOut keeps the answer buffer for the next frame, grown if it had to
// grow, and returns out.
func (c *conn) keepOut(out []byte) []byte {
	c.out = out[:0]
	return out
}

func isPrefixError(err error) bool {
	var pe *wire.PrefixError
	return errors.As(err, &pe)
}

// logReadEnd logs why reading stopped: the channel closing is routine; a
// timeout or an error inside a frame is worth a warning.
func (c *conn) logReadEnd(err error, where string) {
	log := c.s.log
	switch {
	case errors.Is(err, io.EOF) && where == "between frames":
		log.Debug("connection closed by channel", "remote", c.remote)
	case errors.Is(err, os.ErrDeadlineExceeded) && where == "between frames":
		log.Info("connection closed: idle timeout", "remote", c.remote, "idle_timeout", c.s.idleTimeout)
	case errors.Is(err, os.ErrDeadlineExceeded):
		log.Warn("frame dropped with its connection: frame timeout", "remote", c.remote, "frame_timeout", c.s.frameTimeout)
	case errors.Is(err, net.ErrClosed):
		log.Debug("connection closed by relay", "remote", c.remote)
	default:
		log.Warn("connection ended "+where, "remote", c.remote, "err", err)
	}
}
