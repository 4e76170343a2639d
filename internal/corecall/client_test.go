package corecall_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
)

// notingDial dials TCP and reports every connection it makes, which
// reports its own close.
func notingDial(conns chan<- *closeNotingConn) corecall.DialFunc {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &closeNotingConn{Conn: conn, closed: make(chan struct{})}
		conns <- cc
		return cc, nil
	}
}

func waitClosed(t *testing.T, c *closeNotingConn, why string) {
	t.Helper()
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// A core that answers "Connection: close" gets a new connection for the
// next call; one that keeps it alive gets the same one back.
func TestConnectionCloseAnswered(t *testing.T) {
	core, srv := startSteerable(t)
	conns := make(chan *closeNotingConn, 4)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Dial: notingDial(conns)})

	core.answer = reply(http.StatusOK, okTransfer)
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, res.ConnReused)
	first := <-conns

	core.mu.Lock()
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		reply(http.StatusOK, okTransfer)(w, r)
	}
	core.mu.Unlock()
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, res.ConnReused)
	waitClosed(t, first, "the connection the core asked to close is still open")

	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
	assert.Equal(t, core.count(), 4)
}

// An idle connection is closed by the relay after IdleConnTimeout.
func TestIdleTimeout(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = reply(http.StatusOK, okTransfer)
	conns := make(chan *closeNotingConn, 4)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, IdleConnTimeout: 50 * time.Millisecond, Dial: notingDial(conns)})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	waitClosed(t, <-conns, "the idle connection outlived its timeout")
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
}

// A chunked answer (a core that flushes as it writes) is read whole.
func TestChunkedAnswer(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, okTransfer[:20])
		w.(http.Flusher).Flush()
		io.WriteString(w, okTransfer[20:])
	}
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	for range 3 {
		res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
		assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	}
	assert.Equal(t, core.count(), 3)
}

// A call whose ctx is cancelled while the core holds the request ends at
// once with the cancellation as its cause: sent, so E901.
func TestCancelledWhileWaiting(t *testing.T) {
	core, srv := startSteerable(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: time.Minute})
	ctx, cancel := context.WithCancelCause(context.Background())
	stopping := context.Canceled
	go func() {
		<-arrived
		cancel(stopping)
	}()
	res := c.Call(ctx, bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.ErrorIs(t, res.Err, stopping)
	assert.Assert(t, res.Elapsed < 30*time.Second, "took %v", res.Elapsed)
	assert.Equal(t, core.count(), 1)
}

// A call that ends while a pooled connection is in use leaves nothing
// behind that answers the next call: a connection whose call was
// interrupted is not pooled again.
func TestInterruptedConnectionNotReused(t *testing.T) {
	core, srv := startSteerable(t)
	release := make(chan struct{})
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		reply(http.StatusOK, okTransfer)(w, r)
	}
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: 100 * time.Millisecond})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	close(release) // the late answer is written now, to a connection the relay closed

	core.mu.Lock()
	core.answer = reply(http.StatusUnprocessableEntity, `{"result":"NO_ACCOUNT"}`)
	core.mu.Unlock()
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceNoAccount, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
}

// A pooled connection whose previous call's deadline has passed is still
// reused: the deadline is the new call's before the connection is looked at.
func TestReusedAfterPreviousDeadline(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = reply(http.StatusOK, okTransfer)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res := c.Call(ctx, bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	<-ctx.Done() // the connection's deadline, the call's, has passed
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, res.ConnReused)
}

// Calls under several contexts: ending one ends the calls made under it,
// and only those, whether the client watches that context for all its
// calls or for this call alone; after a context ended, another one's
// calls are ended by it too.
func TestCancelEndsOnlyItsCalls(t *testing.T) {
	core, srv := startSteerable(t)
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
			reply(http.StatusOK, okTransfer)(w, r)
		case <-r.Context().Done():
		}
	}
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: time.Minute})
	call := func(ctx context.Context) <-chan corecall.Result {
		out := make(chan corecall.Result, 1)
		go func() { out <- c.Call(ctx, bktr(t), guid, transfer("rent")) }()
		<-arrived
		return out
	}
	first, cancelFirst := context.WithCancelCause(context.Background())
	second, cancelSecond := context.WithCancelCause(context.Background())
	endFirst, endSecond := fmt.Errorf("first ended"), fmt.Errorf("second ended")
	a1, a2 := call(first), call(first) // the client adopts first
	b := call(second)                  // second is watched for its call alone

	cancelSecond(endSecond)
	res := <-b
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.ErrorIs(t, res.Err, endSecond)

	cancelFirst(endFirst)
	for _, ch := range []<-chan corecall.Result{a1, a2} {
		res := <-ch
		assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
		assert.ErrorIs(t, res.Err, endFirst)
	}

	third, cancelThird := context.WithCancelCause(context.Background())
	endThird := fmt.Errorf("third ended")
	c3 := call(third) // first has ended: the client adopts third
	cancelThird(endThird)
	res = <-c3
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.ErrorIs(t, res.Err, endThird)

	// A call under a live context is untouched by all that.
	fourth := call(context.Background())
	close(release)
	res = <-fourth
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Equal(t, core.count(), 5)
}
