// Package faultproxy is a TCP proxy for tests that puts a fault between a
// PostgreSQL client and its server at a chosen instant: it cuts a
// connection right after passing a COMMIT on, so that the server commits
// and the client never hears the answer (the answer to a COMMIT lost in a
// restart, a failover or a network cut). It can also cut every connection
// at once, or cut a connection at a COMMIT without passing it on, so that
// the client's COMMIT never lands (the server rolls back) and the client
// cannot tell it from a lost answer, or drop the client's CopyData (a
// standby's status messages). Everything else passes unchanged, both ways.
//
// It reads the client's side of the protocol (startup, then typed
// messages) to find the COMMIT: a simple query "COMMIT" (or "END"), or an
// extended-protocol Parse of one, cut after its Sync. The client must not
// use TLS to the proxy (sslmode=disable, or a server without TLS, which
// answers the client's SSLRequest with N); over TLS the bytes pass, unread,
// and nothing is cut.
package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections accepted on 127.0.0.1 to one target.
type Proxy struct {
	ln     net.Listener
	target string

	commitCuts  atomic.Int64 // COMMITs still to cut after
	cut         atomic.Int64 // connections cut after a COMMIT so far
	commitDrops atomic.Int64 // COMMITs still to drop
	dropped     atomic.Int64 // connections cut at a COMMIT not passed on so far
	muteCopy    atomic.Bool  // the client's CopyData messages are dropped

	mu     sync.Mutex
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and forwards every connection
// to target (host:port). Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, to give the client instead of the
// target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CutAfterCommits arms the proxy: each of the next n COMMITs, on any
// connection, is passed on to the server, and then that connection is cut
// before any answer reaches the client.
func (p *Proxy) CutAfterCommits(n int) { p.commitCuts.Store(int64(n)) }

// CommitsCut is how many connections were cut after a COMMIT so far.
func (p *Proxy) CommitsCut() int { return int(p.cut.Load()) }

// DropCommits arms the proxy: each of the next n COMMITs, on any
// connection, is not passed on, and that connection is cut, both sides:
// the server rolls the transaction back, and the client, whose COMMIT was
// sent, cannot know whether it landed. Only a simple-query COMMIT is
// dropped (pgx sends one so): an extended-protocol one has run on the
// server before its Sync shows it. Armed with CutAfterCommits too, drops
// go first.
func (p *Proxy) DropCommits(n int) { p.commitDrops.Store(int64(n)) }

// CommitsDropped is how many COMMITs were dropped so far.
func (p *Proxy) CommitsDropped() int { return int(p.dropped.Load()) }

// MuteCopyData sets whether the client's CopyData messages are dropped
// instead of passed on, on every connection. On a replication connection
// these are the receiver's status messages: the server goes on streaming
// WAL to a standby whose replies never reach it, as in the moment between
// a standby's connecting and its first status message.
func (p *Proxy) MuteCopyData(on bool) { p.muteCopy.Store(on) }

// CutAll closes every connection open now, both sides (a network cut).
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.closeBoth()
	}
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close() // the client sees the target refuse
			continue
		}
		l := &link{p: p, client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.closeBoth()
			continue
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go l.toServer()
		go l.toClient()
	}
}

// link is one proxied connection.
type link struct {
	p              *Proxy
	client, server net.Conn
	muted          atomic.Bool // once cut: nothing more reaches the client
	once           sync.Once
}

func (l *link) closeBoth() {
	l.once.Do(func() {
		l.muted.Store(true)
		l.client.Close()
		l.server.Close()
	})
}

func (l *link) forget() {
	l.p.mu.Lock()
	delete(l.p.conns, l)
	l.p.mu.Unlock()
}

// toClient copies the server's bytes to the client until the link is cut.
func (l *link) toClient() {
	defer l.p.wg.Done()
	defer l.forget()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 && !l.muted.Load() {
			if _, werr := l.client.Write(buf[:n]); werr != nil {
				l.closeBoth()
				return
			}
		}
		if err != nil {
			l.closeBoth()
			return
		}
	}
}

// Protocol codes of the untyped messages a client may send first.
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	codeStartup3      = 196608
)

// toServer forwards the client's messages, cutting after a COMMIT when
// armed.
func (l *link) toServer() {
	defer l.p.wg.Done()
	cutting := false
	defer func() {
		if !cutting { // a cut link is closed by toClient, once the server has read the COMMIT
			l.closeBoth()
		}
	}()
	r := &reader{r: l.client}
	// Untyped messages until the startup message: an SSLRequest first
	// (answered N by a server without TLS), or a cancel request.
	for {
		msg, err := r.untyped()
		if err != nil {
			return
		}
		if _, err := l.server.Write(msg); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == codeStartup3 {
			break
		}
		if code != codeSSLRequest && code != codeGSSENCRequest {
			// A cancel request, or a protocol this proxy does not read:
			// pass the rest unread.
			io.Copy(l.server, l.client)
			return
		}
	}
	parsedCommit := false
	for {
		typ, msg, err := r.typed()
		if err != nil {
			return
		}
		commit := false
		switch typ {
		case 'Q':
			commit = isCommit(msg[5:])
		case 'P':
			// Parse: name NUL, query NUL, …
			rest := msg[5:]
			if i := bytes.IndexByte(rest, 0); i >= 0 {
				parsedCommit = isCommit(rest[i+1:])
			}
		case 'S':
			commit, parsedCommit = parsedCommit, false
		}
		if typ == 'd' && l.p.muteCopy.Load() {
			continue
		}
		if commit && typ == 'Q' && l.p.commitDrops.Load() > 0 && l.p.commitDrops.Add(-1) >= 0 {
			l.p.dropped.Add(1)
			return // closes both sides: the COMMIT never reaches the server
		}
		if commit && l.p.commitCuts.Load() > 0 && l.p.commitCuts.Add(-1) >= 0 {
			cutting = true
			l.cutAfter(msg)
			return
		}
		if _, err := l.server.Write(msg); err != nil {
			return
		}
	}
}

// cutAfter passes the COMMIT (msg) on and cuts the link: the client's side
// at once, the server's with a FIN after the COMMIT (a close with unread
// input would send a reset, which could overtake it), its answer read and
// dropped.
func (l *link) cutAfter(msg []byte) {
	l.muted.Store(true)
	l.p.cut.Add(1)
	l.client.Close()
	if _, err := l.server.Write(msg); err != nil {
		return
	}
	if tc, ok := l.server.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	// toClient drains the server's answer until the server closes.
	l.server.SetReadDeadline(time.Now().Add(10 * time.Second))
}

// isCommit reports whether a query string (NUL-terminated) is a COMMIT.
func isCommit(q []byte) bool {
	if i := bytes.IndexByte(q, 0); i >= 0 {
		q = q[:i]
	}
	s := strings.TrimRight(strings.TrimSpace(string(q)), ";")
	return strings.EqualFold(s, "commit") || strings.EqualFold(s, "end") || strings.EqualFold(s, "commit transaction")
}

// reader reads whole protocol messages.
type reader struct{ r io.Reader }

var errTooLong = errors.New("faultproxy: message too long")

// untyped reads a length-prefixed message without a type byte.
func (r *reader) untyped() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > 1<<20 {
		return nil, errTooLong
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r.r, msg[4:])
	return msg, err
}

// typed reads a type byte, a length and the body; msg is all of it.
func (r *reader) typed() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, errTooLong
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r.r, msg[5:])
	return hdr[0], msg, err
}
