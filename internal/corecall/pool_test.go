//go:build unix

package corecall

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
)

const poolGUID = "0123456789abcdef0123456789abcdef"

func poolCore(t *testing.T, states chan<- http.ConnState) (*httptest.Server, *Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"guid":"` + poolGUID + `","txId":"T1","balance":1,"postedAt":"20261129103000"}`))
	}))
	if states != nil {
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				states <- s
			}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, IdleConnTimeout: time.Hour})
	assert.NilError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return srv, c
}

func poolCall(t *testing.T, c *Client) Result {
	t.Helper()
	tx, ok := generated.LookupTransaction("BKTR0001")
	assert.Assert(t, ok)
	return c.Call(context.Background(), tx, poolGUID, &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "22003004005006", Amount: 1, Memo: "x"})
}

// idleOne returns the one idle connection of c's pool.
func idleOne(t *testing.T, c *Client) *pconn {
	t.Helper()
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	assert.Equal(t, len(c.pool.idle), 1)
	return c.pool.idle[0]
}

// waitReadable blocks until something (data, EOF, a reset) is waiting on
// pc's socket, without consuming it.
func waitReadable(t *testing.T, pc *pconn) {
	t.Helper()
	raw := pc.peek.raw
	assert.NilError(t, pc.cc.SetReadDeadline(time.Now().Add(5*time.Second)))
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(err, syscall.EAGAIN)
	})
	assert.NilError(t, err, "the core's close never reached the socket")
}

// A plain TCP connection the core closed while it idled is seen closed
// when a call takes it, and the call dials a new one: no E901 for a
// request written into a dead connection.
func TestPeekedStaleConnection(t *testing.T) {
	srv, c := poolCore(t, nil)
	res := poolCall(t, c)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	pc := idleOne(t, c)
	assert.Assert(t, pc.peek != nil, "a plain TCP connection is peeked at, not watched")
	assert.Assert(t, pc.peek.silent(), "an idle connection with nothing on it")

	srv.CloseClientConnections()
	waitReadable(t, pc)
	assert.Assert(t, !pc.peek.silent())

	res = poolCall(t, c)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
	assert.Assert(t, idleOne(t, c) != pc)
}

// A plain TCP connection idle past the idle timeout is closed (the core
// sees it go) and not used again.
func TestPeekedConnectionExpires(t *testing.T) {
	states := make(chan http.ConnState, 4)
	_, c := poolCore(t, states)
	c.pool.idleTimeout = 50 * time.Millisecond
	res := poolCall(t, c)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	select {
	case <-states:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection outlived its timeout")
	}
	c.pool.mu.Lock()
	assert.Equal(t, len(c.pool.idle), 0)
	c.pool.mu.Unlock()
	res = poolCall(t, c)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
}

// A core that sends bytes after its answer is out of step: the
// connection is not pooled.
func TestBytesAfterAnswerNotPooled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	body := `{"guid":"` + poolGUID + `","txId":"T1","balance":1,"postedAt":"20261129103000"}`
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
					conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body + "HTTP/1.1 200 OK\r\n"))
				}
			}()
		}
	}()
	c, err := New(Config{BaseURL: "http://" + ln.Addr().String()})
	assert.NilError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	for range 2 {
		res := poolCall(t, c)
		assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
		assert.Assert(t, !res.ConnReused)
	}
}
