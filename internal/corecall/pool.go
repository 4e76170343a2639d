package corecall

import (
	"bufio"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"
)

// pconn is one keep-alive connection to the core: the countingConn the
// client dialled, the reader its responses are parsed from, and the buffer
// its requests are built in. It is used by one call at a time; between
// calls it sits in the pool.
type pconn struct {
	cc   *countingConn
	br   *bufio.Reader
	wbuf []byte

	// interrupt ends whatever read or write is under way on the
	// connection (a call's ctx ended); made once, not per call.
	interrupt func()
	// finishWatched is the client's cancelWatch.finish for this
	// connection, made once; interrupted is set (under the cancelWatch's
	// mutex) when the watch interrupted the call using it.
	finishWatched func() bool
	interrupted   bool

	// Set under pool.mu.
	idle      bool      // in pool.idle, nobody holding it
	idleSince time.Time // when it was last pooled

	// A plain TCP connection is checked with a non-blocking peek when it
	// is taken (peeker, see peek_unix.go), and closed by expiry when it
	// idles too long.
	peek   *peeker
	expiry *time.Timer

	// Any other connection (TLS, or a dialer's own net.Conn) has a
	// watcher goroutine while idle; watched receives its verdict when a
	// call takes the connection: true when it is still usable.
	watched chan bool
}

func newPconn(cc *countingConn) *pconn {
	pc := &pconn{
		cc:        cc,
		br:        bufio.NewReaderSize(cc, readBufferSize),
		wbuf:      make([]byte, 0, 1024),
		interrupt: func() { _ = cc.SetDeadline(aLongTimeAgo) },
	}
	if sc, ok := cc.Conn.(syscall.Conn); ok {
		pc.peek = newPeeker(sc)
	}
	if pc.peek == nil {
		pc.watched = make(chan bool, 1)
	}
	return pc
}

// readBufferSize is the size of a connection's read buffer: room for a
// usual answer's status line and header fields, each returned from the
// buffer without copying. A longer line is gathered by readLine, up to
// maxHeaderBytes, so the buffer size is no limit on what the core may
// send.
const readBufferSize = 4 << 10

// maxKeptWriteBuffer caps the request buffer a connection keeps between
// calls, so that one unusually large request does not pin its buffer.
const maxKeptWriteBuffer = 16 << 10

// pool keeps idle keep-alive connections, the most recently used first
// (the least likely to have been closed by the core), and makes sure a
// call is not handed one the core has closed, spoken on out of turn, or
// that idled past the idle timeout, as far as that can be known before
// the call writes on it:
//
//   - A plain TCP connection is peeked at, without blocking, when a call
//     takes it (peeker.silent): an EOF, a reset or any byte waiting on it
//     means the core is done with it, and it is closed instead of used. A
//     timer closes it once it idles past the idle timeout.
//   - Any other connection has a watcher goroutine blocked in a one-byte
//     read while it is idle (pconn.watch), which notices the same things
//     as they happen (the idle timeout is its read deadline) and drops the
//     connection. A call that takes such a connection ends the watcher's
//     read by moving the read deadline into the past and waits for its
//     verdict, so a connection is never read by two goroutines at once.
//     This costs a goroutine and two hand-offs per call, which the peek
//     avoids where the socket can be reached.
//
// Neither closes the window in which the core closes a connection just as
// a call takes it; the byte count then decides E901 or E902 (package
// comment).
type pool struct {
	mu          sync.Mutex
	idle        []*pconn
	max         int
	idleTimeout time.Duration
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// get takes an idle connection, with deadline as its deadline for reads
// and writes, or returns nil when none is usable. Idle connections found
// unusable are closed and skipped: nothing was written on them for this
// call.
func (p *pool) get(deadline time.Time) *pconn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		pc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		pc.idle = false
		p.mu.Unlock()

		if pc.peek != nil {
			pc.expiry.Stop() // a timer already firing finds pc not idle
			// The deadline first: the previous call's may have passed, and
			// the peek honours it.
			if time.Since(pc.idleSince) < p.idleTimeout && pc.cc.SetDeadline(deadline) == nil && pc.peek.silent() {
				return pc
			}
			_ = pc.cc.Close()
			continue
		}
		// End the watcher's read and wait for its verdict. The wait is
		// bounded: a read with a deadline in the past returns at once
		// (net.Conn's contract).
		_ = pc.cc.SetReadDeadline(aLongTimeAgo)
		if <-pc.watched && pc.cc.SetDeadline(deadline) == nil {
			return pc
		}
		_ = pc.cc.Close()
	}
}

