package relay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// connState is where a connection's goroutine is, as far as Shutdown cares.
type connState int

const (
	// stateIdle: waiting for the first byte of the next frame. Shutdown
	// closes such a connection at once.
	stateIdle connState = iota
	// stateArriving: a frame has started but is not whole yet. Shutdown
	// gives it until the stop's bound to arrive (then it is served); one
	// that does not was never processed and is dropped.
	stateArriving
	// stateBusy: a whole frame is being handled; Shutdown lets it be
	// answered.
	stateBusy
	// stateClosed: closed by Shutdown while idle, or by a hard stop.
	stateClosed
)

// conn is one channel connection. Its buffers live as long as it does, so a
// frame costs no new buffer once the first has grown to size.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	addr   netip.Addr // the remote address, as its MaxConnsPerAddr share counts it
	client string     // the channel's verified TLS client certificate subject, if any
	// orgs, when Config.ClientOrgs is set, are the SRC_ORGs this
	// connection's client certificate may send as.
	orgs  map[string]bool
	br    *bufio.Reader
	frame []byte // the frame being handled (ReadFrame's buffer)
	out   []byte // the answer being built
	// body is the request body the last frame decoded into, which the
	// next frame of its transaction decodes into (wire.ParseRequestInto):
	// nothing keeps a frame's body once it is answered.
	body generated.RequestBody
	// call is the frame's core call, built into the last one's buffers
	// (corecall.PrepareInto): its Result.Body is the frame's until the
	// next frame's call.
	call corecall.Prepared
	// finishWait bounds the wait of each frame's FinishLater.
	finishWait boundedWait

	mu       sync.Mutex
	state    connState
	arriveBy time.Time // while arriving: when the frame must be whole
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
// stopping flag is read under c.mu, which Shutdown's sweep (stop)
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

// toArriving is called once a frame's first byte is in; false means
// Shutdown closed the connection meanwhile, and the frame must not be
// handled. The frame has FrameTimeout to arrive whole.
func (c *conn) toArriving() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return false
	}
	c.state = stateArriving
	c.arriveBy = time.Now().Add(c.s.frameTimeout)
	c.nc.SetReadDeadline(c.arriveBy)
	return true
}

// toBusy is called once the frame is whole (or its framing is lost); false
// means a hard stop closed the connection meanwhile: the frame was never
// processed. A busy frame counts in Server.handling until answered.
func (c *conn) toBusy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return false
	}
	c.state = stateBusy
	c.s.handling.Add(1)
	return true
}

// stop is Shutdown's sweep: an idle connection is closed; a frame still
// arriving must be whole by arriveBy (zero: no bound beyond its own); a
// busy one sees the server stopping when it next calls toIdle.
func (c *conn) stop(arriveBy time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.state == stateIdle:
		c.state = stateClosed
		c.nc.Close()
	case c.state == stateArriving && !arriveBy.IsZero() && arriveBy.Before(c.arriveBy):
		c.arriveBy = arriveBy
		c.nc.SetReadDeadline(arriveBy)
	}
}

// close is a hard stop's: after it, no frame of this connection starts
// being handled (toBusy is false), so Server.handling counts every frame
// the stop cut short.
func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = stateClosed
	c.nc.Close()
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
	// A new connection must finish its TLS handshake and start its first
	// frame within the shorter of FrameTimeout and IdleTimeout of being
	// accepted (SPEC 5.7): the wait for the first frame is idle time too,
	// and one that sends nothing would otherwise hold its MaxConns slot
	// for IdleTimeout. Between frames it waits IdleTimeout.
	firstBy := time.Now().Add(c.s.firstFrameTimeout())
	if !c.handshake(firstBy) {
		return
	}
	waitUntil, where := firstBy, "before its first frame"
	for {
		if !c.toIdle() {
			log.Debug("connection closed: relay stopping", "remote", c.remote)
			return
		}
		c.nc.SetReadDeadline(waitUntil)
		if _, err := c.br.Peek(1); err != nil {
			c.logReadEnd(err, where)
			return
		}
		if !c.toArriving() {
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
		waitUntil, where = time.Now().Add(c.s.idleTimeout), "between frames"
	}
}

// next reads the frame whose first byte has arrived and answers it. An
// error means it did not arrive whole in time (or the connection failed)
// and nothing of it was handled: an *unarrived. The frame counts as in
// flight until its answer is ready.
func (c *conn) next() (out []byte, keep bool, err error) {
	c.s.frameStarted()
	defer c.s.frameEnded()
	frame, err := wire.ReadFrame(c.br, c.frame[:0])
	c.frame = frame[:0]
	if err != nil && !isPrefixError(err) {
		return nil, false, &unarrived{received: len(frame), err: err}
	}
	if !c.toBusy() {
		return nil, false, &unarrived{received: len(frame), err: net.ErrClosed}
	}
	defer c.s.handling.Add(-1)
	if err != nil {
		return c.rejectFraming(frame, err), false, nil
	}
	out, keep = c.handleFrame(frame)
	return out, keep, nil
}

// unarrived is a frame that never arrived whole: nothing of it was handled.
type unarrived struct {
	received int // bytes of it that did arrive
	err      error
}

func (u *unarrived) Error() string { return u.err.Error() }
func (u *unarrived) Unwrap() error { return u.err }

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

// firstFrameTimeout is how long a new connection may take to finish its
// handshake and start its first frame.
func (s *Server) firstFrameTimeout() time.Duration { return min(s.frameTimeout, s.idleTimeout) }

// logReadEnd logs why reading stopped: the channel closing is routine; a
// timeout or an error inside a frame is worth a warning.
func (c *conn) logReadEnd(err error, where string) {
	log := c.s.log
	var u *unarrived
	switch {
	case errors.As(err, &u) && c.s.stopFlag.Load():
		// SPEC 5.8: not a stop cut short; the channel resends the frame
		// with the same GUID.
		c.s.droppedAtStop.Add(1)
		log.Warn("frame dropped unprocessed: the relay stopped before it arrived whole", "remote", c.remote, "bytes_received", u.received, "err", u.err)
	case errors.Is(err, io.EOF) && where != "inside a frame":
		log.Debug("connection closed by channel", "remote", c.remote)
	case errors.Is(err, os.ErrDeadlineExceeded) && where == "before its first frame":
		// A flood of silent connections must not become a flood of lines.
		n := c.s.silent.Add(1)
		if everySecond(&c.s.lastSilentLog) {
			log.Warn("connection closed: no frame started in time after connecting", "remote", c.remote, "waited", c.s.firstFrameTimeout(), "closed_total", n)
		}
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
