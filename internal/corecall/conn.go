package corecall

import (
	"errors"
	"net"
	"sync/atomic"
)

// errSealed is what a sealed connection answers to every write. The
// transport only sees it after the request it belonged to has already
// failed and been classified.
var errSealed = errors.New("corecall: connection sealed after a failed call: nothing more may be written")

// countingConn wraps every TCP connection the transport dials so that a
// failed call can prove whether any byte of its request was handed to the
// kernel (and so may have reached the core) or none was.
//
// The proof is a Dekker-style handshake on sequentially consistent atomics
// (Go's sync/atomic): Write announces itself in inflight before it looks at
// sealed; seal sets sealed before it looks at inflight. So either Write sees
// sealed and writes nothing, or seal sees the write (in flight, or finished
// with its byte count already added to written, because written is updated
// before inflight is decremented). There is no interleaving in which a byte
// is written that seal does not account for.
type countingConn struct {
	net.Conn
	written  atomic.Int64 // bytes the kernel accepted, over the connection's life
	inflight atomic.Int32 // Write calls between announcing and finishing
	sealed   atomic.Bool
}

// Write counts the bytes the kernel accepted. A write that fails returns how
// many bytes went out before the failure (net.Conn's contract, which Go's
// netFD honours), so a failed write of zero bytes put nothing on the wire.
func (c *countingConn) Write(p []byte) (int, error) {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	if c.sealed.Load() {
		return 0, errSealed
	}
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// mark returns the byte count at the moment a request was handed this
// connection. The transport hands a pooled connection to a new request only
// after the previous request's write has finished (persistConn.wroteRequest),
// so every byte counted after the mark belongs to the new request.
func (c *countingConn) mark() int64 { return c.written.Load() }

// sealNothingWritten forbids any further write on the connection, closes it,
// and reports whether not one byte was written since mark. Called only once
// the call using the connection has failed without a response: the
// connection is useless for anything else by then, and the transport drops
// connections whose request failed.
func (c *countingConn) sealNothingWritten(mark int64) bool {
	c.sealed.Store(true)
	busy := c.inflight.Load() != 0
	nothing := !busy && c.written.Load() == mark
	// A write blocked in the kernel is released by the close; whatever it
	// managed to hand over before that is already "maybe sent" (busy).
	_ = c.Conn.Close()
	return nothing
}