// put returns a connection whose last answer was read completely, keeping
// it idle unless the pool is full.
func (p *pool) put(pc *pconn) {
	if cap(pc.wbuf) > maxKeptWriteBuffer {
		pc.wbuf = make([]byte, 0, 1024)
	}
	if pc.br.Buffered() > 0 {
		// Bytes after the answer: the core is out of step with us.
		_ = pc.cc.Close()
		return
	}
	if pc.peek == nil {
		// The deadline is set before the connection can be taken, so a
		// taker's aLongTimeAgo is never overwritten by it.
		if err := pc.cc.SetDeadline(time.Now().Add(p.idleTimeout)); err != nil {
			_ = pc.cc.Close()
			return
		}
	}
	p.mu.Lock()
	if len(p.idle) >= p.max {
		p.mu.Unlock()
		_ = pc.cc.Close()
		return
	}
	pc.idle = true
	pc.idleSince = time.Now()
	p.idle = append(p.idle, pc)
	if pc.peek != nil {
		if pc.expiry == nil {
			pc.expiry = time.AfterFunc(p.idleTimeout, func() { p.expire(pc) })
		} else {
			pc.expiry.Reset(p.idleTimeout)
		}
	}
	p.mu.Unlock()
	if pc.peek == nil {
		go pc.watch(p)
	}
}

// remove takes pc out of the idle list if it is still there (under p.mu),
// and reports whether it was.
func (p *pool) remove(pc *pconn) bool {
	if !pc.idle {
		return false
	}
	pc.idle = false
	for i, q := range p.idle {
		if q == pc {
			last := len(p.idle) - 1
			copy(p.idle[i:], p.idle[i+1:])
			p.idle[last] = nil
			p.idle = p.idle[:last]
			break
		}
	}
	return true
}

// expire closes pc if it is still idle and has been for the idle timeout
// (a timer of an earlier idle period may fire late).
func (p *pool) expire(pc *pconn) {
	p.mu.Lock()
	if !pc.idle || time.Since(pc.idleSince) < p.idleTimeout {
		p.mu.Unlock()
		return
	}
	p.remove(pc)
	p.mu.Unlock()
	_ = pc.cc.Close()
}

// watch blocks in a one-byte read of the idle connection pc until the
// core sends something or closes it, the idle timeout passes, or a call
// takes pc (pool.get). A connection still in the pool when the read ends
// is removed and closed: the core closed it, spoke out of turn, or it
// idled too long. One that was taken gets the verdict on pc.watched:
// usable only when the read ended by the taker's deadline with nothing
// read.
func (pc *pconn) watch(p *pool) {
	_, err := pc.br.Peek(1)
	p.mu.Lock()
	if p.remove(pc) {
		p.mu.Unlock()
		_ = pc.cc.Close()
		return
	}
	p.mu.Unlock()
	pc.watched <- err != nil && errors.Is(err, os.ErrDeadlineExceeded) && pc.br.Buffered() == 0
}

// closeIdle closes every idle connection.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	for _, pc := range idle {
		pc.idle = false
	}
	p.mu.Unlock()
	for _, pc := range idle {
		if pc.expiry != nil {
			pc.expiry.Stop()
		}
		// A watcher's read ends with the close; its verdict goes unread
		// into the buffered channel.
		_ = pc.cc.Close()
	}
}
