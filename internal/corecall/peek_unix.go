//go:build unix

package corecall

import (
	"errors"
	"syscall"
)

// peeker looks at a socket without reading from it and without blocking:
// whether the peer has closed it, reset it, or sent anything.
type peeker struct {
	raw syscall.RawConn
	buf [1]byte
	// The result of the last peek, written by do: a method value made once
	// (newPeeker), so that a peek allocates nothing.
	n   int
	err error
	do  func(fd uintptr) bool
}

func newPeeker(sc syscall.Conn) *peeker {
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	pk := &peeker{raw: raw}
	pk.do = pk.recv
	return pk
}

func (pk *peeker) recv(fd uintptr) bool {
	pk.n, _, pk.err = syscall.Recvfrom(int(fd), pk.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true // never wait for the socket to become readable
}

// silent reports whether nothing is waiting on the socket: no byte, no
// end of stream, no error. Only then may a keep-alive connection carry a
// new request; an idle HTTP/1.1 connection on which the core has sent
// anything or closed its side is of no more use.
func (pk *peeker) silent() bool {
	if err := pk.raw.Read(pk.do); err != nil {
		return false
	}
	return errors.Is(pk.err, syscall.EAGAIN) || errors.Is(pk.err, syscall.EWOULDBLOCK)
}
