package corecall

import (
	"bufio"
	"errors"
	"os"
	"sync"
	"time"
)

// pconn is one keep-alive connection to the core: the countingConn the
// client dialled, the reader its responses are parsed from, and the buffer
// its requests are built in. It is used by one call at a time; between
// calls it sits in the pool with a watcher goroutine reading it.
type pconn struct {
	cc   *countingConn
	br   *bufio.Reader
	wbuf []byte

	// Set under pool.mu.
	idle bool // in pool.idle, its watcher running and nobody holding it

	// watched receives the watcher's verdict when a call takes the
	// connection out of the pool: true when it is still usable.
	watched chan bool

	// interrupt ends whatever read or write is under way on the
	// connection (a call's ctx ended); made once, not per call.
	interrupt func()
}

func newPconn(cc *countingConn) *pconn {
	return &pconn{
		cc:        cc,
		br:        bufio.NewReaderSize(cc, 4096),
		wbuf:      make([]byte, 0, 1024),
		watched:   make(chan bool, 1),
		interrupt: func() { _ = cc.SetDeadline(aLongTimeAgo) },
	}
}

// maxKeptWriteBuffer caps the request buffer a connection keeps between
// calls, so that one unusually large request does not pin its buffer.
const maxKeptWriteBuffer = 16 << 10

// pool keeps idle keep-alive connections, the most recently used first
// (the least likely to have been closed by the core).
//
// Every idle connection has a watcher goroutine blocked in a one-byte read
// (pconn.watch). It notices the core closing the connection (EOF, a
// reset), the core sending anything unasked, and the idle timeout (the
// read deadline), and then drops the connection from the pool: a stale
// connection is closed while idle instead of failing the next call after
// its request was written (an E901). A call that takes an idle connection
// ends its watcher's read by moving the read deadline into the past and
// waits for the watcher's verdict, so a connection is never read by two
// goroutines at once.
type pool struct {
	mu          sync.Mutex
	idle        []*pconn
	max         int
	idleTimeout time.Duration
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// get takes an idle connection, or returns nil when none is usable. Idle
// connections the core closed meanwhile are closed and skipped: nothing
// was written on them for this call.
func (p *pool) get() *pconn {
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

		// End the watcher's read and wait for its verdict. The wait is
		// bounded: a read with a deadline in the past returns at once
		// (net.Conn's contract).
		_ = pc.cc.SetReadDeadline(aLongTimeAgo)
		if <-pc.watched {
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
	// The deadline is set before the connection can be taken, so a taker's
	// aLongTimeAgo is never overwritten by it.
	if err := pc.cc.SetDeadline(time.Now().Add(p.idleTimeout)); err != nil {
		_ = pc.cc.Close()
		return
	}
	p.mu.Lock()
	if len(p.idle) >= p.max {
		p.mu.Unlock()
		_ = pc.cc.Close()
		return
	}
	pc.idle = true
	p.idle = append(p.idle, pc)
	p.mu.Unlock()
	go pc.watch(p)
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
	if pc.idle {
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
		// The watcher's read ends with the close; its verdict goes
		// unread into the buffered channel.
		_ = pc.cc.Close()
	}
}
