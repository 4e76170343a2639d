package corecall

import (
	"errors"
	"net"
	"reflect"
	"sync/atomic"
)

// errSealed is what a sealed connection answers to every write. Nothing
// writes on a connection after its call failed (a failed call closes its
// connection); sealing makes that a fact rather than a convention.
var errSealed = errors.New("corecall: connection sealed after a failed call: nothing more may be written")

// countingConn wraps every connection the client dials so that a
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
	tls13    bool         // a TLS 1.3 connection: its first read may be the core refusing the relay's certificate
	written  atomic.Int64 // bytes the kernel accepted, over the connection's life
	inflight atomic.Int32 // Write calls between announcing and finishing
	sealed   atomic.Bool
	readAny  atomic.Bool // a Read has returned data
	refused  atomic.Bool // the first Read failed with a certificate alert
}

// Read notes whether the connection's first read was the core refusing
// the relay's certificate (see dialTLS).
func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.readAny.Store(true)
	} else if err != nil && c.tls13 && !c.readAny.Load() && isCertAlert(err) {
		c.refused.Store(true)
	}
	return n, err
}

// refusedCert reports whether the core refused the relay's certificate
// before sending a byte of application data: its handshake failed, so it
// processed nothing written on this connection. Only in TLS 1.3: in TLS
// 1.2 a refusal ends the handshake inside the dial, and a certificate
// alert after it would be a renegotiation, after the request was read.
func (c *countingConn) refusedCert() bool { return c.refused.Load() && !c.readAny.Load() }

// certAlerts are the TLS alerts a server sends when it refuses a client's
// certificate or the proof of its key (RFC 8446 §6.2): only during a
// handshake, never about application data.
var certAlerts = map[uint64]bool{
	40:  true, // handshake_failure
	42:  true, // bad_certificate
	43:  true, // unsupported_certificate
	44:  true, // certificate_revoked
	45:  true, // certificate_expired
	46:  true, // certificate_unknown
	48:  true, // unknown_ca
	49:  true, // access_denied
	51:  true, // decrypt_error (CertificateVerify)
	116: true, // certificate_required
}

// isCertAlert reports whether err is an alert the peer sent that refuses
// a certificate. crypto/tls reports a received alert as a *net.OpError
// with Op "remote error" whose Err is its (unexported) alert type, a uint8.
func isCertAlert(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	v := reflect.ValueOf(op.Err)
	return v.Kind() == reflect.Uint8 && certAlerts[v.Uint()]
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

// mark returns the byte count just before a call writes its request. A
// connection is used by one call at a time, and the previous call's write
// had returned before that call read its answer, so every byte counted
// after the mark belongs to the new request.
func (c *countingConn) mark() int64 { return c.written.Load() }

// sealNothingWritten forbids any further write on the connection, closes it,
// and reports whether not one byte was written since mark. Called only once
// the call using the connection has failed without a response: the
// connection is useless for anything else by then, and a failed call never
// returns its connection to the pool.
func (c *countingConn) sealNothingWritten(mark int64) bool {
	c.sealed.Store(true)
	busy := c.inflight.Load() != 0
	nothing := !busy && c.written.Load() == mark
	// A write blocked in the kernel is released by the close; whatever it
	// managed to hand over before that is already "maybe sent" (busy).
	_ = c.Conn.Close()
	return nothing
}
